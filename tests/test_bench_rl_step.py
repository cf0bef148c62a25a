"""`repro bench rl-step` runs one real RL step of the tiny default per round at a toy size and
reports every stage, both baselines and ratios that agree with its own rounds.

Structure and consistency only: speed claims are ratios measured side by side in one run; no
timing threshold is asserted here (a loaded machine would make it flaky and prove nothing).
"""

from __future__ import annotations

import json
import math
import statistics

import pytest
from typer.testing import CliRunner

from repro.bench.report import STAGE_LABELS, print_rl_step_report
from repro.bench.rl_step import (
    ROLLOUT_RATIO_MIN,
    STAGES,
    UPDATE_RATIO_MAX,
    Clocked,
    RLStepBenchConfig,
    run_rl_step_bench,
)
from repro.cli import app

TOY = ["prompts_per_step=2", "group_size=2", "minibatches=2", "max_new_tokens=8"]
REPEATS = 2


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("bench") / "rl_step.json"
    res = run_rl_step_bench(RLStepBenchConfig(overrides=TOY, repeats=REPEATS), show=False,
                            out=out)
    assert json.loads(out.read_text()) == json.loads(json.dumps(res))
    return res


def test_every_stage_of_every_round_is_timed(result):
    assert len(result["rounds"]) == REPEATS  # the warm-up round is not reported
    for r in result["rounds"]:
        for key in (*STAGES, "rollout", "bare_generate", "bare_forward", "bare_fwd_bwd"):
            assert r[key] > 0, key
        assert r["old_logprobs"] == pytest.approx(r["rollout"] - r["generate"] - r["grading"])
        assert r["diagnostics"] < r["update"]
    assert list(result["stages_s"]) == list(STAGES) == list(STAGE_LABELS)


def test_both_sides_sample_the_same_batch_shape(result):
    rows = 2 * 2  # P x G
    for r in result["rounds"]:
        for positions, kept in ((r["positions"], r["kept"]), (r["bare_positions"], r["bare_kept"])):
            assert positions % rows == 0 and rows <= positions <= rows * 8
            assert 0 < kept <= positions


def test_summary_is_the_medians_of_the_rounds(result):
    rounds = result["rounds"]
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    assert result["stages_s"] == {name: med[name] for name in STAGES}
    assert result["step_s"] == pytest.approx(
        med["rollout"] + med["update"] + med["probes"] + med["checkpoint"])
    assert result["shares"] == {s: t / result["step_s"] for s, t in result["stages_s"].items()}
    ratios = result["ratios"]
    assert ratios["rollout_vs_bare_generate"] == pytest.approx(
        (med["positions"] / med["rollout"]) / (med["bare_positions"] / med["bare_generate"]))
    assert ratios["update_vs_bare_fwd_bwd"] == pytest.approx(med["update"] / med["bare_fwd_bwd"])
    assert ratios["old_logprobs_vs_bare_forward"] == pytest.approx(
        med["old_logprobs"] / med["bare_forward"])
    assert all(math.isfinite(v) and v > 0 for v in ratios.values())


def test_acceptance_follows_the_measured_ratios(result):
    rollout, update = result["acceptance"]
    assert rollout["value"] == result["ratios"]["rollout_vs_bare_generate"]
    assert rollout["passed"] == (rollout["value"] >= ROLLOUT_RATIO_MIN)
    assert update["value"] == result["ratios"]["update_vs_bare_fwd_bwd"]
    assert update["passed"] == (update["value"] <= UPDATE_RATIO_MAX)


def test_report_prints_every_stage_and_verdict(result, capsys):
    print_rl_step_report(result)
    text = capsys.readouterr().out
    for label in STAGE_LABELS.values():
        assert label.strip() in text
    assert text.count("PASS") + text.count("FAIL") == 2


def test_clocked_times_one_method_and_forwards_the_rest():
    class Target:
        tokenizer = "tok"

        def generate(self, x):
            if x < 0:
                raise ValueError("negative")
            return 2 * x

    clocked = Clocked(Target(), "generate")
    assert clocked.generate(3) == 6 and clocked.last_args == (3,)
    first = clocked.seconds
    assert first > 0 and clocked.tokenizer == "tok"
    with pytest.raises(ValueError, match="negative"):
        clocked.generate(-1)
    assert clocked.seconds > first  # a failing call is timed too
    assert Clocked(lambda y: y + 1, "__call__")(1) == 2


@pytest.mark.parametrize(("args", "named"), [
    (["nosuchkey=1"], "nosuchkey"),
    (["--repeats", "0"], "repeats"),
    (["engine=trl"], "engine"),
])
def test_bad_input_is_one_line_naming_the_key(args, named):
    res = CliRunner().invoke(app, ["bench", "rl-step", *args])
    assert res.exit_code == 2
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and named in lines[0] and "rl-step" in lines[0]


def test_a_stale_step_samples_with_the_lagged_weights(tmp_path, monkeypatch):
    """staleness=1: the bench's rollouts, as the loop's, sample with the weights of one step
    earlier from its second round on (the first samples with the start's own)."""
    from repro.bench import rl_step

    behind, real = [], rl_step.rollout_stage

    def spy(ctx, step, behaviour=None):
        behind.append(behaviour is not None)
        return real(ctx, step, behaviour)

    monkeypatch.setattr(rl_step, "rollout_stage", spy)
    run_rl_step_bench(RLStepBenchConfig(overrides=[*TOY, "staleness=1"], repeats=2), show=False,
                      out=tmp_path / "rl_step.json")
    assert behind == [False, True, True]
