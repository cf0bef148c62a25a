"""Each loss's gradient equals its closed form, checked by autograd and finite differences.

DFPO's transformed weights in the closed form come from tests/reference_transforms.py (plain
loops and brute-force projection), never from the code under test.

A small differentiable policy (logits = X @ W, float64) makes logp a genuine function of the
parameters W, so d logp / dW can be taken by central finite differences and combined with the
closed-form per-token coefficients, independently of autograd through the loss.
"""

from __future__ import annotations

import pytest
import torch
from reference_transforms import reference_weights

from repro.objectives import (
    Minibatch,
    group_advantages,
    make_config,
    policy_loss,
)

B, T, D, V = 6, 5, 3, 7


@pytest.fixture
def setup():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, T, D, generator=g, dtype=torch.float64)
    y = torch.randint(0, V, (B, T), generator=g)
    w0 = torch.randn(D, V, generator=g, dtype=torch.float64)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, 3:] = False
    mask[4, 2:] = False
    group = torch.tensor([2, 5, 2, 5, 2, 5])
    adv, _ = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 1.0]), group)
    old = logp_of(w0 + 0.15 * torch.randn(D, V, generator=g, dtype=torch.float64), x, y).detach()
    return x, y, w0, mask, group, adv.double(), old


def logp_of(w, x, y):
    return torch.log_softmax(x @ w, dim=-1).gather(-1, y[..., None])[..., 0]


def loss_at(cfg, w, setup):
    x, y, _, mask, group, adv, old = setup
    logp = logp_of(w, x, y)
    return policy_loss(cfg, Minibatch(logp, old, mask, adv, group))[0]


def fd_jacobian_logp(setup, h=1e-6):
    """d logp[i,t] / dW by central differences: [B, T, D, V]."""
    x, y, w0, *_ = setup
    jac = torch.zeros(B, T, D, V, dtype=torch.float64)
    for d in range(D):
        for v in range(V):
            e = torch.zeros_like(w0)
            e[d, v] = h
            jac[..., d, v] = (logp_of(w0 + e, x, y) - logp_of(w0 - e, x, y)) / (2 * h)
    return jac


def closed_form_dl_dlogp(name, cfg, logp, old, mask, group, adv):
    """dL/dlogp_{i,t} written from the spec's formulas (token-mean / seq-mean-token-mean)."""
    m = mask.double()
    n_tok = m.sum()
    r = torch.exp((logp - old) * m)
    a = adv[:, None]
    if name == "grpo":
        clipped = ((a > 0) & (r > 1 + cfg.eps_high)) | ((a < 0) & (r < 1 - cfg.eps_low))
        return -(a * r * (~clipped)) * m / n_tok
    if name == "grpo_fix":
        return -(a * r.clamp(1 - cfg.eps, 1 + cfg.eps)) * m / n_tok
    lengths = m.sum(-1)
    s = torch.exp(((logp - old) * m).sum(-1) / lengths)
    if name == "gspo":
        clipped = ((adv > 0) & (s > 1 + cfg.eps_high)) | ((adv < 0) & (s < 1 - cfg.eps_low))
        coef = s * adv * (~clipped) / lengths / len(adv)
        return -coef[:, None] * m
    wt = torch.tensor(reference_weights(cfg.transform, s.tolist(), adv.tolist(), group.tolist()),
                      dtype=torch.float64)
    return -(wt * adv)[:, None] * m / n_tok


CASES = [
    ("grpo", {"eps_low": 0.05, "eps_high": 0.05}),
    ("grpo_fix", {"eps": 0.05}),
    ("gspo", {"eps_low": 0.05, "eps_high": 0.05}),
    ("dfpo", {"transform": "min_replace"}),
    ("dfpo", {"transform": "orth_proj"}),
    ("dfpo", {"transform": "global_scale"}),
]


@pytest.mark.parametrize(("name", "overrides"), CASES)
def test_gradient_equals_closed_form(name, overrides, setup):
    cfg = make_config(name, **overrides)
    w = setup[2].clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(loss_at(cfg, w, setup), w)
    x, y, w0, mask, group, adv, old = setup
    coef = closed_form_dl_dlogp(name, cfg, logp_of(w0, x, y), old, mask, group, adv)  # [B, T]
    closed = torch.einsum("bt,btdv->dv", coef, fd_jacobian_logp(setup))
    torch.testing.assert_close(auto, closed, atol=1e-8, rtol=1e-6)
    assert float(auto.abs().max()) > 1e-4  # the case is not trivially zero


@pytest.mark.parametrize(("name", "overrides"), [c for c in CASES if c[0] in ("grpo", "gspo")])
def test_gradient_of_genuine_objectives_matches_finite_differences(name, overrides, setup):
    """GRPO and GSPO are ordinary functions of W (no stop-gradient): gradcheck applies."""
    cfg = make_config(name, **overrides)
    w = setup[2].clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda w_: loss_at(cfg, w_, setup), (w,), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("transform", ["min_replace", "orth_proj", "global_scale"])
def test_stop_gradient_switch(transform, setup):
    x, y, w0, mask, group, adv, old = setup
    w_sg = w0.clone().requires_grad_(True)
    w_live = w0.clone().requires_grad_(True)
    (g_sg,) = torch.autograd.grad(loss_at(make_config("dfpo", transform=transform), w_sg, setup),
                                  w_sg)
    cfg_live = make_config("dfpo", transform=transform, stop_gradient=False)
    (g_live,) = torch.autograd.grad(loss_at(cfg_live, w_live, setup), w_live)
    assert float((g_live - g_sg).abs().max()) > 1e-4  # without sg the gradient differs

    # ... by exactly -(1/N) sum_i A_i n_i grad w~_i, with grad w~ by finite differences of s(W)
    m = mask.double()

    def wt_of(w):
        s = torch.exp(((logp_of(w, x, y) - old) * m).sum(-1) / m.sum(-1))
        return torch.tensor(reference_weights(transform, s.tolist(), adv.tolist(), group.tolist()),
                            dtype=torch.float64)

    h, extra = 1e-6, torch.zeros_like(w0)
    for d in range(D):
        for v in range(V):
            e = torch.zeros_like(w0)
            e[d, v] = h
            dwt = (wt_of(w0 + e) - wt_of(w0 - e)) / (2 * h)
            extra[d, v] = -(adv * m.sum(-1) * dwt).sum() / m.sum()
    torch.testing.assert_close(g_live - g_sg, extra, atol=1e-7, rtol=1e-5)
