"""What docs/results.md ("What reproduces exactly") says of the committed RL start on another CPU
model, held against the committed aggregates: the EPYC's (results/aggregate), the Intel Xeon's run
of config/presets/from-committed-start.yaml (results/rerun-intel-xeon-from-start), and the Xeon's
run of config/presets/main-comparison.yaml under AVX2 kernels
(results/rerun-xeon-avx2-main-comparison)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
from committed import committed

EPYC = committed("results/aggregate")
XEON = committed("results/rerun-intel-xeon-from-start/aggregate")
AVX2 = committed("results/rerun-xeon-avx2-main-comparison/aggregate")
RUN = ["run_algo", "run_model", "run_group_size", "run_seed"]
SAMPLE = [*RUN, "frac", "checkpoint", "seed", "benchmark", "problem_id", "sample_idx"]


def paired(name: str, keys: list[str], other: Path = XEON, main_only: bool = False):
    """The EPYC's rows of aggregate table `name` beside `other`'s (suffixes _epyc, _xeon); with
    `main_only`, the EPYC's rows of the runs `other` has (it ran the main grid alone)."""
    epyc = pq.read_table(EPYC / name).to_pandas()
    xeon = pq.read_table(other / name).to_pandas()
    if main_only:
        runs = set(xeon[RUN].astype(str).itertuples(index=False))  # str: the start's G is null
        epyc = epyc[[key in runs for key in epyc[RUN].astype(str).itertuples(index=False)]]
    both = epyc.merge(xeon, on=keys, suffixes=("_epyc", "_xeon"), validate="one_to_one")
    assert len(both) == len(epyc) == len(xeon), name  # the same rows on both sides
    return both


def test_only_the_no_stop_gradient_runs_draw_other_samples():
    steps = paired("train_curves.parquet", [*RUN, "step"])
    moved = (steps.gen_tokens_epyc != steps.gen_tokens_xeon) | (
        steps.reward_mean_epyc != steps.reward_mean_xeon)
    parted = steps[moved].groupby(["run_algo", "run_seed"]).step.min().to_dict()
    assert parted == {("dfpo_min_nosg", 0): 25, ("dfpo_min_nosg", 1): 36}
    assert steps.run_algo.nunique() > 1 and len(steps.groupby(RUN)) == 33


def test_every_evaluation_verdict_is_equal():
    samples = paired("eval_samples.parquet", SAMPLE)
    assert (samples.correct_epyc == samples.correct_xeon).all()
    differ = samples[samples.completion_epyc != samples.completion_xeon]
    assert len(differ) == 7 and set(differ.run_algo) == {"dfpo_min_nosg"}


def test_every_accuracy_gain_and_verdict_of_the_tables_is_equal(tmp_path):
    """The tables of the two aggregates differ only in their environment line, but for the
    diagnostics that are zero up to rounding and dfpo_min_nosg's (mechanism, ablations, and the
    numbers in P3's text): the verdicts themselves are equal."""
    from repro.reporting.tables import write_tables

    paper = committed("results/paper/reference.parquet")
    for side, aggregate in (("epyc", EPYC), ("xeon", XEON)):
        write_tables(aggregate, tmp_path / side, paper)

    def lines(side: str, name: str) -> list[str]:
        return (tmp_path / side / f"{name}.md").read_text().splitlines()

    for name in ("main", "compute", "budget", "paper"):
        epyc, xeon = lines("epyc", name), lines("xeon", name)
        assert len(epyc) == len(xeon), name
        differ = [(a, b) for a, b in zip(epyc, xeon, strict=True) if a != b]
        assert [a.split(" ")[0] for a, _ in differ] == ["Environment"], (name, differ)
    verdicts = {side: [line.rstrip(" |").rsplit("|", 1)[-1].strip()
                       for line in lines(side, "verdict") if line.startswith("| P")]
                for side in ("epyc", "xeon")}
    assert verdicts["epyc"] == verdicts["xeon"] and verdicts["epyc"], verdicts


def test_the_main_comparison_under_avx2_kernels_draws_the_epycs_samples_everywhere():
    """All 15 main runs, every step, and every evaluated completion (the start's included)."""
    steps = paired("train_curves.parquet", [*RUN, "step"], AVX2, main_only=True)
    assert len(steps.groupby(RUN)) == 15 and steps.run_algo.nunique() == 5
    assert (steps.gen_tokens_epyc == steps.gen_tokens_xeon).all()
    assert (steps.reward_mean_epyc == steps.reward_mean_xeon).all()
    assert (steps.entropy_epyc != steps.entropy_xeon).any()  # other kernels, other floats
    samples = paired("eval_samples.parquet", SAMPLE, AVX2, main_only=True)
    assert len(samples) == 33 * 256 * 4 and set(samples.frac) == {0.0, 0.5, 1.0}
    assert (samples.completion_epyc == samples.completion_xeon).all()
    env = pq.read_schema(AVX2 / "runs.parquet").metadata[b"environment"].decode()
    assert '"cpu_capability": "AVX2"' in env and "Xeon" in env and "EPYC" not in env
