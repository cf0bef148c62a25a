"""Group advantages: exact centring, zero-variance groups, hand values, errors."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from repro.objectives import AdvantageConfig, group_advantages


def test_hand_computed_values():
    reward = torch.tensor([1.0, 0.0, 0.0, 2.0, 2.0, 2.0])
    group = torch.tensor([7, 7, 7, 3, 3, 3])
    adv, info = group_advantages(reward, group)
    # group 7: mean 1/3, unbiased std sqrt(1/3)
    std = (1 / 3) ** 0.5
    expected = torch.tensor([(2 / 3) / (std + 1e-6), (-1 / 3) / (std + 1e-6),
                             (-1 / 3) / (std + 1e-6)])
    torch.testing.assert_close(adv[:3], expected)
    assert torch.equal(adv[3:], torch.zeros(3))  # zero variance: exactly 0
    assert info["zero_adv_frac"] == 0.5


def test_scale_none_is_mean_centring():
    adv, _ = group_advantages(torch.tensor([1.0, 0.0, 0.5, 0.5]), torch.tensor([0, 0, 1, 1]),
                              AdvantageConfig(scale="none"))
    torch.testing.assert_close(adv, torch.tensor([0.5, -0.5, 0.0, 0.0]))


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(2, 16), min_size=1, max_size=6),
    data=st.data(),
    scale=st.sampled_from(["group", "none"]),
)
def test_exact_centring_on_interleaved_groups(sizes, data, scale):
    group = torch.cat([torch.full((s,), 10 * k + 3) for k, s in enumerate(sizes)])
    perm = torch.tensor(data.draw(st.permutations(range(len(group)))))
    group = group[perm]
    reward = torch.tensor(
        data.draw(st.lists(st.floats(-5, 5, allow_nan=False), min_size=len(group),
                           max_size=len(group)))
    )
    adv, _ = group_advantages(reward, group, AdvantageConfig(scale=scale))
    for gid in group.unique():
        a = adv[group == gid].double()
        assert abs(float(a.sum())) <= 1e-6 * max(1.0, float(a.abs().sum()))


def test_group_of_one_is_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"`group`.*fewer than 2"):
        group_advantages(torch.tensor([1.0, 0.0, 1.0]), torch.tensor([0, 0, 1]))


def test_bad_inputs_name_the_field():
    with pytest.raises(ValueError, match="`reward`"):
        group_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 0, 0]))
    with pytest.raises(ValueError, match="`reward`"):
        group_advantages(torch.tensor([1.0, float("nan")]), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match=r"AdvantageConfig.eps"):
        AdvantageConfig(eps=0.0)
    with pytest.raises(ValueError, match=r"AdvantageConfig.scale"):
        AdvantageConfig(scale="batch")
