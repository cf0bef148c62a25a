"""Generation engines: HF on the tiny Qwen3 (CPU), vLLM's conversion logic against a fake vllm,
and the per-sample random streams both share."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass

import pytest
import torch

from repro.generation.base import SamplingConfig
from repro.generation.factory import resolve_engine
from repro.generation.hf import HFEngine
from repro.generation.streams import stream_seed
from repro.models import TinyModelConfig, build_tiny


@pytest.fixture(scope="module")
def tiny():
    return build_tiny(TinyModelConfig(seed=3))


def prompts_for(tok, n):
    return [
        tok.apply_chat_template([{"role": "user", "content": "x" * (i + 1) + "?"}], tokenize=False,
                                add_generation_prompt=True)
        for i in range(n)
    ]


def test_hf_engine_shapes_determinism_and_finish_reasons(tiny):
    model, tok = tiny
    engine = HFEngine(model, tok, batch_size=2)
    sampling = SamplingConfig(temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=12, n=3, seed=5)
    out = engine.generate(prompts_for(tok, 5), sampling)
    assert [len(c) for c in out] == [3] * 5
    again = engine.generate(prompts_for(tok, 5), sampling)
    assert ([[c.token_ids for c in row] for row in out]
            == [[c.token_ids for c in row] for row in again])
    other = engine.generate(prompts_for(tok, 5),
                            SamplingConfig(**{**sampling.as_record(), "seed": 6}))
    assert [[c.token_ids for c in r] for r in other] != [[c.token_ids for c in r] for r in out]
    for row in out:
        for c in row:
            assert 0 <= c.n_tokens <= 12
            assert tok.pad_token_id not in c.token_ids  # a sampled pad is a stop, never text
            ends_with_eos = c.n_tokens > 0 and c.token_ids[-1] == tok.eos_token_id
            assert c.finish_reason == ("stop" if ends_with_eos or c.n_tokens < 12 else "length")


def test_a_sampled_pad_ends_the_response_and_is_dropped(tiny):
    """A model that always samples pad yields empty "stop" completions, not pad text to train."""
    model, tok = tiny
    engine = HFEngine(model, tok, batch_size=2)
    bias = torch.full((len(tok),), -1e4)
    bias[tok.pad_token_id] = 0.0
    head = model.get_output_embeddings()
    head.bias = torch.nn.Parameter(bias)
    try:
        out = engine.generate(prompts_for(tok, 2), SamplingConfig(temperature=1.0, top_k=0,
                                                                  top_p=1.0, max_new_tokens=5))
    finally:
        head.bias = None
    assert [(c.token_ids, c.finish_reason) for row in out for c in row] == [((), "stop")] * 2


def test_hf_streams_ignore_batching_order_and_neighbours(tiny):
    """Each sample's stream is (seed, key, index) alone: batch size 1, 7 or 30 and the prompt
    order give identical completions, and identical prompts of two problems differ."""
    model, tok = tiny
    prompts = prompts_for(tok, 30)
    keys = [f"bench/{i}" for i in range(30)]
    sampling = SamplingConfig(temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=6, n=2, seed=4)

    def ids(out):
        return [[c.token_ids for c in row] for row in out]

    by_size = {bs: ids(HFEngine(model, tok, batch_size=bs).generate(prompts, sampling, keys=keys))
               for bs in (1, 7, 30)}
    assert by_size[1] == by_size[7] == by_size[30]
    assert len({row[0] for row in by_size[1]}) > 20  # samples really are random
    backwards = HFEngine(model, tok, batch_size=30).generate(prompts[::-1], sampling,
                                                            keys=keys[::-1])
    assert ids(backwards)[::-1] == by_size[30]
    twins = HFEngine(model, tok, batch_size=2).generate([prompts[0]] * 2, sampling,
                                                       keys=["bench/a", "bench/b"])
    assert ids(twins)[0] != ids(twins)[1]
    with pytest.raises(ValueError, match="2 prompts but 1 keys"):
        HFEngine(model, tok).generate(prompts[:2], sampling, keys=["x"])


def test_hf_engine_top_k_one_is_the_argmax(tiny):
    """The warpers act before the noise: top_k = 1 leaves no choice, whatever the stream."""
    model, tok = tiny
    prompt = prompts_for(tok, 1)
    (sampled,), = HFEngine(model, tok).generate(
        prompt, SamplingConfig(temperature=1.0, top_k=1, max_new_tokens=6, seed=9))
    (greedy,), = HFEngine(model, tok).generate(prompt, SamplingConfig(temperature=0.0,
                                                                      max_new_tokens=6))
    assert sampled.token_ids == greedy.token_ids


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_hf_engine_logprobs_equal_a_teacher_forced_forward(tiny, temperature):
    """Behaviour log-probs from the engine (left-padded batch) match an unpadded forward pass
    of the sampling policy softmax(logits / T)."""
    model, tok = tiny
    engine = HFEngine(model, tok, batch_size=3)
    prompts = prompts_for(tok, 3)
    out = engine.generate(prompts, SamplingConfig(temperature=temperature, top_k=0, top_p=1.0,
                                                  max_new_tokens=10, n=2), return_logprobs=True)
    for prompt, row in zip(prompts, out, strict=True):
        p_ids = tok(prompt, add_special_tokens=False, return_tensors="pt").input_ids[0]
        for c in row:
            ids = torch.cat([p_ids, torch.tensor(c.token_ids)])[None]
            with torch.no_grad():
                logits = model(ids).logits[0, len(p_ids) - 1 : -1]
            ref = torch.log_softmax(logits.float() / temperature, -1).gather(
                -1, torch.tensor(c.token_ids)[:, None])[:, 0]
            torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=1e-4, rtol=1e-4)


def test_hf_engine_refuses_logprobs_of_truncated_sampling_before_generating(tiny, monkeypatch):
    model, tok = tiny
    monkeypatch.setattr(model, "generate", lambda **_: pytest.fail("generated before refusing"))
    with pytest.raises(ValueError, match="HFEngine: log-probs of truncated sampling"):
        HFEngine(model, tok).generate(prompts_for(tok, 1), SamplingConfig(top_k=20),
                                      return_logprobs=True)


def test_hf_engine_greedy_follows_the_argmax(tiny):
    model, tok = tiny
    engine = HFEngine(model, tok)
    prompt = prompts_for(tok, 1)
    (c,), = engine.generate(prompt, SamplingConfig(temperature=0.0, max_new_tokens=6))
    ids = tok(prompt[0], add_special_tokens=False, return_tensors="pt").input_ids
    for t in c.token_ids:
        with torch.no_grad():
            nxt = int(model(ids).logits[0, -1].argmax())
        assert nxt == t
        ids = torch.cat([ids, torch.tensor([[t]])], dim=1)


def test_sampling_config_errors_name_the_field():
    with pytest.raises(ValueError, match=r"SamplingConfig.top_p"):
        SamplingConfig(top_p=0.0)
    with pytest.raises(ValueError, match=r"SamplingConfig.n "):
        SamplingConfig(n=0)


def test_auto_engine_is_hf_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_engine("auto") == "hf"
    with pytest.raises(ValueError, match="engine must be one of"):
        resolve_engine("tgi")


# ---- vLLM: the engine's own logic, against a stand-in module (vllm needs a GPU) -----------------


@dataclass
class FakeLogprob:
    logprob: float


@dataclass
class FakeOutput:
    text: str
    token_ids: list
    finish_reason: str
    logprobs: list | None


class FakeLLM:
    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def get_tokenizer(self):
        return "the model's tokenizer"

    def generate(self, prompts, params):
        self.params = params
        return [
            types.SimpleNamespace(outputs=[
                FakeOutput(f"{p}-{j}", [1, 2], "length" if j else "stop",
                           [{1: FakeLogprob(-0.5)}, {2: FakeLogprob(-1.5)}])
                for j in range(sp["n"])
            ])
            for p, sp in zip(prompts, params, strict=True)
        ]


def test_vllm_engine_maps_sampling_and_outputs(monkeypatch):
    fake = types.SimpleNamespace(LLM=FakeLLM, SamplingParams=lambda **kw: kw)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    from repro.generation.vllm_engine import VLLMEngine

    engine = VLLMEngine("some/model", seed=3)
    sampling = SamplingConfig(top_p=1.0, top_k=0, n=2, seed=10, max_new_tokens=7)
    out = engine.generate(["a", "b"], sampling, keys=["aime25/1", "aime25/2"], return_logprobs=True)
    params = engine.llm.params
    # one request per sample, each seeded by its own stream (not by its position in the call)
    assert [p["seed"] for p in params] == [stream_seed(10, k, j)
                                           for k in ("aime25/1", "aime25/2") for j in (0, 1)]
    assert {p["n"] for p in params} == {1}
    assert params[0]["top_k"] == -1 and params[0]["max_tokens"] == 7 and params[0]["logprobs"] == 0
    assert [c.text for c in out[1]] == ["b-0", "b-0"]
    assert [c.finish_reason for c in out[0]] == ["stop", "stop"]
    assert out[0][0].logprobs == (-0.5, -1.5)
    # evaluation renders prompts with the engine's tokenizer; no GPU visible -> one-way TP
    assert engine.tokenizer == "the model's tokenizer"
    assert engine.llm.kwargs["tensor_parallel_size"] == 1
    # log-probs after temperature, as HFEngine's (vLLM's default is T = 1: test_vllm_logprobs.py)
    assert engine.llm.kwargs["logprobs_mode"] == "processed_logprobs"


def test_vllm_engine_missing_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    from repro.generation.vllm_engine import VLLMEngine

    with pytest.raises(RuntimeError, match=r"pip install 'dfpo-repro\[gpu\]'"):
        VLLMEngine("some/model")
