"""Spec item 1: shared tokens cancel for DFPO and GRPO-fix, and do not for GSPO, clipped GRPO
and DFPO with a per-sequence normaliser; on real autograd through a small Qwen3 (random init).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from lm_groups import make_batch, run_updates, tiny_lm

from repro.diagnostics import find_shared_nodes
from repro.objectives import make_config

LM = tiny_lm()


def full_node_sums(batch, coef):
    """For nodes shared by a whole group: (|sum_i c|, sum_i |c|) per node."""
    nodes = find_shared_nodes(batch.responses, batch.mask, batch.group)
    c = coef[nodes.rows, nodes.cols].double()
    net = nodes.node_sum(c).abs()[nodes.full]
    total = nodes.node_sum(c.abs())[nodes.full]
    assert net.numel() > 0, "the batch must contain nodes shared by a whole group"
    return net, total


def cancels(net, total):
    return bool((net <= 1e-6 * total + 1e-12).all())


group_spec = st.integers(2, 6).flatmap(
    lambda g: st.fixed_dictionaries(
        {
            "prefix": st.integers(1, 4),
            "lengths": st.lists(st.integers(1, 6), min_size=g, max_size=g),
            "rewards": st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=g, max_size=g).filter(
                lambda r: len(set(r)) > 1
            ),
        }
    )
)
batches = st.tuples(st.lists(group_spec, min_size=1, max_size=2), st.integers(0, 2**16))
SETTINGS = settings(max_examples=12, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

CANCELLING = [
    ("dfpo", {"transform": "min_replace"}),
    ("dfpo", {"transform": "orth_proj"}),
    ("dfpo", {"transform": "min_replace", "loss_agg_mode": "seq-mean-token-sum"}),
    ("dfpo", {"transform": "orth_proj", "loss_agg_mode": "seq-mean-token-sum-norm",
              "loss_norm_length": 16}),
    ("dfpo", {"transform": "min_replace", "sequence_ratio": "product"}),
    ("dfpo", {"transform": "orth_proj", "sequence_ratio": "product"}),
    ("grpo_fix", {}),
]


@pytest.mark.parametrize(("name", "overrides"), CANCELLING)
@SETTINGS
@given(case=batches)
def test_shared_nodes_cancel(name, overrides, case):
    specs, seed = case
    batch = make_batch(specs, seed)
    out = run_updates(LM, make_config(name, **overrides), batch)
    log_s = ((out.logp - out.logp_old) * batch.mask).sum(-1) / batch.mask.sum(-1)
    assert float(log_s.abs().max()) > 1e-3  # K > 1 steps really moved the ratios off 1
    net, total = full_node_sums(batch, out.coef)
    assert float(total.sum()) > 0
    assert cancels(net, total), f"residual {float((net / total.clamp_min(1e-30)).max()):.3e}"


@SETTINGS
@given(case=batches)
def test_grpo_cancels_exactly_where_no_shared_token_is_clipped(case):
    specs, seed = case
    batch = make_batch(specs, seed)
    cfg = make_config("grpo", eps_low=0.02, eps_high=0.02)
    out = run_updates(LM, cfg, batch)
    nodes = find_shared_nodes(batch.responses, batch.mask, batch.group)
    c = out.coef[nodes.rows, nodes.cols].double()
    ratio = torch.exp(out.logp - out.logp_old)[nodes.rows, nodes.cols]
    outside = (ratio > 1 + cfg.eps_high) | (ratio < 1 - cfg.eps_low)
    net = nodes.node_sum(c).abs()
    total = nodes.node_sum(c.abs())
    node_outside = nodes.node_sum(outside.double()) > 0
    full = nodes.full
    # inside the clip range every copy gets A_i * r / N: they cancel
    assert cancels(net[full & ~node_outside], total[full & ~node_outside])
    # outside it, only one sign of A keeps its gradient: clearly non-zero
    clipped = full & node_outside
    assert bool((net[clipped] > 1e-3 * total[clipped]).all())
    assert bool((total[clipped] > 0).all())


@SETTINGS
@given(case=batches)
def test_gspo_does_not_cancel(case):
    specs, seed = case
    batch = make_batch(specs, seed)
    out = run_updates(LM, make_config("gspo"), batch)
    net, total = full_node_sums(batch, out.coef)
    live = total > 0  # nodes where some member is unclipped
    assume(bool(live.any()))
    assert bool((net[live] > 1e-4 * total[live]).all())


@SETTINGS
@given(case=batches)
def test_dfpo_with_a_per_sequence_normaliser_does_not_cancel(case):
    """seq-mean-token-mean divides each member by its own |y_i|: cancellation needs
    sum_i A_i / |y_i| = 0, which holds only for special length patterns."""
    specs, seed = case
    batch = make_batch(specs, seed)
    cfg = make_config("dfpo", transform="min_replace", loss_agg_mode="seq-mean-token-mean")
    out = run_updates(LM, cfg, batch)
    nodes = find_shared_nodes(batch.responses, batch.mask, batch.group)
    a_over_len = out.advantages.double() / batch.mask.sum(-1).double()
    per_node_tok = a_over_len[nodes.rows]
    structural = (nodes.node_sum(per_node_tok).abs()
                  / nodes.node_sum(per_node_tok.abs()).clamp_min(1e-30))
    c = out.coef[nodes.rows, nodes.cols].double()
    net = nodes.node_sum(c).abs()
    total = nodes.node_sum(c.abs())
    generic = nodes.full & (structural > 1e-3)
    assume(bool(generic.any()))
    assert bool((net[generic] > 1e-4 * total[generic]).all())


def test_non_cancellation_on_a_fixed_batch():
    """Deterministic witnesses: unequal lengths, two groups, s != 1."""
    specs = [
        {"prefix": 3, "lengths": [1, 4, 2, 6], "rewards": [1.0, 0.0, 0.0, 1.0]},
        {"prefix": 2, "lengths": [3, 5, 2], "rewards": [0.0, 1.0, 0.5]},
    ]
    batch = make_batch(specs, seed=7)

    def worst(name, **kw):
        out = run_updates(LM, make_config(name, **kw), batch)
        net, total = full_node_sums(batch, out.coef)
        return float((net / total.clamp_min(1e-30)).max())

    assert worst("gspo", eps_low=0.2, eps_high=0.2) > 0.05
    assert worst("dfpo", loss_agg_mode="seq-mean-token-mean") > 0.05
    assert worst("grpo_fix", loss_agg_mode="seq-mean-token-mean") > 0.05  # original GRPO's 1/|y_i|
    assert worst("dfpo", transform="identity") > 1e-3  # plain s_i weights do not cancel
    assert worst("dfpo", transform="global_scale") > 1e-3  # shrinking is not symmetrising
    assert worst("dfpo", transform="min_replace") < 1e-6
    assert worst("dfpo", transform="orth_proj") < 1e-6
