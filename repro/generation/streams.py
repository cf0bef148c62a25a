"""Independent random streams per sample: (seed, key, sample index) -> its own generator.

A completion must not depend on which other prompts shared its batch, how large the batch was,
or in which order prompts were sent: the bootstrap over problems assumes independent samples,
and a rerun with another batch size must reproduce every completion. So each sample draws its
randomness from a stream seeded by a hash of (run seed, key, sample index) alone, where the key
names the problem ("benchmark/problem_id"): two problems with identical prompts still get
different completions.

HF: `repro.generation.gumbel` draws each row from its own generator seeded here. vLLM: one
request per sample with its own seed. This module imports neither torch nor transformers: the
workflow's parse-time planner reads the vLLM engine, which uses these seeds.
"""

from __future__ import annotations

import hashlib


def stream_seed(seed: int, key: str, sample: int) -> int:
    """A 63-bit seed that is a function of (seed, key, sample) only."""
    digest = hashlib.sha256(f"{seed}\x1f{key}\x1f{sample}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def default_keys(count: int) -> list[str]:
    """Keys when the caller names no problems: the prompt's position in the call."""
    return [str(i) for i in range(count)]
