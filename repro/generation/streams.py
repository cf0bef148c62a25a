"""Independent random streams per sample: (seed, key, sample index) -> its own generator.

A completion must not depend on which other prompts shared its batch, how large the batch was,
or in which order prompts were sent: the bootstrap over problems assumes independent samples,
and a rerun with another batch size must reproduce every completion. So each sample draws its
randomness from a stream seeded by a hash of (run seed, key, sample index) alone, where the key
names the problem ("benchmark/problem_id"): two problems with identical prompts still get
different completions.

HF: `GumbelSampler` replaces torch's global-RNG multinomial with the Gumbel-max trick, one
generator per row (argmax of log p + Gumbel noise is an exact draw from p); `generate` then runs
in greedy mode over the noisy scores. vLLM: one request per sample with its own seed.
"""

from __future__ import annotations

import hashlib

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


def stream_seed(seed: int, key: str, sample: int) -> int:
    """A 63-bit seed that is a function of (seed, key, sample) only."""
    digest = hashlib.sha256(f"{seed}\x1f{key}\x1f{sample}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def default_keys(count: int) -> list[str]:
    """Keys when the caller names no problems: the prompt's position in the call."""
    return [str(i) for i in range(count)]


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
