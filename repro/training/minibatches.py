"""A run step's seeded randomness, one rule for every engine: the step seed (its rollout
sampling, the coherence bench's batches) and the order of the groups over its K minibatch
updates. The native loop and the TRL engine (`ReproGRPOTrainer`) both call `minibatch_orders`,
so the two engines update on the same groups in the same order."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor


def step_seed(seed: int, step: int) -> int:
    """The seed of rollout step `step` (1-based) of a run with seed `seed`."""
    return seed * 1_000_003 + step


def minibatch_orders(seed: int, step: int, n_groups: int, k: int,
                     passes: int = 1) -> list[Tensor]:
    """Per pass over the step's rollout, [K, n_groups/K] group indices of each update: fresh
    permutations drawn in turn from one generator seeded by the step seed (pass 1's order does
    not depend on the number of passes)."""
    import torch

    gen = torch.Generator().manual_seed(step_seed(seed, step))
    return [torch.randperm(n_groups, generator=gen).view(k, -1) for _ in range(passes)]
