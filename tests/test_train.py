"""The RL trainer: smoke run of every algorithm, log schema, determinism, DFPO vs GSPO
cancellation metrics in the per-step log, SIGKILL + resume = uninterrupted run (bit for bit)."""

from __future__ import annotations

import functools
import json
import math
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import torch
import train_helpers
from train_helpers import comparable, kill_and_resume, sharpened_tiny_policy

from repro.engines.registry import train
from repro.models import load
from repro.objectives import algorithm_names
from repro.results import TRAIN_LOG, read_table
from repro.results.io import git_revision
from repro.results.schemas import TRAIN_LOG_PREAMBLE, TRAIN_LOG_ROUTER
from repro.training.config import TrainConfig, load_train_config

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """train_helpers.sharpened_tiny_policy, sampled at T = 1 (training refuses top-k)."""
    return sharpened_tiny_policy(tmp_path_factory.mktemp("policy") / "tiny")


small = functools.partial(train_helpers.small, steps=3)


# every registered algorithm with its defaults (DFPO: min_replace), and DFPO's projection
ALGORITHMS = [(name, {}) for name in algorithm_names()] + [("dfpo", {"transform": "orth_proj"})]


@pytest.mark.parametrize(("algorithm", "objective"), ALGORITHMS)
def test_every_algorithm_runs_and_logs_its_schema(algorithm, objective, tiny_model, tmp_path,
                                                  hashed):
    final = train(TrainConfig(**small(tiny_model, algorithm=algorithm, objective=objective)),
                  tmp_path)
    rows = read_table(tmp_path / "train_log.parquet", TRAIN_LOG).to_pylist()
    assert [r["step"] for r in rows] == [1, 2, 3]
    diagnostics = ("asym", "residual_full")  # NaN where a minibatch has no shared node
    diagnostics += () if algorithm == "dfpo" else ("w_shift",)  # DFPO's transform only
    diagnostics += TRAIN_LOG_PREAMBLE  # tasks with preambles only (test_preamble_probes_...)
    diagnostics += TRAIN_LOG_ROUTER  # MoE policies only (test_engines_moe)
    assert all(math.isfinite(v) for r in rows for k, v in r.items()
               if isinstance(v, float) and k not in diagnostics)
    assert rows[-1]["gen_tokens_cum"] == sum(r["gen_tokens"] for r in rows)
    assert (final / "config.json").exists() and (tmp_path / "checkpoints" / "step_000003").exists()
    assert any(r["grad_norm"] > 0 for r in rows)  # something was learned from the rewards
    assert all(r["s_spread"] > 0 for r in rows)  # K = 2: the second update is off-policy
    assert all(r["s_spread_product"] > r["s_spread"] for r in rows)  # sums vs means of log r
    assert all(0 < r["shared_frac"] <= 1 for r in rows)  # first tokens of a group coincide


def test_sequence_ratio_spread_is_the_mean_within_group_relative_range():
    from repro.objectives import Minibatch
    from repro.objectives.metrics import seq_ratio_spread

    mask = torch.tensor([[True, True], [True, False], [True, True], [True, True]])
    logp_old = torch.zeros(4, 2)
    logp = torch.tensor([[0.2, 0.0], [0.0, 0.0], [-0.1, -0.1], [0.3, 0.3]]) * mask
    mb = Minibatch(logp, logp_old, mask, torch.tensor([1.0, -1.0, 1.0, -1.0]),
                   torch.tensor([0, 0, 1, 1]))
    s = [math.exp(0.1), 1.0, math.exp(-0.1), math.exp(0.3)]  # mean token log-ratio per row
    want = ((s[0] - s[1]) / ((s[0] + s[1]) / 2) + (s[3] - s[2]) / ((s[2] + s[3]) / 2)) / 2
    assert seq_ratio_spread(mb) == pytest.approx(want, rel=1e-6)  # float32 log-ratios
    assert seq_ratio_spread(Minibatch(logp_old, logp_old, mask, mb.advantages, mb.group)) == 0


def test_ablation_neighbours_take_different_trajectories(tiny_model, tmp_path, hashed):
    """dfpo_global leaves dfpo_min's trajectory on >= 90% of the steps that carry signal, once
    K > 1 spreads the sequence ratios. Compared: grad_norm and ppo_kl, not the loss value, which
    is ~0 for every min_replace variant by construction (sum_i A_i w~_i = 0 in each group).
    (dfpo_min_nosg is not checked here: its extra term sum_i A_i n_i grad w~_i vanishes when all
    responses have one length n_i, as these 12-token truncated ones do.)"""
    variants = {"min": {"transform": "min_replace"}, "global": {"transform": "global_scale"}}
    logs = {}
    for name, objective in variants.items():
        train(TrainConfig(**small(tiny_model, steps=4, objective=objective)), tmp_path / name)
        logs[name] = read_table(tmp_path / name / "train_log.parquet", TRAIN_LOG).to_pylist()
    live = [i for i, r in enumerate(logs["min"]) if r["zero_adv_frac"] < 1]
    assert len(live) >= 2
    for other in ("global",):
        differ = [any(abs(logs["min"][i][k] - logs[other][i][k]) > 1e-7 * abs(logs["min"][i][k])
                      for k in ("grad_norm", "ppo_kl")) for i in live]
        assert sum(differ) >= 0.9 * len(differ), (other, differ)


def test_dfpo_cancels_and_gspo_does_not_in_the_step_log(tiny_model, tmp_path, hashed):
    logs = {}
    for name, kw in [("dfpo", {}), ("gspo", {"objective": {"eps_low": 0.2, "eps_high": 0.2}})]:
        train(TrainConfig(**small(tiny_model, algorithm=name, steps=4, **kw)), tmp_path / name)
        logs[name] = read_table(tmp_path / name / "train_log.parquet", TRAIN_LOG).to_pylist()
    for key in ("asym", "residual_full"):
        dfpo = [r[key] for r in logs["dfpo"] if not math.isnan(r[key])]
        gspo = [r[key] for r in logs["gspo"] if not math.isnan(r[key])]
        assert dfpo and gspo, f"no step had nodes for {key}: the test needs shared prefixes"
        assert max(dfpo) < 1e-6
        assert max(gspo) > 1e-3


def test_same_seed_same_metrics(tiny_model, tmp_path, hashed):
    cfg = TrainConfig(**small(tiny_model, steps=2))
    train(cfg, tmp_path / "a")
    train(cfg, tmp_path / "b")
    a, b = (read_table(tmp_path / x / "train_log.parquet", TRAIN_LOG).to_pylist() for x in "ab")
    assert comparable(a) == comparable(b)
    other = read_table(tmp_path / "a" / "train_log.parquet", TRAIN_LOG)  # a different seed differs
    train(TrainConfig(**small(tiny_model, steps=2, seed=1)), tmp_path / "c")
    c = read_table(tmp_path / "c" / "train_log.parquet", TRAIN_LOG).to_pylist()
    assert comparable(c) != comparable(other.to_pylist())


def test_preamble_probes_are_logged_kept_across_a_resume_and_reproducible(tiny_model, tmp_path,
                                                                        hashed, capsys):
    """synth-preamble logs preamble_kl / phrasing_kl against the start measured once; a run
    resumed from a checkpoint (the start's measure in its state) logs the same numbers."""
    cfg = TrainConfig(**small(tiny_model, tasks={"synth-preamble": 1.0}, checkpoint_every=1))
    train(cfg, tmp_path / "whole")
    rows = read_table(tmp_path / "whole" / "train_log.parquet", TRAIN_LOG).to_pylist()
    assert all(r["preamble_kl"] > 0 and r["phrasing_kl"] > 0 for r in rows)  # lr 1e-3 moves it
    shutil.copytree(tmp_path / "whole" / "checkpoints" / "step_000002",
                    tmp_path / "resumed" / "checkpoints" / "step_000002")
    train(cfg, tmp_path / "resumed", resume=True)
    assert "resuming from" in capsys.readouterr().out
    resumed = read_table(tmp_path / "resumed" / "train_log.parquet", TRAIN_LOG).to_pylist()
    assert comparable(resumed) == comparable(rows)


@pytest.mark.slow
def test_sigkill_and_resume_equals_an_uninterrupted_run(tiny_model, tmp_path):
    config = small(tiny_model, steps=6, checkpoint_every=2, checkpoint_fractions=[1.0])
    whole, resumed = kill_and_resume(config, tmp_path)
    assert [r["step"] for r in resumed] == list(range(1, 7))
    assert comparable(resumed) == comparable(whole)  # exact equality, floats included


@pytest.mark.parametrize("behaviour", ["trainer", "engine"])
def test_first_minibatch_ratio_is_one_at_the_sampling_temperature(tiny_model, tmp_path, hashed,
                                                                   monkeypatch, behaviour):
    """At T != 1 the sampler, logp_old and the first update all score softmax(logits / T): the
    ratio is exactly 1 on the first minibatch (the trainer's own logp_old) or equal up to float
    noise (the engine's), and logp_old is the T-scaled log-prob of a plain forward pass."""
    from repro.engines import core, native

    losses, scored = [], []
    real_loss, real_logprobs = core.policy_loss, native.response_logprobs

    def spy_loss(cfg, mb, norm=None):
        losses.append((mb.logp.detach().clone(), mb.logp_old.clone(), mb.mask.clone()))
        return real_loss(cfg, mb, norm)

    def spy_logprobs(model, ids, attn, resp, **kw):
        out = real_logprobs(model, ids, attn, resp, **kw)
        scored.append((ids, attn, resp, out[0].detach()))
        return out

    monkeypatch.setattr(core, "policy_loss", spy_loss)  # the loss every engine calls
    monkeypatch.setattr(native, "response_logprobs", spy_logprobs)
    train(TrainConfig(**small(tiny_model, steps=1, temperature=0.5,
                              behaviour_logprobs=behaviour)), tmp_path)
    logp, logp_old, mask = losses[0]  # minibatch 1 of step 1: the policy that sampled
    diff = (logp - logp_old)[mask].abs().max()
    assert diff == 0 if behaviour == "trainer" else diff < 1e-4

    ids, attn, resp, old_all = scored[0]  # the loop's logp_old pass over the rollout batch
    model = load(str(tiny_model))[0].eval()
    with torch.no_grad():
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits[:, :-1].float()
    target, sel = ids[:, 1:, None], resp[:, 1:]
    at_t = torch.log_softmax(logits / 0.5, -1).gather(-1, target)[..., 0][sel]
    at_1 = torch.log_softmax(logits, -1).gather(-1, target)[..., 0][sel]
    assert (at_t - old_all[resp]).abs().max() < 1e-4
    assert (at_1 - old_all[resp]).abs().max() > 1e-2  # T matters: the check can fail


def test_truncated_sampling_is_refused_in_training():
    for key, value in (("top_p", 0.95), ("top_k", 20)):
        with pytest.raises(ValueError, match=f"TrainConfig.{key} must be"):
            TrainConfig(model="m", **{key: value})


def test_config_errors_name_the_field(tmp_path):
    with pytest.raises(ValueError, match=r"TrainConfig.minibatches"):
        TrainConfig(model="m", prompts_per_step=6, minibatches=4)
    with pytest.raises(ValueError, match=r"TrainConfig.group_size"):
        TrainConfig(model="m", group_size=1)
    with pytest.raises(ValueError, match=r"TrainConfig.tasks"):
        TrainConfig(model="m", tasks={"gsm8k": 1.0})
    with pytest.raises(ValueError, match="transform"):
        TrainConfig(model="m", objective={"transform": "max_replace"})
    bad = tmp_path / "train.yaml"
    bad.write_text("model: m\nlearning_rate: 0.1\n")
    with pytest.raises(ValueError,
                       match=r"train.yaml: unknown TrainConfig key\(s\) \['learning_rate'\]"):
        load_train_config(bad, [])
    cfg = load_train_config(None, ["model=m", "objective.transform=orth_proj", "steps=7"])
    assert cfg.objective.transform == "orth_proj" and cfg.steps == 7
    assert cfg.to_dict()["objective"] == {"transform": "orth_proj"}  # as given
    cfg = load_train_config(None, ["model=m", "lr=5e-5", "grad_clip=1E-2", "algorithm=gspo"])
    assert cfg.lr == 5e-5 and cfg.grad_clip == 0.01  # YAML 1.1 alone would read strings


def test_real_prompt_sets_load_through_the_evaluation_loader(tmp_path):
    """openr1-math (hub parquet) and lcb-train (LCB shards, pinned) feed the trainer's stream
    from an offline mirror, exactly as `repro eval` loads benchmarks."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from fixtures_hub import write_lcb

    from repro.training.rollout import PromptStream

    root = tmp_path / "open-r1" / "OpenR1-Math-220k" / "data"
    root.mkdir(parents=True)
    rows = [{"problem": f"Invented problem {i}: compute {i}+{i}.", "answer": str(2 * i),
             "uuid": f"u{i}", "problem_type": "Algebra", "source": "fixture"} for i in range(5)]
    pq.write_table(pa.Table.from_pylist(rows), root / "train-00000-of-00001.parquet")
    pins = write_lcb(tmp_path)
    stream = PromptStream({"openr1-math": 1.0, "lcb-train": 1.0}, seed=0, per_step=6,
                          data_dir=tmp_path, sha256_pins=pins)
    assert {p.problem_id for p in stream.pools["openr1-math"]} == {f"u{i}" for i in range(5)}
    dates = [p.metadata["contest_date"] for p in stream.pools["lcb-train"]]
    assert dates and max(dates) < "2025-02-01"  # nothing from the v6 evaluation window
    picks = stream.at(3)
    assert picks == stream.at(3) and len(picks) == 6  # a pure function of (seed, step)
    assert {name for name, _ in picks} <= {"openr1-math", "lcb-train"}


def test_resume_only_from_the_same_config_and_fingerprint(tiny_model, tmp_path, hashed, capsys):
    """A pipeline rerun after a code or config change must not continue the old run's state."""
    cfg = TrainConfig(**small(tiny_model, steps=2, checkpoint_fractions=[0.5, 1.0]))
    train(cfg, tmp_path, resume=True, fingerprint="code-a")
    capsys.readouterr()
    train(cfg, tmp_path, resume=True, fingerprint="code-a")
    assert "resuming from" in capsys.readouterr().out
    train(cfg, tmp_path, resume=True, fingerprint="code-b")
    assert "starting over" in capsys.readouterr().out
    other = TrainConfig(**small(tiny_model, steps=2, checkpoint_fractions=[0.5, 1.0], lr=2e-3))
    train(other, tmp_path, resume=True, fingerprint="code-b")
    assert "starting over" in capsys.readouterr().out


def test_export_copies_log_and_one_policy_per_budget_fraction(tiny_model, tmp_path, hashed):
    from repro.models import load
    from repro.training.export import export_run

    cfg = TrainConfig(**small(tiny_model, steps=4, checkpoint_fractions=[0.5, 1.0]))
    train(cfg, tmp_path / "scratch")
    dest = export_run(tmp_path / "scratch", tmp_path / "run")
    manifest = json.loads((dest / "manifest.json").read_text())
    assert manifest["fraction_steps"] == {"0.5": 2, "1.0": 4}
    # provenance (issue 47): the commit, a dirty flag, and start <= end, as UTC ISO times
    assert manifest["git_commit"] == git_revision().removesuffix("+dirty")
    assert manifest["git_dirty"] in (True, False) or manifest["git_commit"] == "unknown"
    started, finished = (datetime.fromisoformat(manifest[k]) for k in ("started", "finished"))
    assert started.utcoffset() == timedelta(0) and started <= finished
    assert ((dest / "train_log.parquet").read_bytes()
            == (tmp_path / "scratch" / "train_log.parquet").read_bytes())
    ids = torch.tensor([[5, 6, 7, 8]])
    logits = {name: load(dest / "policy" / f"frac={name}")[0](ids).logits
              for name in ("0.5", "1.0")}
    final = load(tmp_path / "scratch" / "final")[0](ids).logits
    assert torch.equal(logits["1.0"], final) and not torch.equal(logits["0.5"], final)


def test_provenance_splits_the_revision_into_commit_and_dirty_flag(monkeypatch):
    from repro.training import run

    for revision, commit, dirty in (("abc123+dirty", "abc123", True), ("abc123", "abc123", False),
                                    ("unknown", "unknown", None)):
        monkeypatch.setattr(run, "git_revision", lambda r=revision: r)
        got = run.provenance("2026-12-05T01:00:00+00:00")
        assert (got["git_commit"], got["git_dirty"]) == (commit, dirty), revision
        assert got["started"] == "2026-12-05T01:00:00+00:00" and got["finished"] >= got["started"]


def test_export_refuses_an_unfinished_run(tiny_model, tmp_path):
    from repro.training.export import export_run

    with pytest.raises(FileNotFoundError, match="has not finished"):
        export_run(tmp_path / "never-trained", tmp_path / "run")


@pytest.mark.parametrize(("keep", "left"), [(0, [1, 2, 3, 4, 5]), (1, [2, 5]), (2, [2, 4, 5])])
def test_keep_checkpoints_prunes_all_but_the_newest_and_the_budget_fractions(
        tiny_model, tmp_path, hashed, keep, left):
    from repro.training.export import export_run

    cfg = TrainConfig(**small(tiny_model, steps=5, checkpoint_every=1,
                              checkpoint_fractions=[0.4, 1.0], keep_checkpoints=keep))
    train(cfg, tmp_path / "scratch")
    kept = sorted(int(p.name.removeprefix("step_"))
                  for p in (tmp_path / "scratch" / "checkpoints").glob("step_*"))
    assert kept == left
    dest = export_run(tmp_path / "scratch", tmp_path / "run")  # the fractions' policies survive
    assert sorted(p.name for p in (dest / "policy").iterdir()) == ["frac=0.4", "frac=1.0"]
