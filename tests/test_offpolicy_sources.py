"""Realistic off-policy sources as TrainConfig knobs (issue 38): `epochs` (minibatch reuse, TRL's
num_iterations / verl's ppo_epochs), `sampler_dtype` (a bf16 sampler next to an fp32
trainer) and `staleness` (rollouts from the policy d steps behind, as asynchronous trainers).
Their defaults keep today's run; each source moves s off 1 where expected."""

from __future__ import annotations

import math
import shutil

import pyarrow.parquet as pq
import pytest
import torch
from train_helpers import (
    comparable,
    hashed_rewards,
    kill_and_resume,
    sharpened_tiny_policy,
    small,
)

from repro.engines import core, native
from repro.engines.registry import train
from repro.models import load
from repro.objectives import Minibatch, algorithm_names, make_config, policy_loss
from repro.results import TRAIN_LOG, read_table
from repro.training import rollout
from repro.training.config import TrainConfig
from repro.training.logprobs import response_logprobs


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return sharpened_tiny_policy(tmp_path_factory.mktemp("policy") / "tiny")




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
    one, two = log(tmp_path / "one")[0], log(tmp_path / "two")[0]  # step 1: the same rollout
    assert one["gen_tokens"] == two["gen_tokens"]
    # 2N per token to sample and to score logp_old (no KL reference), 6N per pass of updates
    assert two["flops_cum"] / one["flops_cum"] == pytest.approx((2 * 2 + 6 * 2) / (2 * 2 + 6))

    cfg = TrainConfig(**small(tiny_model, prompts_per_step=8, minibatches=2, epochs=2))
    batch = type("B", (), {"group": torch.arange(8), "attention_mask": torch.ones(8, 3)})()
    passes = [[tuple(batch.group[r].tolist()) for r, _ in native.minibatch_rows(cfg, s, batch)]
              for s in range(1, 6)]
    assert any(p[:2] != p[2:] for p in passes)  # pass 2 is not pass 1 replayed


def test_bf16_sampler_moves_s_off_one_at_k1(tiny_model, tmp_path, hashed):
    """K = 1: the policy's own logp_old gives s == 1 exactly; a bf16 copy's gives a spread, and
    the off-policy readings follow (w_dev and log_ratio_mean from the objectives' metrics)."""
    kw = {"minibatches": 1, "lr": 1e-30}
    train(TrainConfig(**small(tiny_model, **kw)), tmp_path / "fp32")
    train(TrainConfig(**small(tiny_model, sampler_dtype="bfloat16", **kw)), tmp_path / "bf16")
    fp32, bf16 = log(tmp_path / "fp32"), log(tmp_path / "bf16")
    assert all(r["s_spread"] == 0 and r["s_spread_product"] == 0 for r in fp32)
    assert all(r["s_spread_product"] > 0 for r in bf16)
    assert all(r["log_ratio_mean"] == 0 and r["w_dev"] == 0 for r in fp32)
    assert all(r["w_dev"] > 0 and r["log_ratio_mean"] != 0 for r in bf16)


@pytest.mark.parametrize("name", algorithm_names())
def test_log_ratio_mean_is_gspo_log_s_averaged_over_sequences(name):
    """Two sequences of 1 and 3 tokens with token log-ratios a and b, b, b: log_ratio_mean is
    (a + b) / 2 (GSPO's log s_i, each sequence once), not the token mean (a + 3b) / 4, which is
    -ppo_kl; every objective reports it."""
    a, b = 0.4, -0.2
    mask = torch.tensor([[True, False, False], [True, True, True]])
    logp = torch.tensor([[a, 0.0, 0.0], [b, b, b]], requires_grad=True)
    batch = Minibatch(logp, torch.zeros(2, 3), mask, torch.tensor([1.0, -1.0]),
                      torch.tensor([0, 0]))
    metrics = policy_loss(make_config(name), batch)[1]
    assert metrics["log_ratio_mean"] == pytest.approx((a + b) / 2)
    assert metrics["ppo_kl"] == pytest.approx(-(a + 3 * b) / 4)


def test_log_ratio_mean_averages_every_update_of_the_step(tiny_model, tmp_path, hashed,
                                                           monkeypatch):
    """K = 2, epochs = 2: a step's log_ratio_mean is the mean of its 4 updates' (equal-sized
    minibatches, so the mean over the sequences of all of them), not the first update's (0:
    on-policy); schema version 7."""
    seen, real = [], native.loss_and_diagnostics

    def spy(*args, **kwargs):
        loss, metrics = real(*args, **kwargs)
        seen.append(metrics["log_ratio_mean"])
        return loss, metrics

    monkeypatch.setattr(native, "loss_and_diagnostics", spy)
    train(TrainConfig(**small(tiny_model, epochs=2)), tmp_path / "reuse")
    rows = log(tmp_path / "reuse")
    assert len(seen) == 2 * 4 and seen[0] == 0 and seen[4] == 0
    for row, updates in zip(rows, (seen[:4], seen[4:]), strict=True):
        assert row["log_ratio_mean"] == pytest.approx(sum(updates) / 4, rel=1e-12)
        assert row["log_ratio_mean"] != 0
    assert pq.read_schema(tmp_path / "reuse" / "train_log.parquet").metadata[
        b"schema_version"] == b"7"


def test_a_log_written_before_version_7_reads_log_ratio_mean_as_nan(tiny_model, tmp_path,
                                                                     hashed):
    """Version 6 logged another quantity under the name (the first update's token mean): such
    a file stays readable, with log_ratio_mean NaN and every other column as written."""
    train(TrainConfig(**small(tiny_model, epochs=2)), tmp_path / "run")
    path = tmp_path / "run" / "train_log.parquet"
    table = pq.read_table(path)
    old = tmp_path / "v6.parquet"
    pq.write_table(table.replace_schema_metadata(
        table.schema.metadata | {b"schema_version": b"6"}), old)
    now, before = log(tmp_path / "run"), read_table(old, TRAIN_LOG).to_pylist()
    assert all(r["log_ratio_mean"] != 0 for r in now)
    assert all(math.isnan(r["log_ratio_mean"]) for r in before)
    assert comparable([r | {"log_ratio_mean": 0} for r in before]) == comparable(
        [r | {"log_ratio_mean": 0} for r in now])


def test_staleness_zero_keeps_no_history_and_the_same_log(tiny_model, tmp_path, hashed,
                                                         monkeypatch):
    """staleness=0: the policy itself samples (no lagged copy is made) and the log is the one
    of a config without the key."""
    real, seen = native.lagged_weights, []

    def spy(model, lagged, d):
        behind = real(model, lagged, d)
        seen.append(behind is None and lagged == [])
        return behind

    monkeypatch.setattr(native, "lagged_weights", spy)
    train(TrainConfig(**small(tiny_model, staleness=0)), tmp_path / "zero")
    assert seen == [True, True]
    monkeypatch.undo()
    monkeypatch.setattr(rollout.Rewarder, "__call__", hashed_rewards)
    train(TrainConfig(**small(tiny_model)), tmp_path / "plain")
    assert comparable(log(tmp_path / "zero")) == comparable(log(tmp_path / "plain"))


@pytest.mark.parametrize("d", [1, 2])
def test_stale_rollouts_come_from_the_policy_d_steps_behind(tiny_model, tmp_path, hashed,
                                                            monkeypatch, d):
    """K = 1 (every update on-policy without the source): step t's logp_old is the log-prob
    of the weights at the start of step max(1, t - d), not of the current ones; w_dev is 0 at
    step 1 (the start samples, nothing was updated yet) and > 0 after; with d = 0 it is 0
    everywhere."""
    starts, scored_at = {}, {}
    real = native.update_stage

    def spy(ctx, step, scored):
        starts[step] = {k: v.clone() for k, v in ctx.model.state_dict().items()}
        scored_at[step] = scored
        return real(ctx, step, scored)

    kw = {"minibatches": 1, "steps": 4}
    train(TrainConfig(**small(tiny_model, **kw)), tmp_path / "fresh")
    assert all(r["w_dev"] == 0 for r in log(tmp_path / "fresh"))
    monkeypatch.setattr(native, "update_stage", spy)
    train(TrainConfig(**small(tiny_model, staleness=d, **kw)), tmp_path / "stale")
    rows = log(tmp_path / "stale")
    assert rows[0]["w_dev"] == 0 and all(r["w_dev"] > 0 for r in rows[1:])

    policy = load(tiny_model)[0].eval()

    def logp_under(weights, scored):
        policy.load_state_dict(weights)
        b = scored.batch
        with torch.no_grad():
            return response_logprobs(policy, b.input_ids, b.attention_mask, b.response_mask,
                                     with_entropy=False)[0]

    for step in range(1, 5):
        scored = scored_at[step]
        mask = scored.batch.response_mask
        lagged = logp_under(starts[max(1, step - d)], scored)
        assert torch.allclose(scored.logp_old[mask], lagged[mask], rtol=0, atol=1e-6)
        if step > 1:  # the current policy's log-probs are another thing
            current = logp_under(starts[step], scored)
            assert (scored.logp_old[mask] - current[mask]).abs().max() > 1e-4


def test_stale_run_resumes_to_the_same_log(tiny_model, tmp_path, hashed):
    """The lagged weights travel in the checkpoint: a d = 2 run resumed from its step-2
    checkpoint logs what the uninterrupted run logs (step 3 samples with step 1's policy)."""
    cfg = TrainConfig(**small(tiny_model, staleness=2, steps=4, minibatches=1,
                              checkpoint_every=1))
    train(cfg, tmp_path / "whole")
    shutil.copytree(tmp_path / "whole" / "checkpoints" / "step_000002",
                    tmp_path / "resumed" / "checkpoints" / "step_000002")
    train(cfg, tmp_path / "resumed", resume=True)
    whole, resumed = log(tmp_path / "whole"), log(tmp_path / "resumed")
    assert [r["step"] for r in resumed] == [1, 2, 3, 4]
    assert comparable(resumed) == comparable(whole)


@pytest.mark.slow
def test_a_stale_run_killed_and_resumed_equals_an_uninterrupted_one(tiny_model, tmp_path):
    """d = 2, SIGKILLed after its step-2 checkpoint and resumed in a new process: bit for bit
    the uninterrupted run's log (the lagged weights come back from the checkpoint)."""
    config = small(tiny_model, staleness=2, minibatches=1, steps=6, checkpoint_every=2)
    whole, resumed = kill_and_resume(config, tmp_path)
    assert [r["step"] for r in resumed] == list(range(1, 7))
    assert all(r["w_dev"] > 0 for r in whole[1:])
    assert comparable(resumed) == comparable(whole)


@pytest.mark.parametrize(("key", "value", "engine"), [
    ("staleness", -1, "native"), ("epochs", 0, "native"),
    ("sampler_dtype", "float16", "native"), ("sampler_dtype", "float16", "trl")])
def test_refusals_are_one_line_naming_the_key(key, value, engine):
    with pytest.raises(ValueError, match=f"TrainConfig.{key} ") as err:
        TrainConfig(model="m", engine=engine, **{key: value})
    assert "\n" not in str(err.value)

