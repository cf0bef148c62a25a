"""The attribution controls of config/config.yaml are what their comments say: each removes one
of GSPO's two departures from token-mean DFPO (the clip of s, the 1/|y_i| normaliser), with
no new formula. Checked on gradients d loss / d logp of one off-policy batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from repro.objectives import Minibatch, make_config, policy_loss

CATALOGUE = yaml.safe_load((Path(__file__).parents[1] / "config" / "config.yaml").read_text())[
    "algorithms"]
NO_CLIP = {"eps_low": 0.999, "eps_high": 1e6}  # s never leaves [1e-3, 1e6] here


def entry(label: str):
    spec = CATALOGUE[label]
    return make_config(spec["algorithm"], **spec.get("objective", {}))


def grad(cfg, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(8, 6, generator=gen, dtype=torch.float64) * 2).requires_grad_()
    old = logp.detach() + 0.05 * torch.randn(8, 6, generator=gen, dtype=torch.float64)
    mask = torch.arange(6)[None] < torch.tensor([6, 2, 4, 5, 3, 6, 1, 4])[:, None]
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 1.0, -1.0], dtype=torch.float64)
    loss, metrics = policy_loss(cfg, Minibatch(logp, old, mask, adv, torch.arange(8) // 4))
    return torch.autograd.grad(loss, logp)[0], metrics["clip_frac"]


def test_gspo_noclip_is_gspo_with_the_clip_removed():
    unclipped, clip = grad(make_config("gspo", **NO_CLIP))
    assert clip == 0
    torch.testing.assert_close(grad(entry("gspo_noclip"))[0], unclipped, atol=1e-14, rtol=0)
    clipped, clip = grad(entry("gspo"))  # the check can fail: GSPO's own clip bites here
    assert clip > 0.2 and float((clipped - unclipped).abs().max()) > 1e-3


def test_gspo_tokmean_is_gspo_with_the_normaliser_replaced_by_token_mean():
    """Without the clip, token-mean GSPO is DFPO with the identity transform (dfpo_none)."""
    cfg = entry("gspo_tokmean")
    no_clip = make_config("gspo", **(NO_CLIP | {"loss_agg_mode": cfg.loss_agg_mode}))
    torch.testing.assert_close(grad(no_clip)[0], grad(entry("dfpo_none"))[0], atol=1e-14, rtol=0)
    assert (cfg.eps_low, cfg.eps_high) == (entry("gspo").eps_low, entry("gspo").eps_high)
    normalised = grad(entry("gspo_noclip"))[0]  # the check can fail: 1/|y_i| differs
    assert float((normalised - grad(entry("dfpo_none"))[0]).abs().max()) > 1e-3


@pytest.mark.parametrize("label", [k for k in CATALOGUE if k.endswith("_prod")])
def test_product_entries_are_their_mean_twins_under_the_product_reading(label):
    product, mean = entry(label), entry(label.removesuffix("_prod"))
    assert product.sequence_ratio == "product" and mean.sequence_ratio == "mean"
    assert product.transform == mean.transform
