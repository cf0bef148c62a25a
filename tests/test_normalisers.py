"""`Normalisers`: a minibatch split into micro-batches (gradient accumulation, or ranks) gives
the same loss and gradient as the whole minibatch when each part is normalised by the global
counts, and a different one without them (the reason the class exists)."""

from __future__ import annotations

import pytest
import torch

from repro.objectives import (
    AGG_MODES,
    Minibatch,
    Normalisers,
    group_advantages,
    make_config,
    policy_loss,
)

B, T = 8, 6


def minibatch_parts():
    g = torch.Generator().manual_seed(3)
    logp = (-torch.rand(B, T, generator=g, dtype=torch.float64)).requires_grad_(True)
    old = logp.detach() + 0.1 * torch.randn(B, T, generator=g, dtype=torch.float64)
    mask = torch.ones(B, T, dtype=torch.bool)
    for i, n in enumerate([6, 2, 4, 5, 1, 6, 3, 4]):  # unequal lengths: counts matter
        mask[i, n:] = False
    group = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    adv, _ = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.5, 0.0, 1.0]), group)
    return logp, old, mask, adv.double(), group


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize(("name", "overrides"),
                         [("grpo", {}), ("dfpo", {"transform": "orth_proj"})])
def test_micro_batches_with_global_counts_equal_the_minibatch(name, overrides, mode):
    cfg = make_config(name, loss_agg_mode=mode, loss_norm_length=T, **overrides)
    logp, old, mask, adv, group = minibatch_parts()
    whole, _ = policy_loss(cfg, Minibatch(logp, old, mask, adv, group))
    (g_whole,) = torch.autograd.grad(whole, logp)

    halves = [torch.arange(0, 4), torch.arange(4, 8)]  # whole groups in each micro-batch
    norm = Normalisers(num_tokens=float(mask.sum()), num_seqs=float((mask.sum(-1) > 0).sum()))
    for normalisers in (norm, None):
        total = sum(policy_loss(cfg, Minibatch(logp[r], old[r], mask[r], adv[r], group[r]),
                                normalisers)[0] for r in halves)
        (g_parts,) = torch.autograd.grad(total, logp)
        if normalisers is not None:
            torch.testing.assert_close(total, whole)
            torch.testing.assert_close(g_parts, g_whole)
        else:  # each half divides by its own counts: a different (larger) step
            assert not torch.allclose(g_parts, g_whole)
