"""Per-row random streams for HF `generate`: the Gumbel-max trick, one generator per row.

`GumbelSampler` replaces torch's global-RNG multinomial: argmax of log p + Gumbel noise is an
exact draw from p, so `generate` runs in greedy mode over the noisy scores, and each row's
generator is seeded by `repro.generation.streams.stream_seed` (why: that module's docstring).
"""

from __future__ import annotations

import torch
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from repro.generation.base import SamplingConfig
from repro.generation.streams import stream_seed


class GumbelSampler(LogitsProcessor):
    """Adds per-row Gumbel noise to the log-probabilities; the greedy argmax is then a sample.

    Row r of the batch uses `generators[r]` and draws exactly one vocabulary-sized vector per
    step, so its tokens depend on its own stream and its own logits only."""

    def __init__(self, generators: list[torch.Generator]) -> None:
        self.generators = generators

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if scores.shape[0] != len(self.generators):
            raise RuntimeError(f"GumbelSampler: {scores.shape[0]} rows, "
                               f"{len(self.generators)} generators")
        vocab = scores.shape[-1]
        uniform = torch.stack([torch.rand(vocab, generator=g, dtype=torch.float64)
                               for g in self.generators])
        tiny = torch.finfo(torch.float64).tiny
        gumbel = -torch.log(-torch.log(uniform.clamp(min=tiny, max=1.0 - 1e-16)))
        logp = torch.log_softmax(scores.double(), dim=-1)
        return (logp + gumbel.to(scores.device)).to(scores.dtype)


def sampling_processors(sampling: SamplingConfig, keys: list[str]) -> LogitsProcessorList:
    """Transformers' own warpers (its order: temperature, top-k, top-p, min-p), then the noise.
    Rows are prompt-major, `sampling.n` samples per prompt (the engine repeats each prompt)."""
    processors: list[LogitsProcessor] = [TemperatureLogitsWarper(sampling.temperature)]
    if sampling.top_k > 0:
        processors.append(TopKLogitsWarper(sampling.top_k))
    if sampling.top_p < 1.0:
        processors.append(TopPLogitsWarper(sampling.top_p))
    if sampling.min_p > 0:
        processors.append(MinPLogitsWarper(sampling.min_p))
    generators = [
        torch.Generator().manual_seed(stream_seed(sampling.seed, key, j))
        for key in keys for j in range(sampling.n)
    ]
    return LogitsProcessorList([*processors, GumbelSampler(generators)])
