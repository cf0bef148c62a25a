"""DFPO's `sequence_ratio` reading: `product` weights are exp(sum of the masked token log-ratios)
(the paper's prod_t r), for every transform, in the loss and in the engines' pre-pass, finite
where float32 would overflow; `mean` stays GSPO's length-normalised ratio. Cancellation under
the product reading is tests/test_cancellation.py's (its CANCELLING list)."""

from __future__ import annotations

import math

import pytest
import torch
from reference_transforms import reference_weights

from repro.diagnostics import token_coefficients
from repro.engines.core import loss_and_diagnostics, sequence_weights
from repro.objectives import TRANSFORMS, Minibatch, Normalisers, make_config, policy_loss

B, T = 8, 7
GROUP = torch.tensor([0, 1, 0, 1, 0, 1, 0, 1])
ADV = torch.tensor([1.0, -1.0, -0.5, 0.5, 1.5, -2.0, -2.0, 2.5], dtype=torch.float64)


def batch(scale: float = 0.3, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Ragged rows whose padding holds large log-ratios: a reading that forgot the mask, or
    divided by the padded length, would be far off."""
    gen = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(B, T, generator=gen, dtype=torch.float64) * 2).requires_grad_()
    logp_old = logp.detach() + scale * torch.randn(B, T, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([7, 3, 5, 1, 6, 4, 2, 7])
    mask = torch.arange(T)[None] < lengths[:, None]
    logp_old = torch.where(mask, logp_old, logp.detach() - 5.0)
    return logp, logp_old, mask


def product_ratio(logp, logp_old, mask) -> torch.Tensor:
    """exp(sum over the response tokens of log r): the paper's s, written here directly."""
    return torch.exp(((logp.detach() - logp_old) * mask).sum(-1))


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_product_weights_are_the_transformed_exp_sum_log_ratio(transform):
    logp, logp_old, mask = batch()
    cfg = make_config("dfpo", transform=transform, sequence_ratio="product")
    s = product_ratio(logp, logp_old, mask)
    assert float(s.max() / s.min()) > 2  # a spread the transforms act on
    want = reference(transform, s)
    got = sequence_weights(cfg, logp, logp_old, mask, ADV, GROUP)  # the engines' pre-pass
    torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)
    loss, metrics = policy_loss(cfg, Minibatch(logp, logp_old, mask, ADV, GROUP))
    coef = token_coefficients(loss, logp)  # token-mean: c_{i,t} = w~_i A_i / N_tok
    torch.testing.assert_close(coef, (want * ADV)[:, None] * mask / mask.sum(), atol=1e-12,
                               rtol=1e-10)
    assert metrics["s_min"] == pytest.approx(float(s.min()), rel=1e-12)
    assert metrics["s_max"] == pytest.approx(float(s.max()), rel=1e-12)
    rel = float((want / s - 1).abs().mean())
    assert metrics["w_shift"] == pytest.approx(rel, rel=1e-9, abs=1e-15)
    assert (metrics["w_shift"] == 0) == (transform == "identity")


def reference(transform: str, s: torch.Tensor) -> torch.Tensor:
    """w~ written independently of repro.objectives (tests/reference_transforms.py; the plain
    projection of Eq. 18 per group here)."""
    if transform == "identity":
        return s
    if transform != "orth_proj_plain":
        return torch.tensor(reference_weights(transform, s.tolist(), ADV.tolist(), GROUP.tolist()),
                            dtype=torch.float64)
    out = s.clone()
    for g in GROUP.unique():
        rows = GROUP.eq(g)
        a = ADV[rows]
        out[rows] = s[rows] - (a * s[rows]).sum() / (a * a).sum() * a
    return out


def test_mean_reading_is_the_default_and_differs_from_the_product():
    logp, logp_old, mask = batch()
    mean = make_config("dfpo", transform="identity")
    assert mean.sequence_ratio == "mean"
    got = sequence_weights(mean, logp, logp_old, mask, ADV, GROUP)
    want = torch.exp(((logp.detach() - logp_old) * mask).sum(-1) / mask.sum(-1))
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    product = sequence_weights(make_config("dfpo", transform="identity", sequence_ratio="product"),
                               logp, logp_old, mask, ADV, GROUP)
    assert float((product - got).abs().max()) > 0.1


def test_product_is_finite_where_float32_would_overflow():
    """Long responses: sum log r = 100 nats (exp overflows float32 past 88); min_replace still
    gives each group its smallest weight, from the float64 exp of the log sum."""
    n = 200
    logp = torch.zeros(4, n, requires_grad=True)
    shift = torch.tensor([0.5, 0.45, 0.4, 0.35])[:, None].expand(4, n)
    logp_old = (logp.detach() - shift).float()
    mask = torch.ones(4, n, dtype=torch.bool)
    group, adv = torch.tensor([0, 0, 1, 1]), torch.tensor([1.0, -1.0, 1.0, -1.0])
    cfg = make_config("dfpo", transform="min_replace", sequence_ratio="product")
    loss, metrics = loss_and_diagnostics(cfg, logp, logp_old, mask, adv, group,
                                         torch.zeros(4, n, dtype=torch.long), 8)
    assert math.isfinite(float(loss.detach()))
    assert metrics["s_max"] == pytest.approx(math.exp(100), rel=1e-5)
    w = sequence_weights(cfg, logp, logp_old, mask, adv, group)
    torch.testing.assert_close(w, torch.tensor([90.0, 90.0, 70.0, 70.0], dtype=torch.float64).exp(),
                               rtol=1e-5, atol=0)
    assert torch.isinf(torch.exp(torch.tensor(100.0)))  # what float32 would have given


def test_split_group_with_product_prepass_weights_equals_whole_group():
    """The TRL engine's micro-steps: weights from the pre-pass make split groups exact."""
    logp, logp_old, mask = batch()
    cfg = make_config("dfpo", transform="orth_proj", sequence_ratio="product")
    weights = sequence_weights(cfg, logp, logp_old, mask, ADV, GROUP)
    tokens = torch.zeros(B, T, dtype=torch.long)

    def grad(pieces, sw):
        total = torch.zeros_like(logp)
        n_tok = float(mask.sum())
        for rows in pieces:
            loss, _ = loss_and_diagnostics(cfg, logp[rows], logp_old[rows], mask[rows], ADV[rows],
                                           GROUP[rows], tokens[rows], 2,
                                           norm=Normalisers(num_tokens=n_tok, num_seqs=B),
                                           seq_weight=None if sw is None else sw[rows],
                                           diagnostics=False)
            total += torch.autograd.grad(loss, logp)[0]
        return total

    whole = grad([torch.arange(B)], None)
    split = grad([torch.tensor([0, 1, 2, 3]), torch.tensor([4, 5, 6, 7])], weights)
    torch.testing.assert_close(split, whole, atol=1e-12, rtol=0)


def test_spread_is_logged_under_both_readings_for_every_objective():
    logp, logp_old, mask = batch()
    for name in ("grpo", "gspo", "dfpo"):
        _, metrics = policy_loss(make_config(name), Minibatch(logp, logp_old, mask, ADV, GROUP))
        s = product_ratio(logp, logp_old, mask)
        spread = [float((x.max() - x.min()) / x.mean()) for x in (s[GROUP.eq(g)] for g in (0, 1))]
        assert metrics["s_spread_product"] == pytest.approx(sum(spread) / 2, rel=1e-12)
        assert metrics["s_spread"] < metrics["s_spread_product"]
        assert math.isnan(metrics["w_shift"]) == (name != "dfpo")


def test_an_unknown_reading_is_refused_by_name():
    with pytest.raises(ValueError, match=r"DFPOConfig.sequence_ratio must be one of .*'sum'"):
        make_config("dfpo", sequence_ratio="sum")
