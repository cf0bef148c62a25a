"""Cancellation metrics of one optimizer update that arrives in pieces.

Under gradient accumulation an update is A micro-steps on each of W processes. Each piece's
coefficients c = -dL/dlogp are already the whole update's (its loss is its share under the
update's global normalisers and DFPO's pre-pass weights), but a group, and so a shared node,
may span micro-steps. Hence: keep this process's pieces until the update's last micro-step,
reduce them to `cancellation_sums` (the process holds whole groups), sum those over processes,
and compute the metrics once. Every process gets the same numbers.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.nn.functional import pad

from repro.diagnostics.cancellation import cancellation_sums, metrics_from_sums


class UpdateDiagnostics:
    """Collects (coef, tokens, mask, group, advantages) pieces of one update; `finish` computes."""

    def __init__(self) -> None:
        self._pieces: list[tuple[Tensor, ...]] = []

    def add(self, coef: Tensor, tokens: Tensor, mask: Tensor, group: Tensor, adv: Tensor) -> None:
        self._pieces.append(tuple(t.detach() for t in (coef, tokens, mask, group, adv)))

    def finish(self, vocab_size: int, n_types: int, group_size: int,
               all_reduce_sum: Callable[[Tensor], Tensor] | None = None) -> dict[str, float]:
        """Metrics of the update. `all_reduce_sum` sums a float64 vector over processes (a
        collective: every process must call `finish` for the same update). If this process's
        pieces do not hold whole groups of `group_size`, its share is NaN, and so is the result."""
        width = max(p[0].size(1) for p in self._pieces)
        coef, tokens, mask = (torch.cat([pad(p[i], (0, width - p[i].size(1))) for p in
                                         self._pieces]) for i in range(3))
        group = torch.cat([p[3] for p in self._pieces])
        adv = torch.cat([p[4] for p in self._pieces])
        self._pieces = []
        sums = cancellation_sums(coef, tokens, mask, group, adv, n_types)
        if not bool((torch.unique(group, return_counts=True)[1] == group_size).all()):
            sums = torch.full_like(sums, float("nan"))
        if all_reduce_sum is not None:
            sums = all_reduce_sum(sums)
        return metrics_from_sums(sums, vocab_size)
