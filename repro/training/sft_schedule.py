"""When SFT steps, at what learning rate, and on which batches.

Why a module of its own: the tiny default's stage 1 learns its arithmetic in a sudden
transition whose timing moves with any perturbation of the trajectory (seed, thread count, CPU
kernels; docs/sft-robustness.md). A fixed cosine schedule then decides the start's quality by
where the transition happens to land. The gated schedule removes that dependence: it runs the
same cosine and, if the measured quality is below a gate at its end, keeps training at the
cosine's floor rate until the gate passes (or a cap is hit, which is an error).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

import torch
from transformers.trainer_pt_utils import get_length_grouped_indices

MIN_LR_RATIO = 0.1  # cosine decays to this fraction of lr: late steps still learn a little


def lr_factor(step: int, warmup: int, steps: int) -> float:
    """Linear warm-up to 1, then cosine decay to MIN_LR_RATIO at the last step."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return MIN_LR_RATIO + (1 - MIN_LR_RATIO) * 0.5 * (1 + math.cos(math.pi * progress))


def floor_factor(step: int, warmup: int, steps: int) -> float:
    """`lr_factor` up to the last step of the cosine, then its floor MIN_LR_RATIO for as long as
    a quality gate keeps the run going past `steps`."""
    return lr_factor(min(step, steps - 1), warmup, steps)


def plain_batches(n: int, batch_size: int, seed: int) -> Iterator[list[int]]:
    """Endless seeded epochs of shuffled indices, cut into batches across epoch boundaries."""
    rng, stream = random.Random(seed), []
    while True:
        while len(stream) < batch_size:
            order = list(range(n))
            rng.shuffle(order)
            stream.extend(order)
        yield stream[:batch_size]
        stream = stream[batch_size:]


def grouped_batches(lengths: list[int], batch_size: int, seed: int) -> Iterator[list[int]]:
    """Endless seeded epochs of length-grouped batches (transformers' `group_by_length`), the
    batch order shuffled; an epoch's ragged last batch is dropped.

    Why: stage 1's few long demos (synth-lcb, ~730 tokens against ~200) pad a quarter of plain
    batches of 8 to ~4x their width; grouped, 97% of the computed tokens are real ones and an
    epoch costs about half (docs/sft-robustness.md, section 1).
    """
    generator, rng = torch.Generator().manual_seed(seed), random.Random(seed)
    while True:
        order = get_length_grouped_indices(lengths, batch_size, generator=generator)
        batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
        rng.shuffle(batches)
        yield from (b for b in batches if len(b) == batch_size)
