"""repro.engines.core: a minibatch split into pieces (micro-steps, processes) gives the gradient
of the whole minibatch, for DFPO only with the precomputed whole-group weights."""

from __future__ import annotations

import pytest
import torch

from repro.engines.core import global_normalisers, loss_and_diagnostics, sequence_weights
from repro.objectives import algorithm_names, make_config

B, T, G = 8, 6, 4


def batch(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(B, T, generator=gen, dtype=torch.float64) * 2).requires_grad_()
    logp_old = logp.detach() + 0.3 * torch.randn(B, T, generator=gen, dtype=torch.float64)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[torch.arange(B), torch.randint(2, T, (B,), generator=gen)] = False  # ragged lengths
    mask = mask.cumprod(-1).bool()
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 1.0, -1.0], dtype=torch.float64)
    group = torch.arange(B) // G
    tokens = torch.randint(0, 5, (B, T), generator=gen)
    return logp, logp_old, mask, adv, group, tokens


def grad_of(cfg, pieces, world_size=1, weights=None):
    """Sum over pieces of d(loss)/d logp, with the global normalisers of all pieces."""
    logp, logp_old, mask, adv, group, tokens = batch()
    counts = sum(global_normalisers(mask[rows]).num_tokens for rows in pieces)
    seqs = sum(global_normalisers(mask[rows]).num_seqs for rows in pieces)
    norm = type(global_normalisers(mask))(num_tokens=counts, num_seqs=seqs)
    total = torch.zeros_like(logp)
    for rows in pieces:
        sw = None if weights is None else weights[rows]
        loss, _ = loss_and_diagnostics(cfg, logp[rows], logp_old[rows], mask[rows], adv[rows],
                                       group[rows], tokens[rows], 5, norm=norm,
                                       world_size=world_size, seq_weight=sw, diagnostics=False)
        (g,) = torch.autograd.grad(loss, logp)
        total += g
    return total / world_size


WHOLE = [torch.arange(B)]
SPLIT = [torch.tensor([0, 1, 4, 5]), torch.tensor([2, 3, 6, 7])]  # each group split 2 + 2


@pytest.mark.parametrize("transform", ["min_replace", "orth_proj"])
def test_dfpo_split_group_with_prepass_weights_equals_whole_group(transform):
    cfg = make_config("dfpo", transform=transform)
    logp, logp_old, mask, adv, group, _ = batch()
    weights = sequence_weights(cfg, logp, logp_old, mask, adv, group)
    whole = grad_of(cfg, WHOLE)
    split = grad_of(cfg, SPLIT, weights=weights)
    torch.testing.assert_close(split, whole, atol=1e-12, rtol=0)


def test_dfpo_split_group_without_weights_differs():
    """The check above can fail: transforming half-groups changes the gradient."""
    cfg = make_config("dfpo", transform="min_replace")
    whole = grad_of(cfg, WHOLE)
    with pytest.raises(ValueError, match="fewer than 2"):
        grad_of(cfg, [torch.tensor([0, 1, 2, 4, 5, 6]), torch.tensor([3, 7])])
    halves = grad_of(cfg, SPLIT)  # 2 + 2 passes the size check but transforms the wrong sets
    assert (halves - whole).abs().max() > 1e-3


@pytest.mark.parametrize("name", algorithm_names())
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_world_size_undoes_ddp_averaging(name, agg):
    """Two processes, each one piece, gradients averaged (DDP): equal to the whole batch."""
    cfg = make_config(name, loss_agg_mode=agg)
    logp, logp_old, mask, adv, group, _ = batch()
    weights = sequence_weights(cfg, logp, logp_old, mask, adv, group)
    pieces = [torch.arange(0, 4), torch.arange(4, 8)]  # whole groups per process
    torch.testing.assert_close(grad_of(cfg, pieces, world_size=2, weights=weights),
                               grad_of(cfg, WHOLE), atol=1e-12, rtol=0)


def test_sequence_weights_only_for_dfpo():
    logp, logp_old, mask, adv, group, _ = batch()
    assert sequence_weights(make_config("gspo"), logp, logp_old, mask, adv, group) is None
