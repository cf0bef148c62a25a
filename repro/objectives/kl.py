"""KL penalty to a reference policy (off by default in the trainer), verl's `low_var_kl` (k3).

Kept beside the policy losses so that every term of the training loss comes from this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor


def k3_kl_penalty(logp: Tensor, ref_logp: Tensor, mask: Tensor) -> Tensor:
    """Token-mean of exp(ref - logp) - (ref - logp) - 1 (>= 0, unbiased for KL(pi || ref))."""
    import torch

    diff = torch.where(mask, ref_logp.detach() - logp, torch.zeros_like(logp)).clamp(-20, 20)
    k3 = (torch.exp(diff) - diff - 1).clamp(max=10)
    return torch.where(mask, k3, torch.zeros_like(k3)).sum() / mask.sum().clamp_min(1)
