"""The verl plugin's losses against verl 0.9.1's own code on the same batches.

- Modes verl also has: loss and gradient equal verl's for every loss_agg_mode, with and without
  verl's global-batch normalisers (dp_size 2): grpo = `vanilla` (its dual clip set off: the
  suite's GRPO has none, and a test shows the batches reach it), gspo = `gspo`, grpo_fix =
  `cispo` (gradient and metrics; cispo's surrogate has the value sg[c] A logp, ours sg[c] A).
- DFPO modes, found through verl's `get_policy_loss_fn`: equal to `repro.objectives.policy_loss`,
  and shared tokens cancel where verl's `gspo` leaves a residual.

Skipped without verl; .ci/run runs them in its verl venv (REPRO_REQUIRE_VERL=1). The parity
numbers are printed (pytest -rP shows them).
"""

from __future__ import annotations

import pytest
import torch
from verl_batches import AGG_MODES, actor, call, require_verl, verl_batch

from repro.diagnostics import find_shared_nodes, residual_full
from repro.objectives import Minibatch, make_config, policy_loss

require_verl()
from verl.trainer.ppo.core_algos import get_policy_loss_fn  # noqa: E402

from repro.integrations.verl import verl_policy_loss  # noqa: E402
from repro.integrations.verl_config import MODES, REGISTERED, VERL_EQUIVALENT  # noqa: E402

SEEDS = range(3)
DFPO_MODES = [m for m in REGISTERED if MODES[m][0] == "dfpo"]
# verl's global-batch info for a micro-batch of 12 rows, ~90 tokens, on 1 of 2 ranks
GLOBAL = {"dp_size": 2, "batch_num_tokens": 190, "global_batch_size": 26, "loss_scale_factor": 16}


def verl_actor(mode: str, info: dict, **fields):
    high = 0.2 if mode == "grpo_fix" else 0.28  # grpo_fix clips symmetrically
    return actor(clip_ratio_low=0.2, clip_ratio_high=high, clip_ratio_c=1e9,
                 loss_scale_factor=info.get("loss_scale_factor"), global_batch_info=info, **fields)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).detach().abs().max())


@pytest.mark.parametrize("info", [{}, GLOBAL], ids=["local", "global"])
@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("mode", sorted(VERL_EQUIVALENT))
def test_equals_verls_own_mode(mode, agg, info):
    theirs = get_policy_loss_fn(VERL_EQUIVALENT[mode])
    ours = verl_policy_loss(mode)
    loss_gap = grad_gap = clipped = 0.0
    for seed in SEEDS:
        batch = verl_batch(seed)
        cfg = verl_actor(mode, info)
        l1, g1, m1 = call(ours, batch, cfg, agg)
        l2, g2, m2 = call(theirs, batch, cfg, agg)
        torch.testing.assert_close(g1, g2, rtol=1e-7, atol=1e-12)
        if mode != "grpo_fix":
            torch.testing.assert_close(l1, l2, rtol=1e-7, atol=1e-12)
            loss_gap = max(loss_gap, max_diff(l1, l2))
        for key in ("actor/pg_clipfrac", "actor/ppo_kl"):
            assert m1[key] == pytest.approx(m2[key], rel=1e-6, abs=1e-9), key
        grad_gap = max(grad_gap, max_diff(g1, g2))
        clipped += m2["actor/pg_clipfrac"]
        assert float(g2.abs().sum()) > 0
    assert clipped > 0  # the clip acts on these batches
    loss_text = (f"{loss_gap:.1e}" if mode != "grpo_fix" else "differs by design (cispo's "
                 "surrogate has the value sg[c] A logp, grpo_fix's sg[c] A; same gradient)")
    print(f"{mode} vs verl {VERL_EQUIVALENT[mode]} ({agg}, {'global' if info else 'local'}): "
          f"max |loss diff| {loss_text}, max |grad diff| {grad_gap:.1e}")


def test_the_batches_reach_verls_dual_clip():
    """With verl's default clip_ratio_c = 3, vanilla parts from grpo on these batches: the
    parity above holds with the dual clip off, not by the batches missing it."""
    cfg = actor(clip_ratio_low=0.2, clip_ratio_high=0.28)
    assert cfg.clip_ratio_c == 3.0
    gap = lower = 0.0
    for seed in SEEDS:
        batch = verl_batch(seed)
        _, ours, _ = call(verl_policy_loss("grpo"), batch, verl_actor("grpo", {}), "token-mean")
        _, theirs, m = call(get_policy_loss_fn("vanilla"), batch, cfg, "token-mean")
        gap, lower = max(gap, max_diff(ours, theirs)), lower + m["actor/pg_clipfrac_lower"]
    assert lower > 0
    assert gap > 1e-3


@pytest.mark.parametrize("agg", [a for a in AGG_MODES if a != "seq-mean-token-mean"])
@pytest.mark.parametrize("mode", DFPO_MODES)
def test_dfpo_modes_equal_policy_loss(mode, agg):
    """verl's lookup finds the plugin's mode, and it computes what the suite's objective does on
    the same responses, with groups from the row order."""
    loss_fn = get_policy_loss_fn(mode)
    algorithm, overrides = MODES[mode]
    cfg = make_config(algorithm, **overrides, loss_agg_mode=agg)
    loss_gap = grad_gap = shift = 0.0
    for seed in SEEDS:
        batch = verl_batch(seed)
        l1, g1, metrics = call(loss_fn, batch, actor(), agg)
        logp = batch.leaf()
        l2, _ = policy_loss(cfg, Minibatch(logp, batch.old, batch.mask,
                                           batch.sequence_advantages(), batch.group))
        (g2,) = torch.autograd.grad(l2, logp)
        torch.testing.assert_close(l1, l2.detach(), rtol=1e-12, atol=0)
        torch.testing.assert_close(g1, g2, rtol=1e-12, atol=0)
        loss_gap, grad_gap = max(loss_gap, max_diff(l1, l2)), max(grad_gap, max_diff(g1, g2))
        shift = max(shift, metrics["actor/dfpo/w_shift"])
    assert shift > 0.01  # the transform moved the weights on these batches
    print(f"{mode} vs policy_loss ({agg}): max |loss diff| {loss_gap:.1e}, "
          f"max |grad diff| {grad_gap:.1e}")


def residual(grad: torch.Tensor, batch) -> float:
    """residual_full of the coefficients -dL/dlogp on the nodes a whole group shares."""
    return residual_full(-grad, find_shared_nodes(batch.tokens, batch.mask, batch.group))


@pytest.mark.parametrize("mode", [*DFPO_MODES, "grpo_fix"])
def test_shared_tokens_cancel(mode):
    worst = 0.0
    for seed in SEEDS:
        batch = verl_batch(seed)
        _, grad, _ = call(get_policy_loss_fn(mode), batch, verl_actor(mode, {}), "token-mean")
        worst = max(worst, residual(grad, batch))
    assert worst < 1e-9
    print(f"{mode}: residual on shared tokens {worst:.1e}")


def test_verls_gspo_leaves_a_residual_on_the_same_batches():
    """The check above can fail: GSPO's coefficients differ between copies of a shared token."""
    for seed in SEEDS:
        batch = verl_batch(seed)
        _, grad, _ = call(get_policy_loss_fn("gspo"), batch, verl_actor("gspo", {}), "token-mean")
        assert residual(grad, batch) > 1e-3


@pytest.mark.parametrize("mode", DFPO_MODES)
def test_sequence_level_rollout_weights_are_folded_before_the_transform(mode):
    """rho_i (verl's rollout_is=sequence, one weight per response) enters s before the transform:
    shared tokens still cancel. Multiplying the loss by rho after it, as verl's modes do, would
    leave a residual."""
    g = torch.Generator().manual_seed(5)
    for seed in SEEDS:
        batch = verl_batch(seed)
        rho = torch.exp(0.5 * torch.randn(batch.mask.shape[0], 1, generator=g, dtype=torch.float64))
        weights = rho.expand_as(batch.logp) * batch.mask
        _, weighted, _ = call(get_policy_loss_fn(mode), batch, actor(), "token-mean",
                              weights=weights)
        _, plain, _ = call(get_policy_loss_fn(mode), batch, actor(), "token-mean")
        assert max_diff(weighted, plain) > 0.01 * float(plain.abs().max())  # the weights act
        assert residual(weighted, batch) < 1e-9
        assert residual(plain * rho, batch) > 1e-3  # rho applied after the transform
