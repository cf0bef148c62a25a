"""One minibatch order for both engines (repro/training/minibatches.py): the native loop's row
masks and the TRL trainer's split of a rollout batch hold the same groups in the same order, and
extra passes (epochs) draw fresh permutations after the single-pass one."""

from __future__ import annotations

import pytest
import torch

from repro.engines import native
from repro.training.config import TrainConfig
from repro.training.minibatches import minibatch_orders

P, G, K = 8, 2, 4


def native_groups(seed: int, step: int, epochs: int = 1) -> list[list[int]]:
    cfg = TrainConfig(model="m", prompts_per_step=P, group_size=G, minibatches=K, seed=seed,
                      epochs=epochs)
    batch = type("B", (), {"group": torch.arange(P).repeat_interleave(G),
                           "attention_mask": torch.ones(P * G, 5, dtype=torch.long)})()
    return [batch.group[rows].unique().tolist() for rows, _ in
            native.minibatch_rows(cfg, step, batch)]


@pytest.mark.parametrize(("seed", "step"), [(0, 1), (3, 2), (7, 40)])
def test_the_trl_trainer_splits_a_rollout_in_the_native_loops_order(seed, step):
    from repro.engines.trl_trainer import split_whole_groups

    group = torch.arange(P).repeat_interleave(G)
    batch = {"group": group, "rows": torch.arange(P * G)}
    trl = [sorted(set(m["group"].tolist())) for m in split_whole_groups(batch, K, seed, step)]
    assert trl == native_groups(seed, step)
    assert sorted(g for part in trl for g in part) == list(range(P))


def test_extra_passes_draw_fresh_permutations_after_the_single_pass_one():
    one, = minibatch_orders(3, 2, P, K)
    two = minibatch_orders(3, 2, P, K, passes=2)
    assert torch.equal(two[0], one) and not torch.equal(two[1], one)
    assert native_groups(3, 2, epochs=2) == [sorted(g.tolist()) for o in two for g in o]
    assert not torch.equal(one, minibatch_orders(3, 3, P, K)[0])  # another step, another order
