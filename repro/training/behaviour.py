"""The behaviour policy of a rollout under the realistic off-policy sources (issue 38), one rule
for both engines: `staleness` d (the policy of d rollout steps earlier samples, as one-step-off
and d = 2 asynchronous trainers run) and `sampler_dtype` (a bf16 copy of the policy samples,
as a bf16 inference engine does next to an fp32 trainer). The behaviour policy both samples
the rollout and gives its logp_old; the loss then scores with the current policy.

The behaviour policy is the training model itself with other tensors swapped in for the
rollout (`behaving_as`): no second model is built, the current tensors come back untouched
(the very objects, so the optimizer's references and the master weights stay exact), and TRL's
own generation path (which samples with the trainer's model) samples as the behaviour policy
without being reimplemented.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor


def lagged_weights(model: Any, lagged: list[dict[str, Tensor]],
                   staleness: int) -> dict[str, Tensor] | None:
    """The weights that sample this rollout step under `staleness` = d: those of d rollout
    steps ago (the start's while fewer steps were run), or None when the policy itself samples
    (d = 0, and the first step). Then records the current weights in `lagged` (RunState's, so
    checkpoints carry the history), keeping the last d."""
    if staleness == 0:
        return None
    behind = lagged[0] if lagged else None
    lagged.append({k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()})
    del lagged[:-staleness]
    return behind


@contextmanager
def behaving_as(model: Any, weights: dict[str, Tensor] | None,
                dtype: str | None) -> Iterator[bool]:
    """Within the block, `model` is the behaviour policy: `weights` (a state dict; None: its
    own) cast to `dtype` (None: kept), as `model.to(dtype)` casts (floating parameters and
    buffers). Yields whether anything was swapped. On exit every parameter and buffer gets its
    own tensor back. Not for a sharded (FSDP) model, whose tensors are shards."""
    if weights is None and dtype is None:
        yield False
        return
    tensors = dict(model.named_parameters()) | dict(model.named_buffers())
    own = {name: t.data for name, t in tensors.items()}
    cast = None if dtype is None else getattr(torch, dtype)
    try:
        with torch.no_grad():
            for name, t in tensors.items():
                src = own[name] if weights is None else weights.get(name, own[name])
                src = src.to(own[name].device, own[name].dtype)
                t.data = src.to(cast) if cast is not None and src.is_floating_point() else src
        yield True
    finally:
        for name, t in tensors.items():
            t.data = own[name]
