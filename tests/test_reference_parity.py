"""GRPO and GSPO equal the published formulas of the mainstream trainers on the same tensors.

The reference functions below are written from the formulas in shared/reference/rl_anchors.md
sections 1-2 (verl `compute_policy_loss_vanilla` without dual clip + `agg_loss` token-mean;
TRL sequence-level importance sampling with loss_type="grpo"; verl's GSPO-token form).
"""

from __future__ import annotations

import torch

from repro.objectives import Minibatch, group_advantages, make_config, policy_loss


def verl_vanilla_token_mean(logp, old, adv, mask, lo, hi):
    ratio = torch.exp(torch.clamp(logp - old, -20.0, 20.0))
    a = adv[:, None]
    per_tok = torch.maximum(-a * ratio, -a * torch.clamp(ratio, 1 - lo, 1 + hi))
    return (per_tok * mask).sum() / mask.sum()


def trl_sequence_grpo(logp, old, adv, mask, lo, hi):
    m = mask.double()
    log_w = (((logp - old) * m).sum(-1) / m.sum(-1).clamp(min=1.0))[:, None]
    c1 = torch.exp(log_w)
    c2 = torch.clamp(c1, 1 - lo, 1 + hi)
    a = adv[:, None]
    per_tok = -torch.minimum(c1 * a, c2 * a) * torch.ones_like(logp)
    return ((per_tok * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean()


def verl_gspo_token(logp, old, adv, mask, lo, hi):
    m = mask.double()
    log_s = ((logp - old) * m).sum(-1) / m.sum(-1).clamp(min=1)
    log_st = log_s.detach()[:, None] + logp - logp.detach()
    st = torch.exp(log_st)
    a = adv[:, None]
    per_tok = torch.maximum(-a * st, -a * torch.clamp(st, 1 - lo, 1 + hi))
    return ((per_tok * m).sum(-1) / m.sum(-1)).sum() / (m.sum(-1) > 0).sum()


def tensors(seed=0, B=8, T=12):
    g = torch.Generator().manual_seed(seed)
    base = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    old = base + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)
    mask = torch.arange(T)[None, :] < torch.randint(3, T + 1, (B,), generator=g)[:, None]
    group = torch.arange(B) % 2
    adv, _ = group_advantages(torch.randint(0, 2, (B,), generator=g).double(), group)
    if float(adv.abs().sum()) == 0:
        adv, _ = group_advantages(torch.arange(B).double(), group)
    return base, old, mask, group, adv.double()


def compare(ours_cfg, reference, lo, hi, seed):
    base, old, mask, group, adv = tensors(seed)
    lp1 = base.clone().requires_grad_(True)
    lp2 = base.clone().requires_grad_(True)
    ours, _ = policy_loss(ours_cfg, Minibatch(lp1, old, mask, adv, group))
    ref = reference(lp2, old, adv, mask, lo, hi)
    ours.backward()
    ref.backward()
    torch.testing.assert_close(ours, ref, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(lp1.grad, lp2.grad, atol=1e-12, rtol=1e-10)
    return float(lp1.grad.abs().sum())


def test_grpo_matches_verl_vanilla():
    total = sum(compare(make_config("grpo"), verl_vanilla_token_mean, 0.2, 0.27, s)
                for s in range(5))
    assert total > 0


def test_gspo_matches_trl_sequence_level_and_verl_gspo_token():
    lo, hi = 0.05, 0.06  # wide enough that some sequences are unclipped at this noise level
    cfg = make_config("gspo", eps_low=lo, eps_high=hi)
    total = 0.0
    for s in range(5):
        total += compare(cfg, trl_sequence_grpo, lo, hi, s)
        compare(cfg, verl_gspo_token, lo, hi, s)
    assert total > 0
    default = make_config("gspo")
    compare(default, trl_sequence_grpo, default.eps_low, default.eps_high, 0)
