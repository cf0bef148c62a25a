"""Bad configuration and inputs fail with an error that names the field."""

from __future__ import annotations

import pytest
import torch

from repro.objectives import Minibatch, algorithm_names, make_config, policy_loss


def test_registry_lists_the_four_algorithms():
    assert {"grpo", "grpo_fix", "gspo", "dfpo"} <= set(algorithm_names())


def test_unknown_algorithm():
    with pytest.raises(ValueError, match=r"unknown algorithm 'ppo2'.*dfpo"):
        make_config("ppo2")


def test_unknown_field():
    with pytest.raises(ValueError, match=r"unknown GRPOConfig key\(s\) \[.epsilon.\]; valid keys"):
        make_config("grpo", epsilon=0.2)


@pytest.mark.parametrize(
    ("name", "field", "value"),
    [
        ("grpo", "eps_low", 0.0),
        ("grpo", "eps_high", -0.1),
        ("grpo_fix", "eps", 0.0),
        ("gspo", "eps_low", -3e-4),
        ("gspo", "eps_high", 0.0),
        ("dfpo", "transform", "max_replace"),
        ("dfpo", "weight_clip", (2.0, 1.0)),
        ("dfpo", "loss_agg_mode", "token-sum-mean"),
        ("grpo", "loss_norm_length", 0),
    ],
)
def test_bad_values_name_the_field(name, field, value):
    with pytest.raises(ValueError, match=rf"\.{field} "):
        make_config(name, **{field: value})


def batch(**changes):
    args = {
        "logp": torch.zeros(4, 3, requires_grad=True),
        "logp_old": torch.zeros(4, 3),
        "mask": torch.ones(4, 3, dtype=torch.bool),
        "advantages": torch.tensor([1.0, -1.0, 1.0, -1.0]),
        "group": torch.tensor([0, 0, 1, 1]),
    }
    args.update(changes)
    return Minibatch(**args)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("logp_old", torch.zeros(4, 2)),
        ("mask", torch.ones(4, 3)),  # not bool
        ("advantages", torch.zeros(3)),
        ("group", torch.zeros(4, 1, dtype=torch.long)),
    ],
)
def test_mismatched_inputs_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"`{field}`"):
        batch(**{field: value})


def test_group_of_one_names_the_field():
    mb = batch(group=torch.tensor([0, 0, 1, 2]))
    with pytest.raises(ValueError, match="`group`"):
        policy_loss(make_config("dfpo"), mb)
