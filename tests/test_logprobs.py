"""Chunked per-token log-probs / entropy (repro.training.logprobs) and its benchmark's structure.

The chunked path must agree with the full-logits reference in values and gradients for any
chunking, and `response_logprobs` must agree with the model's own forward pass on right- and
left-padded batches.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from repro.bench.logprobs import measure, run_logprobs_bench
from repro.bench.options import LogprobsBenchConfig
from repro.models import TinyModelConfig, build_tiny
from repro.training.logprobs import (
    naive_token_logprobs_and_entropy,
    response_logprobs,
    token_logprobs_and_entropy,
)

N, H, V = 40, 16, 97
ATOL = 1e-5


def _inputs(dtype: torch.dtype = torch.float32, n: int = N) -> tuple[Tensor, Tensor, Tensor]:
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(n, H, generator=gen, dtype=dtype).requires_grad_(True)
    weight = (torch.randn(V, H, generator=gen, dtype=dtype) * 0.5).requires_grad_(True)
    return hidden, weight, torch.randint(V, (n,), generator=gen)


@pytest.mark.parametrize("chunk_size", [1, 7, 16, N, 1000])
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_chunked_matches_naive_values_and_grads(chunk_size: int, temperature: float) -> None:
    hidden, weight, targets = _inputs()
    upstream = torch.randn(N, generator=torch.Generator().manual_seed(1))
    results = []
    for fn in (token_logprobs_and_entropy, naive_token_logprobs_and_entropy):
        logp, entropy = fn(hidden, weight, targets, chunk_size=chunk_size, temperature=temperature)
        grads = torch.autograd.grad(logp, (hidden, weight), upstream)
        results.append((logp, entropy, *grads))
    for got, want in zip(*results, strict=True):
        torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
    logp, entropy = results[0][:2]
    assert logp.dtype == entropy.dtype == torch.float32
    assert logp.requires_grad and not entropy.requires_grad


def test_without_entropy_and_partial_grads() -> None:
    hidden, weight, targets = _inputs()
    weight.requires_grad_(False)
    logp, entropy = token_logprobs_and_entropy(hidden, weight, targets, with_entropy=False)
    assert entropy is None
    ref, _ = naive_token_logprobs_and_entropy(hidden, weight, targets, with_entropy=False)
    torch.testing.assert_close(logp, ref, atol=ATOL, rtol=0)
    (grad,) = torch.autograd.grad(logp.sum(), hidden)
    (ref_grad,) = torch.autograd.grad(ref.sum(), hidden)
    torch.testing.assert_close(grad, ref_grad, atol=ATOL, rtol=0)


def test_empty_input() -> None:
    hidden, weight, targets = _inputs(n=0)
    logp, entropy = token_logprobs_and_entropy(hidden, weight, targets)
    assert logp.shape == entropy.shape == (0,)
    logp.sum().backward()
    assert torch.count_nonzero(weight.grad) == 0


def test_half_precision_computes_in_float32() -> None:
    hidden, weight, targets = _inputs(torch.bfloat16)
    logp, entropy = token_logprobs_and_entropy(hidden, weight, targets, chunk_size=16)
    ref, ref_entropy = naive_token_logprobs_and_entropy(hidden, weight, targets)
    assert logp.dtype == torch.float32
    torch.testing.assert_close(logp, ref, atol=ATOL, rtol=0)
    torch.testing.assert_close(entropy, ref_entropy, atol=ATOL, rtol=0)
    logp.sum().backward()
    assert hidden.grad.dtype == weight.grad.dtype == torch.bfloat16


def test_gradcheck_float64() -> None:
    gen = torch.Generator().manual_seed(2)
    hidden = torch.randn(5, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(7, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(7, (5,), generator=gen)

    def logp(h: Tensor, w: Tensor) -> Tensor:
        return token_logprobs_and_entropy(h, w, targets, chunk_size=2, temperature=0.7)[0]

    assert torch.autograd.gradcheck(logp, (hidden, weight))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"chunk_size": 0}, "chunk_size"),
        ({"temperature": 0.0}, "temperature"),
        ({"targets": torch.zeros(N, dtype=torch.int32)}, "targets"),
        ({"weight": torch.zeros(V, H + 1)}, "hidden must be"),
    ],
)
def test_invalid_arguments(kwargs: dict, match: str) -> None:
    hidden, weight, targets = _inputs()
    args = {"hidden": hidden, "weight": weight, "targets": targets, **kwargs}
    with pytest.raises(ValueError, match=match):
        token_logprobs_and_entropy(**args)


# ---------------------------------------------------------------------------------------------
# response_logprobs on the tiny Qwen3

PROMPTS = (3, 5, 2)  # prompt lengths
RESPONSES = (4, 2, 6)  # response lengths


@pytest.fixture(scope="module")
def tiny() -> torch.nn.Module:
    model, _ = build_tiny(TinyModelConfig())
    return model


def _sequences() -> list[Tensor]:
    gen = torch.Generator().manual_seed(3)
    return [torch.randint(99, (p + r,), generator=gen)
            for p, r in zip(PROMPTS, RESPONSES, strict=True)]


def _batch(side: str) -> tuple[Tensor, Tensor, Tensor]:
    """(input_ids, attention_mask, response_mask) of the sequences, padded on ``side``."""
    seqs, width = _sequences(), max(len(s) for s in _sequences()) + 1  # at least one pad
    ids = torch.full((len(seqs), width), 99)
    attn = torch.zeros(len(seqs), width, dtype=torch.long)
    resp = torch.zeros(len(seqs), width, dtype=torch.bool)
    for b, (seq, p) in enumerate(zip(seqs, PROMPTS, strict=True)):
        start = 0 if side == "right" else width - len(seq)
        ids[b, start : start + len(seq)] = seq
        attn[b, start : start + len(seq)] = 1
        resp[b, start + p : start + len(seq)] = True
    return ids, attn, resp


def _reference(model: torch.nn.Module) -> tuple[list[Tensor], list[Tensor]]:
    """Per sequence, unpadded: log-probs and entropies of its response tokens from full logits."""
    logps, entropies = [], []
    for seq, p in zip(_sequences(), PROMPTS, strict=True):
        logits = model(seq[None]).logits[0, p - 1 : -1]
        logp_all = torch.log_softmax(logits, dim=-1)
        logps.append(logp_all.gather(-1, seq[p:, None])[:, 0])
        entropies.append(-(logp_all.exp() * logp_all).sum(-1).detach())
    return logps, entropies


@pytest.mark.parametrize("side", ["right", "left"])
def test_response_logprobs_matches_model_forward(tiny: torch.nn.Module, side: str) -> None:
    ids, attn, resp = _batch(side)
    logp, entropy = response_logprobs(tiny, ids, attn, resp, chunk_size=5)
    assert logp.shape == entropy.shape == ids.shape
    assert torch.equal(logp[~resp], torch.zeros(int((~resp).sum())))
    assert torch.equal(entropy[~resp], torch.zeros(int((~resp).sum())))
    ref_logp, ref_entropy = _reference(tiny)
    torch.testing.assert_close(logp[resp], torch.cat(ref_logp), atol=ATOL, rtol=0)
    torch.testing.assert_close(entropy[resp], torch.cat(ref_entropy), atol=ATOL, rtol=0)

    params = [p for p in tiny.parameters() if p.requires_grad]
    coef = torch.randn(ids.shape, generator=torch.Generator().manual_seed(4))
    grads = torch.autograd.grad((logp * coef).sum(), params)
    ref_loss = sum((lp * coef[resp].split(RESPONSES)[b]).sum() for b, lp in enumerate(ref_logp))
    for got, want in zip(grads, torch.autograd.grad(ref_loss, params), strict=True):
        torch.testing.assert_close(got, want, atol=ATOL, rtol=0)


def test_response_logprobs_rejects_unscorable_positions(tiny: torch.nn.Module) -> None:
    ids, attn, resp = _batch("left")
    first, on_pad, after_pad = resp.clone(), resp.clone(), resp.clone()
    first[:, 0] = True  # no previous token
    on_pad[0, 1] = True  # row 0 is left-padded by 2
    after_pad[2, int(attn[2].argmax())] = True  # first real token: its predecessor is padding
    for bad in (first, on_pad, after_pad):
        with pytest.raises(ValueError, match="response_mask"):
            response_logprobs(tiny, ids, attn, bad)


# ---------------------------------------------------------------------------------------------
# benchmark


def test_measure_counts_live_tensor_bytes() -> None:
    def fn() -> Tensor:
        scratch = torch.ones(1000, 1000)  # 4 MB, freed on return
        return scratch[:10].clone()  # 40 kB kept

    kept, peak, seconds = measure(fn)
    assert kept.shape == (10, 1000)
    assert 4_000_000 <= peak < 4_100_000 and seconds >= 0


def test_bench_result_structure() -> None:
    cfg = LogprobsBenchConfig(vocab=50, hidden=8, tokens=12, chunk_size=5, repeats=2)
    result = run_logprobs_bench(cfg, show=True)
    assert set(result["paths"]) == {"naive", "chunked"}
    for path in result["paths"].values():
        assert len(path["times_s"]) == 2 and path["peak_bytes"] > 0
    assert result["memory_ratio"] > 0 and result["time_ratio"] > 0
    assert all(v < 1e-4 for v in result["max_abs_diff"].values())
    (check,) = result["acceptance"]
    assert isinstance(check["passed"], bool)


@pytest.mark.parametrize(
    ("kwargs", "field"), [({"vocab": 0}, "vocab"), ({"dtype": "int8"}, "dtype"),
                          ({"repeats": 1.5}, "repeats"), ({"seed": -1}, "seed")],
)
def test_bench_config_validation_names_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=rf"LogprobsBenchConfig\.{field} "):
        LogprobsBenchConfig(**kwargs)
