"""Reporting: per-job files -> aggregate Parquet -> tables and figures, checked against numbers
computed here by hand from the correctness and reward curves the fake jobs were built with."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from job_files import write_eval_files
from typer.testing import CliRunner

from repro.cli import app
from repro.reporting.aggregate import path_keys
from repro.reporting.figures import FIGURES
from repro.reporting.load import load_aggregate
from repro.reporting.scores import compare, estimate
from repro.reporting.study import Study
from repro.reporting.tables_train import mechanism, threshold_hits
from repro.results import (
    AGG_EVAL_PROBLEMS,
    AGG_EVAL_SAMPLES,
    AGG_RUNS,
    PAPER_REFERENCE,
    TRAIN_LOG,
    read_table,
    write_table,
)
from repro.results.schemas import TRAIN_LOG_METRICS, TRAIN_LOG_TIMING

MODEL, G, K, PROBLEMS, SEEDS = "tiny", 8, 4, 6, (0, 1, 2)
BENCHES = ("synth-aime", "synth-lcb")
STEPS, TOKENS_PER_STEP = 12, 100
# gspo: reward 0 for 4 steps then 1: its 5-step trailing mean first reaches 0.5 at step 7
# (3 of the last 5 are 1), i.e. at 7 * 100 generated tokens; grpo never gets above 0.2.
REWARDS = {"gspo": [0.0] * 4 + [1.0] * 8, "dfpo_min": [0.0] * 2 + [1.0] * 10, "grpo": [0.2] * STEPS}
HIT_TOKENS = {"gspo": 7 * TOKENS_PER_STEP, "dfpo_min": 5 * TOKENS_PER_STEP}
ASYM = [1.0, float("nan"), 3.0] + [2.0] * (STEPS - 3)  # step mean ignoring NaN: 2.0


def run_dir(root: Path, algo: str, seed: int, group_size: int | None = G) -> Path:
    g = "" if group_size is None else f"group_size={group_size}/"
    return root / f"algo={algo}/model={MODEL}/{g}seed={seed}"


def write_train(root: Path, algo: str, seed: int, rewards: list[float],
                group_size: int = G) -> Path:
    rows = []
    for i, reward in enumerate(rewards):
        metrics = dict.fromkeys(TRAIN_LOG_METRICS + TRAIN_LOG_TIMING, 0.5)
        metrics |= {"reward_mean": reward, "entropy": 1.0 - 0.05 * i, "asym": ASYM[i],
                    "kl_template": float("nan"), "logodds_drift": -0.1 * i,
                    "grader_errors": float(i % 3 == 0)}  # steps 1, 4, 7, 10: 4 per run
        rows.append(metrics | {
            "algorithm": algo, "objective": algo.split("_")[0], "seed": seed, "step": i + 1,
            "gen_tokens": TOKENS_PER_STEP, "gen_tokens_cum": TOKENS_PER_STEP * (i + 1),
            "flops_cum": 1e6 * (i + 1),
        })
    path = run_dir(root / "runs", algo, seed, group_size) / "train_log.parquet"
    write_table(rows[::-1], TRAIN_LOG, path)  # reversed: the aggregate must sort by step
    return path


def write_eval(root: Path, algo: str, seed: int, bench: str, correct: np.ndarray,
               group_size: int | None = G, frac: float = 1.0) -> Path:
    """`correct`: [problems, k] 0/1; seed 99 in every row (not the run's: readers key on paths)."""
    folder = run_dir(root / "eval", algo, seed, group_size) / f"frac={frac}/benchmark={bench}"
    return write_eval_files(folder, [[(bool(ok), None) for ok in row] for row in correct],
                            benchmark=bench, seed=99)


def correctness(seed: int, bench: str) -> dict[str, np.ndarray]:
    """[problems, k] 0/1 per algorithm; dfpo_min is gspo plus extra correct samples."""
    rng = np.random.default_rng([seed, BENCHES.index(bench)])
    gspo = rng.random((PROBLEMS, K)) < 0.3
    dfpo = gspo | (rng.random((PROBLEMS, K)) < 0.6)
    return {"gspo": gspo, "dfpo_min": dfpo, "grpo": rng.random((PROBLEMS, K)) < 0.3}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Per-job files, their aggregate (through the CLI) and the files' correctness by key."""
    root = tmp_path_factory.mktemp("results")
    files, truth = [], {}
    for seed in SEEDS:
        for algo, rewards in REWARDS.items():
            files.append(write_train(root, algo, seed, rewards))
        files.append(write_train(root, "gspo", seed, REWARDS["gspo"], group_size=4))
        for bench in BENCHES:
            for algo, correct in correctness(seed, bench).items():
                truth[algo, seed, bench] = correct
                files.append(write_eval(root, algo, seed, bench, correct))
                files.append(write_eval(root, algo, seed, bench, correct, frac=0.5))
            files += [write_eval(root, a, seed, bench, correct, group_size=4)
                      for a, correct in correctness(seed + 10, bench).items() if a != "grpo"]
    for seed in SEEDS:  # the start at every run seed, as the pipeline evaluates it
        for bench in BENCHES:
            start = np.random.default_rng([seed, 99]).random((PROBLEMS, K)) < 0.2
            truth["init", seed, bench] = start
            files.append(write_eval(root, "init", seed, bench, start, group_size=None, frac=0.0))
    out = root / "aggregate"
    result = CliRunner().invoke(app, ["aggregate", "--out", str(out), "--experiment", "test",
                                      "--main-algos", "grpo,gspo,dfpo_min", "--threshold", "0.5",
                                      *map(str, files)])
    assert result.exit_code == 0, result.output
    return {"root": root, "files": files, "out": out, "truth": truth}


def test_path_keys_are_typed_and_prefix_free():
    path = Path("/tmp/x=/a/algo=init/model=m/seed=3/frac=0.5/benchmark=b/problems.parquet")
    assert path_keys(path) == {"x": "", "algo": "init", "model": "m", "seed": 3, "frac": 0.5,
                               "benchmark": "b"}
    with pytest.raises(ValueError, match="seed='one'"):
        path_keys(Path("algo=a/seed=one/train_log.parquet"))


def test_aggregate_keys_rows_and_settings(world):
    out, n_evals = world["out"], sum(f.name == "problems.parquet" for f in world["files"])
    problems = read_table(out / "eval_problems.parquet", AGG_EVAL_PROBLEMS)
    samples = read_table(out / "eval_samples.parquet", AGG_EVAL_SAMPLES)
    runs = read_table(out / "runs.parquet", AGG_RUNS).to_pylist()
    assert problems.num_rows == n_evals * PROBLEMS and samples.num_rows == n_evals * PROBLEMS * K
    assert len(runs) == 4 * len(SEEDS)
    init = [r for r in problems.to_pylist() if r["run_algo"] == "init"]
    assert len(init) == 2 * PROBLEMS * len(SEEDS) and all(
        r["run_group_size"] is None and r["frac"] == 0.0 for r in init)
    gspo = next(r for r in runs if r["run_algo"] == "gspo" and r["run_seed"] == 1
                and r["run_group_size"] == G)
    assert gspo["steps"] == STEPS and gspo["gen_tokens_cum"] == STEPS * TOKENS_PER_STEP
    assert gspo["time_total"] == pytest.approx(STEPS * 1.0)
    assert gspo["reward_final"] == 1.0 and gspo["entropy_final"] == pytest.approx(1 - 0.05 * 11)
    first = problems.slice(0, PROBLEMS).to_pylist()  # sorted: keys, then problem_id
    assert [r["problem_id"] for r in first] == sorted(r["problem_id"] for r in first)
    config = json.loads(pq.read_schema(out / "train_curves.parquet").metadata[b"config"])
    expected = Study(experiment="test", main_algos=("grpo", "gspo", "dfpo_min"), threshold=0.5)
    assert Study.from_config(config) == expected


def test_aggregate_refuses_bad_inputs(world, tmp_path):
    problems = next(f for f in world["files"] if f.name == "problems.parquet")
    lonely = tmp_path / "algo=a/model=m/group_size=8/seed=0/frac=1.0/benchmark=b/problems.parquet"
    lonely.parent.mkdir(parents=True)
    lonely.write_bytes(problems.read_bytes())
    runner = CliRunner()
    for files, message in (
        ([lonely], str(lonely.with_name("samples.parquet"))),
        ([problems, problems], "same keys"),
        ([problems.with_name("samples.parquet")], "not a train_log.parquet"),
    ):
        result = runner.invoke(app, ["aggregate", "--out", str(tmp_path / "agg"), *map(str, files)])
        assert result.exit_code == 2 and message in result.output
    unkeyed = tmp_path / "seed=0/train_log.parquet"
    unkeyed.parent.mkdir()
    unkeyed.write_bytes(world["files"][0].read_bytes())
    result = runner.invoke(app, ["aggregate", "--out", str(tmp_path / "agg"), str(unkeyed)])
    assert result.exit_code == 2 and str(unkeyed) in result.output and "'algo'" in result.output
    assert not (tmp_path / "agg").exists()


def test_main_numbers_match_a_hand_computation(world):
    agg = load_aggregate(world["out"])
    truth = world["truth"]
    for bench in BENCHES:
        hand = np.mean([truth["dfpo_min", s, bench].mean() for s in SEEDS]) * 100
        est = estimate(agg.seed_scores(MODEL, "dfpo_min", bench, G, 1.0))
        assert est.mean == pytest.approx(hand) and est.lo <= est.mean <= est.hi
        assert est.seeds == len(SEEDS) and est.problems == PROBLEMS
        test = compare(agg.seed_scores(MODEL, "dfpo_min", bench, G, 1.0),
                       agg.seed_scores(MODEL, "gspo", bench, G, 1.0))
        per_problem = np.mean([truth["dfpo_min", s, bench].mean(1) - truth["gspo", s, bench].mean(1)
                               for s in SEEDS], axis=0)
        assert test.diff == pytest.approx(per_problem.mean() * 100) and test.diff > 0
        assert test.p_value < 0.05


def test_threshold_and_mechanism_values(world):
    agg = load_aggregate(world["out"])
    for algo, tokens in HIT_TOKENS.items():
        hits = threshold_hits(agg, MODEL, algo)
        assert hits.hits == dict.fromkeys(SEEDS, tokens) and hits.mean == tokens
    assert threshold_hits(agg, MODEL, "grpo").reached == []
    means = mechanism(agg.seed_curves(MODEL, "gspo", G))
    assert means["asym"] == pytest.approx(2.0) and np.isnan(means["kl_template"])
    assert means["entropy_final"] == pytest.approx(1 - 0.05 * (STEPS - 1))
    assert means["abs_drift_mean"] == pytest.approx(np.mean(0.1 * np.arange(STEPS)))
    assert means["jitter2"] == pytest.approx(2 / (STEPS - 2))  # one kink of height 1 -> two |1|
    assert means["grader_errors"] == 4  # total per run, mean over seeds


def md_rows(path: Path) -> dict[str, str]:
    """Markdown table lines by their first cell."""
    lines = path.read_text().splitlines()
    return {line.split("|")[1].strip(): line for line in lines if line.startswith("| ")}


def test_tables_markdown_and_latex(world, tmp_path):
    paper = tmp_path / "reference.parquet"
    runner = CliRunner()
    assert runner.invoke(app, ["paper-reference", "--out", str(paper)]).exit_code == 0
    out = tmp_path / "tables"
    result = runner.invoke(app, ["tables", "--aggregate", str(world["out"]), "--out", str(out),
                                 "--paper", str(paper)])
    assert result.exit_code == 0, result.output
    for name in ("main", "compute", "mechanism", "ablations", "verdict", "paper"):
        tex = (out / f"{name}.tex").read_text()
        assert all(rule in tex for rule in (r"\toprule", r"\midrule", r"\bottomrule"))
        assert "dfpo_min" not in tex and r"dfpo\_min" in tex
        assert (out / f"{name}.md").read_text().count("|---|") >= 1
    rows = md_rows(out / "compute.md")
    assert "not reached" in rows["grpo"] and "(0/3)" in rows["grpo"]
    assert "700" in rows["gspo"] and "(3/3)" in rows["gspo"]
    main = md_rows(out / "main.md")
    hand = np.mean([world["truth"]["dfpo_min", s, "synth-aime"].mean() for s in SEEDS]) * 100
    assert f"| {hand:.1f} [" in main["dfpo_min"] and "| +" in main["dfpo_min"]
    assert "init" in main and "not run" in (out / "ablations.md").read_text()  # no ablation runs
    vs_init = np.mean([world["truth"]["dfpo_min", s, "synth-aime"].mean()
                       - world["truth"]["init", s, "synth-aime"].mean() for s in SEEDS]) * 100
    assert f"| {vs_init:+.1f} [" in main["dfpo_min"] and f"{len(SEEDS)} seeds)" in main["dfpo_min"]
    assert "synthetic stand-ins" in (out / "paper.md").read_text()


def test_main_table_without_baseline_says_so(world, tmp_path):
    files = [f for f in world["files"] if "algo=gspo" not in str(f)]
    runner = CliRunner()
    out = tmp_path / "agg"
    assert runner.invoke(app, ["aggregate", "--out", str(out), *map(str, files)]).exit_code == 0
    result = runner.invoke(app, ["tables", "--aggregate", str(out), "--out", str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "t" / "main.md").read_text()
    assert "no baseline" in text and "has no evaluation" in text


def test_figures_are_truetype_and_reproducible(world, tmp_path, caplog):
    runner = CliRunner()
    for name in ("a", "b"):
        result = runner.invoke(app, ["figures", "--aggregate", str(world["out"]),
                                     "--out", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert len(files) == 2 * len(FIGURES) and all(p.endswith((".pdf", ".png")) for p in files)
    for name in files:
        data = (tmp_path / "a" / name).read_bytes()
        assert data == (tmp_path / "b" / name).read_bytes(), name
        if name.endswith(".pdf"):
            assert b"/FontFile2" in data and b"/Type3" not in data
    only_train = tmp_path / "agg"
    trains = [str(f) for f in world["files"] if f.name == "train_log.parquet"][:2]
    assert runner.invoke(app, ["aggregate", "--out", str(only_train), *trains]).exit_code == 0
    with caplog.at_level(logging.WARNING):
        result = runner.invoke(app, ["figures", "--aggregate", str(only_train), "--out",
                                     str(tmp_path / "c")])
    assert result.exit_code == 0 and (tmp_path / "c" / "group_size_ablation.pdf").is_file()
    assert "no group-size ablation runs" in caplog.text


# The paper's "Δ vs GSPO" column of Table 1 (DFPO - GSPO, avg@32 points), as the summary prints
# it: a check on the transcription of the method columns, which it does not repeat.
PAPER_DELTA = {("aime25", "Qwen3-32B"): 5.6, ("livecodebench", "Qwen3-32B"): 6.9,
               ("hmmt25", "Qwen3-32B"): 5.6, ("aime25", "Qwen3-Next-80B-A3B-Thinking"): 3.4,
               ("hmmt25", "Qwen3-Next-80B-A3B-Thinking"): 4.3}
SUMMARY = Path(__file__).resolve().parents[1] / ".." / "shared" / "reference" / "paper.md"


def written_reference(tmp_path: Path) -> list[dict]:
    path = tmp_path / "paper" / "reference.parquet"
    assert CliRunner().invoke(app, ["paper-reference", "--out", str(path)]).exit_code == 0
    return read_table(path, PAPER_REFERENCE).to_pylist()


def test_paper_reference_agrees_with_the_papers_own_deltas(tmp_path):
    rows = written_reference(tmp_path)
    table1 = {(r["benchmark"], r["model"], r["method"]): r["value"]
              for r in rows if r["table"] == "1"}
    for (bench, model), delta in PAPER_DELTA.items():
        got = table1[bench, model, "DFPO (Min-Replace)"] - table1[bench, model, "GSPO"]
        assert got == pytest.approx(delta, abs=0.051), (bench, model)
    assert ("aime25", "Qwen3-Next-80B-A3B-Thinking", "GRPO") not in table1  # not reported
    assert all("summary" in r["note"] or r["note"].startswith("[") for r in rows)
    table4 = {r["group_size"]: r["value"] for r in rows if r["table"] == "4"}
    assert sorted(table4) == [2, 16] and table4[16] > table4[2]  # "the gain grows with G"


def test_paper_reference_matches_the_summary_it_cites(tmp_path):
    """Every Table 1 number equals the summary's (../shared/reference/paper.md, section 6)."""
    if not SUMMARY.is_file():
        pytest.skip(f"{SUMMARY} is absent (the project's shared folder)")
    text = SUMMARY.read_text()
    section = text[text.index("### Table 1"):text.index("### Table 2")]
    methods = ["GRPO", "GSPO", "GRPO-fix", "DFPO (Min-Replace)"]
    names = {"AIME25": "aime25", "HMMT25": "hmmt25", "LiveCodeBench v6": "livecodebench"}
    expected = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) < 6 or cells[0] not in names:
            continue
        for method, cell in zip(methods, cells[2:6], strict=True):
            number = re.match(r"\**(\d+\.\d+)\**(?!\?)", cell)
            if number and "?" not in cell:
                expected[names[cells[0]], cells[1], method] = float(number.group(1))
    got = {(r["benchmark"], r["model"], r["method"]): r["value"]
           for r in written_reference(tmp_path) if r["table"] == "1"}
    assert len(expected) >= 14 and got == expected


def test_verdicts_follow_the_preregistered_rules_on_a_synthetic_aggregate(world, tmp_path):
    """dfpo_min is gspo plus extra correct samples and reaches κ earlier: P1 and P2 hold (P1
    only if V, learning, holds); equal asym/drift/entropy curves give P3 fails (not lower) and
    P5/P6 inconclusive (not larger either); under three paired group sizes leave P8 without a slope
    (inconclusive, or V's label when V fails: a failed gate relabels whatever the numbers). With
    the roles swapped, P1 and P2 fail: the rules can fail."""
    from repro.reporting.verdict import FAILS, HOLDS, INCONCLUSIVE, evaluate
    from repro.reporting.verdict_spec import spec_for

    def verdicts(agg):
        return {v.pid: v for v in evaluate(agg, spec_for(agg.study.experiment))
                if v.block == MODEL}

    agg = load_aggregate(world["out"])
    no_learning = spec_for(agg.study.experiment).gates[0].label
    got = verdicts(agg)
    truth = world["truth"]
    hand_v = np.mean([np.mean([truth["grpo", s, b].mean() - truth["init", s, b].mean()
                               for b in BENCHES]) for s in SEEDS]) * 100
    assert got["V"].numbers.startswith(f"Δ = {hand_v:+.1f} [") and "3 seeds" in got["V"].numbers
    assert got["P1"].verdict == (HOLDS if got["V"].verdict == HOLDS else no_learning)
    assert got["P2"].verdict == HOLDS and "ratio < 1 in 3/3 seeds, mean ratio 0.71" in got[
        "P2"].numbers
    assert got["P3"].verdict == FAILS
    assert got["P5"].verdict == got["P6"].verdict == INCONCLUSIVE
    assert got["P8"].verdict == (INCONCLUSIVE if got["V"].verdict == HOLDS else no_learning)
    assert re.fullmatch(r"[0-2] group sizes with paired runs", got["P8"].numbers)

    swapped = tmp_path / "swapped"
    result = CliRunner().invoke(app, ["aggregate", "--out", str(swapped), "--experiment", "test",
                                      "--baseline", "dfpo_min", "--proposed", "gspo",
                                      "--main-algos", "grpo,gspo,dfpo_min",
                                      "--group-algos", "dfpo_min,gspo", "--ablation-algos", "",
                                      *map(str, world["files"])])
    assert result.exit_code == 0, result.output
    flipped = verdicts(load_aggregate(swapped))
    assert flipped["P1"].verdict in (FAILS if got["V"].verdict == HOLDS else no_learning,)
    assert flipped["P2"].verdict == FAILS
    # no ablation selected (config/presets/main-comparison.yaml): P7 names no variant
    assert flipped["P7"].numbers == "no paired runs"
    assert flipped["P7"].verdict == (INCONCLUSIVE if got["V"].verdict == HOLDS else no_learning)
    assert flipped["P7"].claim == "P7: stop-gradient matters (gspo vs a _nosg ablation)"
