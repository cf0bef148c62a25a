"""c_{i,t} = -dL/dlogp_{i,t}: how strongly the loss pushes grad log pi of each token."""

from __future__ import annotations

import torch
from torch import Tensor


def token_coefficients(loss: Tensor, logp: Tensor, *, retain_graph: bool = True) -> Tensor:
    """One autograd call on `logp` (a non-leaf [B, T] tensor the loss was built from).

    The graph is kept by default so the caller can still run loss.backward() for the update.
    """
    (grad,) = torch.autograd.grad(loss, logp, retain_graph=retain_graph, allow_unused=True)
    if grad is None:
        return torch.zeros_like(logp)
    return -grad.detach()
