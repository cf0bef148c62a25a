"""Realistic off-policy sources as TrainConfig knobs (issue 38): `epochs` (minibatch reuse, TRL's
num_iterations / verl's ppo_epochs) and `sampler_dtype` (a bf16 sampler next to an fp32
trainer). Their defaults keep today's run; each source moves s off 1 where expected."""

from __future__ import annotations

import pytest
import torch
from train_helpers import comparable, hashed_rewards, sharpened_tiny_policy

from repro.engines import core, native
from repro.engines.registry import train
from repro.results import TRAIN_LOG, read_table
from repro.training import rollout
from repro.training.config import TrainConfig


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return sharpened_tiny_policy(tmp_path_factory.mktemp("policy") / "tiny")


@pytest.fixture
def hashed(monkeypatch):
    monkeypatch.setattr(rollout.Rewarder, "__call__", hashed_rewards)


def small(model, **kw) -> dict:
    base = {"model": str(model), "steps": 2, "prompts_per_step": 4, "group_size": 4,
            "minibatches": 2, "max_new_tokens": 12, "probe_n": 2, "checkpoint_every": 0,
            "checkpoint_fractions": [1.0], "lr": 1e-3}
    return base | kw


def log(out) -> list[dict]:
    return read_table(out / "train_log.parquet", TRAIN_LOG).to_pylist()


def test_defaults_leave_the_run_as_it_was(tiny_model, tmp_path, hashed):
    """epochs=1 and sampler_dtype=null: the same log as a config without the keys, and pass 1's
    minibatch order is the single-pass rule (randperm seeded by seed * 1_000_003 + step)."""
    train(TrainConfig(**small(tiny_model)), tmp_path / "a")
    train(TrainConfig(**small(tiny_model, epochs=1, sampler_dtype=None)), tmp_path / "b")
    assert comparable(log(tmp_path / "a")) == comparable(log(tmp_path / "b"))

    cfg = TrainConfig(**small(tiny_model, prompts_per_step=8, minibatches=4, seed=3))
    batch = type("B", (), {"group": torch.arange(8).repeat_interleave(2),
                           "attention_mask": torch.ones(16, 5, dtype=torch.long)})()
    for step in (1, 2):
        want = torch.randperm(8, generator=torch.Generator().manual_seed(3 * 1_000_003 + step))
        got = [batch.group[rows].unique() for rows, _ in native.minibatch_rows(cfg, step, batch)]
        assert torch.equal(torch.cat(got).sort().values, torch.arange(8))
        assert [g.tolist() for g in got] == [sorted(p.tolist()) for p in want.view(4, -1)]


def test_epochs_repeat_the_updates_on_fresh_permutations(tiny_model, tmp_path, hashed,
                                                         monkeypatch):
    """epochs=2 runs 2 x K updates per rollout batch, pass 2 on another order of the groups."""
    calls = []
    real = core.policy_loss
    monkeypatch.setattr(core, "policy_loss", lambda cfg, mb, norm=None: (
        calls.append(1), real(cfg, mb, norm))[1])
    train(TrainConfig(**small(tiny_model)), tmp_path / "one")
    once = len(calls)
    calls.clear()
    train(TrainConfig(**small(tiny_model, epochs=2)), tmp_path / "two")
    assert once == 2 * 2 and len(calls) == 2 * once  # steps x K, then twice that

    cfg = TrainConfig(**small(tiny_model, prompts_per_step=8, minibatches=2, epochs=2))
    batch = type("B", (), {"group": torch.arange(8), "attention_mask": torch.ones(8, 3)})()
    passes = [[tuple(batch.group[r].tolist()) for r, _ in native.minibatch_rows(cfg, s, batch)]
              for s in range(1, 6)]
    assert any(p[:2] != p[2:] for p in passes)  # pass 2 is not pass 1 replayed


def test_bf16_sampler_moves_s_off_one_at_k1(tiny_model, tmp_path, hashed):
    """K = 1: the policy's own logp_old gives s == 1 exactly; a bf16 copy's gives a spread, and
    the off-policy readings follow (w_dev from the objectives' metrics, log_ratio_mean = -ppo_kl
    of update 1, the only one here)."""
    kw = {"minibatches": 1, "lr": 1e-30}
    train(TrainConfig(**small(tiny_model, **kw)), tmp_path / "fp32")
    train(TrainConfig(**small(tiny_model, sampler_dtype="bfloat16", **kw)), tmp_path / "bf16")
    fp32, bf16 = log(tmp_path / "fp32"), log(tmp_path / "bf16")
    assert all(r["s_spread"] == 0 and r["s_spread_product"] == 0 for r in fp32)
    assert all(r["s_spread_product"] > 0 for r in bf16)
    assert all(r["log_ratio_mean"] == 0 and r["w_dev"] == 0 for r in fp32)
    assert all(r["w_dev"] > 0 and r["log_ratio_mean"] != 0 for r in bf16)
    assert all(r["log_ratio_mean"] == -r["ppo_kl"] for r in bf16)


@pytest.mark.parametrize(("key", "value", "engine"), [
    ("epochs", 0, "native"), ("epochs", 2, "trl"),
    ("sampler_dtype", "float16", "native"), ("sampler_dtype", "bfloat16", "trl")])
def test_refusals_are_one_line_naming_the_key(key, value, engine):
    with pytest.raises(ValueError, match=f"TrainConfig.{key} ") as err:
        TrainConfig(model="m", engine=engine, **{key: value})
    assert "\n" not in str(err.value)

