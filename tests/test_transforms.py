"""The five transforms: orth_proj is the exact KKT projection; all are order-invariant."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_transforms import brute_force_projection
from torch import Tensor

from repro.objectives import (
    TRANSFORMS,
    Groups,
    apply_transform,
    cancelling_transforms,
    group_advantages,
)


def one_group(w, r):
    w = torch.tensor(w, dtype=torch.float64)
    adv, _ = group_advantages(torch.tensor(r), torch.zeros(len(r), dtype=torch.long))
    return w, adv.double(), Groups.from_ids(torch.zeros(len(r), dtype=torch.long))


group_case = st.integers(2, 7).flatmap(
    lambda n: st.tuples(
        st.lists(st.floats(0.0, 3.0), min_size=n, max_size=n),
        st.lists(st.sampled_from([0.0, 0.25, 1.0]), min_size=n, max_size=n).filter(
            lambda r: len(set(r)) > 1
        ),
    )
)


@settings(max_examples=150, deadline=None)
@given(case=group_case)
def test_orth_proj_satisfies_kkt_and_matches_brute_force(case):
    w, a, groups = one_group(*case)
    v = apply_transform("orth_proj", w, a, groups)
    assert float(v.min()) >= 0.0  # feasible: non-negative
    assert abs(float(a @ v)) <= 1e-9 * max(1.0, float(w.abs().sum()))  # orthogonal to A
    # KKT: v = max(0, w - lam A) for one scalar lam, with complementary slackness
    active = v > 0
    if bool(active.any()):
        lam = float(((w - v) * a)[active].sum() / (a * a)[active].sum())
        torch.testing.assert_close(v, (w - lam * a).clamp_min(0), atol=1e-9, rtol=0)
        mu = v - (w - lam * a)  # multiplier of v >= 0: >= 0, and 0 where v > 0
        assert float(mu.min()) >= -1e-9 and float((mu * v).abs().max()) <= 1e-9
    torch.testing.assert_close(v, brute_force_projection(w, a), atol=1e-7, rtol=0)


def test_orth_proj_needs_the_constraint_sometimes():
    w, a, groups = one_group([3.0, 0.1, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0])
    plain = apply_transform("orth_proj_plain", w, a, groups)
    proj = apply_transform("orth_proj", w, a, groups)
    assert float(plain.min()) < 0  # the unconstrained projection flips a weight's sign
    assert float(proj.min()) >= 0 and abs(float(a @ proj)) < 1e-12
    assert abs(float(a @ plain)) < 1e-12


def test_min_replace_and_global_scale_values():
    w = torch.tensor([1.2, 0.9, 1.1, 2.0, 0.5])
    groups = Groups.from_ids(torch.tensor([4, 4, 4, 9, 9]))
    adv = torch.tensor([1.0, -0.5, -0.5, 1.0, -1.0])
    torch.testing.assert_close(
        apply_transform("min_replace", w, adv, groups), torch.tensor([0.9, 0.9, 0.9, 0.5, 0.5])
    )
    kappa = ((0.9 + 0.5) / 2) / float(w.mean())
    torch.testing.assert_close(apply_transform("global_scale", w, adv, groups), kappa * w)
    assert torch.equal(apply_transform("identity", w, adv, groups), w)


def test_group_mean_keeps_each_groups_mean_weight_and_cancels():
    """The control of issue 38: w~ = the group's mean of w, so the group's average importance
    correction survives (min_replace shrinks it to the minimum) and sum_i A_i w~_i = 0."""
    w = torch.tensor([1.2, 0.9, 1.1, 2.0, 0.5], dtype=torch.float64)
    groups = Groups.from_ids(torch.tensor([4, 4, 4, 9, 9]))
    adv = torch.tensor([1.0, -0.5, -0.5, 1.0, -1.0], dtype=torch.float64)
    got = apply_transform("group_mean", w, adv, groups)
    torch.testing.assert_close(got, torch.tensor([3.2 / 3] * 3 + [1.25] * 2, dtype=torch.float64))
    torch.testing.assert_close(groups.mean(got), groups.mean(w))
    assert float(groups.sum(got * adv).abs().max()) < 1e-12
    assert "group_mean" in cancelling_transforms()


def test_group_geomean_cancels_and_stays_bounded_under_a_heavy_tail():
    """The heavy-tail-safe control of issue 47: w~ = exp(mean log w) per group. Hand values;
    it cancels; it lies between the group's minimum and mean; one member at 1e12 moves it by
    a factor 1e12 ** (1/n) only, where the mean follows that member."""
    w = torch.tensor([1.0, 4.0, 2.0, 0.5], dtype=torch.float64)
    groups = Groups.from_ids(torch.tensor([0, 0, 1, 1]))
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    got = apply_transform("group_geomean", w, adv, groups)
    torch.testing.assert_close(got, torch.tensor([2.0, 2.0, 1.0, 1.0], dtype=torch.float64))
    assert float(groups.sum(got * adv).abs().max()) < 1e-12
    assert "group_geomean" in cancelling_transforms()
    tail = torch.tensor([1.0] * 7 + [1e12], dtype=torch.float64)
    one = Groups.from_ids(torch.zeros(8, dtype=torch.long))
    a = torch.tensor([1.0, -1.0] * 4, dtype=torch.float64)
    geo = apply_transform("group_geomean", tail, a, one)
    torch.testing.assert_close(geo, torch.full((8,), 1e12 ** (1 / 8), dtype=torch.float64))
    assert float(apply_transform("group_mean", tail, a, one)[0]) > 1e11 > 1e3 > float(geo[0])
    under = torch.tensor([0.0, 1.0], dtype=torch.float64)  # an underflowed weight stays finite
    pair = Groups.from_ids(torch.zeros(2, dtype=torch.long))
    assert torch.isfinite(apply_transform("group_geomean", under, a[:2], pair)).all()


@pytest.mark.parametrize("name", cancelling_transforms())
def test_on_policy_weights_are_unchanged(name):
    """s == 1 (first minibatch after a rollout): the transform is the identity."""
    w, a, groups = one_group([1.0] * 5, [1.0, 0.0, 0.0, 1.0, 0.0])
    torch.testing.assert_close(apply_transform(name, w, a, groups), w)


@pytest.mark.parametrize("name", ["orth_proj", "orth_proj_plain"])
def test_projection_leaves_groups_without_signal_alone(name):
    w, _, groups = one_group([0.3, 1.7, 0.9], [1.0, 0.0, 0.0])
    a = torch.zeros(3, dtype=torch.float64)
    assert torch.equal(apply_transform(name, w, a, groups), w)


def draw_groups(sizes: list[int], data: st.DataObject) -> tuple[Tensor, Tensor, Tensor]:
    """Group ids of groups of `sizes`, weights in [0.05, 3] and the group advantages (float64)
    of 0/1 rewards, drawn from `data`."""
    n = sum(sizes)
    group = torch.cat([torch.full((s,), k) for k, s in enumerate(sizes)])
    w = torch.tensor(data.draw(st.lists(st.floats(0.05, 3.0), min_size=n, max_size=n)),
                     dtype=torch.float64)
    r = torch.tensor(data.draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=n, max_size=n)))
    adv, _ = group_advantages(r, group)
    return group, w, adv.double()


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(2, 6), min_size=2, max_size=5),
    data=st.data(),
    name=st.sampled_from(TRANSFORMS),
)
def test_invariant_to_row_order_and_group_interleaving(sizes, data, name):
    n = sum(sizes)
    group, w, adv = draw_groups(sizes, data)
    base = apply_transform(name, w, adv, Groups.from_ids(group))
    perm = torch.tensor(data.draw(st.permutations(range(n))))
    relabel = torch.tensor(data.draw(st.permutations(range(len(sizes))))) * 17 + 5
    shuffled = apply_transform(name, w[perm], adv[perm], Groups.from_ids(relabel[group[perm]]))
    torch.testing.assert_close(shuffled, base[perm], atol=1e-10, rtol=1e-10)


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(2, 8), min_size=1, max_size=6), data=st.data())
def test_cancelling_transforms_zero_the_weighted_advantage_sum(sizes, data):
    group, w, adv = draw_groups(sizes, data)
    groups = Groups.from_ids(group)
    for name in cancelling_transforms():
        wt = apply_transform(name, w, adv, groups)
        assert float(groups.sum(wt * adv).abs().max()) <= 1e-6
