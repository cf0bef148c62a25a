"""`repro compare`: do two aggregates of the same experiment agree on their summary metrics?

CI runs the smoke preset twice, under the CPU's default ATen kernels and under other ones
(`ATEN_CPU_CAPABILITY=avx2`, or `default`, the scalar ones, on an AVX2-only CPU; issue 22): the
kernels round differently, and a pipeline whose numbers moved by more than rounding under them
would not reproduce on another machine. The summary is what the tables report: per run the final
reward and entropy and the tokens it generated, and per evaluation (run, budget fraction,
benchmark) the mean score over problems. Each metric's largest difference is printed, so the log
also measures how far the kernels part.

Tolerances, from a measurement (smoke preset, AMD EPYC, AVX512 vs ATEN_CPU_CAPABILITY=avx2):
the SFT weights parted by at most 5.6e-6, the per-step entropies by at most 7.2e-7 (5 of 28
steps), and not one sampled token differed (78 evaluation samples, every rollout; 0 of 2,048
sequences, 41,835 tokens, sampled with one seed from the two SFT starts). So the kernels move
the numbers by rounding only, and at smoke size a sampled token that differs means the runs
parted: the discrete metrics (rewards, scores, generated tokens) must be equal, and the entropy,
a smooth function of the weights, within 1e-4 nats: over 100x the rounding measured, while one
changed sample moves a step's mean entropy by about 1/(tokens per step), 1e-2 at smoke size.
(At smoke size every reward and score is 0, so the entropies and token counts carry the check.)
The scalar kernels against AVX512 (2026-12-02, same preset): entropy 4.8e-7, the rest equal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pyarrow.parquet as pq

from repro.reporting.aggregate import CURVES_OUT, PROBLEMS_OUT, RUNS_OUT, SAMPLES_OUT
from repro.results import (
    AGG_EVAL_PROBLEMS,
    AGG_EVAL_SAMPLES,
    AGG_RUNS,
    AGG_TRAIN_CURVES,
    read_table,
)
from repro.results.manifest import check_inputs
from repro.results.schemas import TRAIN_LOG_TIMING

RUN_KEYS = ("run_model", "run_algo", "run_group_size", "run_seed")
EVAL_KEYS = (*RUN_KEYS, "frac", "benchmark")
RUN_METRICS = ("reward_final", "entropy_final", "gen_tokens_cum")
Summary = dict[str, dict[tuple, float]]  # metric -> key -> value
# Largest |difference| accepted per metric (the module docstring says why these values).
TOLERANCE = {"reward_final": 0.0, "entropy_final": 1e-4, "gen_tokens_cum": 0.0, "eval_avg": 0.0}
# `--exact`: every aggregate table, every column but the wall-clock seconds (runs' time_total is
# the sum of the curves' timings), which differ between any two runs.
TABLES = {CURVES_OUT: AGG_TRAIN_CURVES, RUNS_OUT: AGG_RUNS, PROBLEMS_OUT: AGG_EVAL_PROBLEMS,
          SAMPLES_OUT: AGG_EVAL_SAMPLES}
WALL_CLOCK = (*TRAIN_LOG_TIMING, "time_total")


def summary(folder: Path) -> Summary:
    """The summary metrics of the aggregate in `folder` (verified against its manifest)."""
    paths = [folder / RUNS_OUT, folder / PROBLEMS_OUT]
    check_inputs(paths)
    runs = read_table(paths[0], AGG_RUNS)
    keys = list(zip(*(runs[k].to_pylist() for k in RUN_KEYS), strict=True))
    out: Summary = {m: dict(zip(keys, runs[m].to_pylist(), strict=True)) for m in RUN_METRICS}
    problems = read_table(paths[1], AGG_EVAL_PROBLEMS)
    means = problems.group_by(list(EVAL_KEYS), use_threads=False).aggregate([("avg", "mean")])
    out["eval_avg"] = {tuple(row[k] for k in EVAL_KEYS): row["avg_mean"]
                       for row in means.to_pylist()}
    return out


def cpus(folder: Path) -> list[str]:
    """The CPUs the aggregate's jobs recorded, as "MODEL (ATen kernels)", sorted."""
    meta = pq.read_schema(folder / RUNS_OUT).metadata or {}
    entries = json.loads(meta.get(b"environment", b"[]"))
    return sorted({_cpu(e["environment"]) for e in entries})


def _cpu(environment: dict | None) -> str:
    if not environment:
        return "unrecorded"
    torch = environment.get("torch")  # None in a process that never imported torch
    kernels = torch["cpu_capability"] if torch else "kernels unrecorded"
    return f"{environment['cpu_model']} ({kernels})"


def cpu_note(first: list[str], second: list[str]) -> str:
    """What the two aggregates' CPUs say about how far they may part. The ATen kernel set
    alone does not fix the floats: the default's stage 1 read its gate at 0.445 on an AMD EPYC
    and at 0.375 on an Intel Xeon, both AVX512, same packages (2026-12-02, docs/results.md).
    torch's BLAS, MKL, picks its code path by CPU (`MKL_VERBOSE=1` names it: "AVX-512 with AMX"
    on that Xeon), which is our reading of why; so only the same model and kernels make a rerun."""
    if first == second:
        return "same CPU model and kernels: a rerun, every value should match (--exact)"
    kernels = [{c.rsplit(" (", 1)[-1] for c in side} for side in (first, second)]
    if kernels[0] == kernels[1]:
        return ("other CPU models on the same ATen kernels: the BLAS code paths may differ, so "
                "the runs may part like runs on other kernels")
    return "other CPU kernels: the runs part by rounding, and over long runs by more"


def compare(a: Summary, b: Summary, tolerance: Mapping[str, float]) -> tuple[dict[str, float],
                                                                              list[str]]:
    """(largest |a - b| per metric, one line per value outside `tolerance` or key in one only)."""
    largest, problems = {}, []
    for metric, values in a.items():
        other = b[metric]
        for key in sorted(set(values) ^ set(other), key=str):
            problems.append(f"{metric} {key}: in only one of the two aggregates")
        diffs = {key: abs(values[key] - other[key]) for key in set(values) & set(other)}
        largest[metric] = max(diffs.values(), default=0.0)
        problems += [f"{metric} {key}: {values[key]:.6g} vs {other[key]:.6g} "
                     f"(|diff| {d:.3g} > {tolerance[metric]:g})"
                     for key, d in sorted(diffs.items(), key=lambda kv: str(kv[0]))
                     if not d <= tolerance[metric]]  # NaN on one side fails too
    return largest, problems


def exact_differences(first: Path, second: Path) -> list[str]:
    """One line per column of an aggregate table whose values differ (NaN equals NaN), row for
    row: the aggregate writes its rows in key order, so a rerun with the same packages and CPU
    kernels must give none (docs/results.md, "What reproduces exactly")."""
    lines = []
    for name, schema in TABLES.items():
        paths = [first / name, second / name]
        check_inputs(paths)
        a, b = (read_table(path, schema) for path in paths)
        if a.num_rows != b.num_rows:
            lines.append(f"{name}: {a.num_rows} rows vs {b.num_rows}")
            continue
        for column in a.column_names:
            if column in WALL_CLOCK:
                continue
            rows = sum(not _same(x, y) for x, y in zip(folder_free(column, a[column].to_pylist()),
                                                       folder_free(column, b[column].to_pylist()),
                                                       strict=True))
            if rows:
                lines.append(f"{name}: {column} differs in {rows} of {a.num_rows} rows")
    return lines


def folder_free(column: str, values: list) -> list:
    """A run's `model` is its policy's path, which starts with the results folder (config
    `results`): cut to the part from `runs/` on, so a rerun of one preset into another folder
    compares equal (shared start models, `results/models/...`, stay whole)."""
    if column != "model":
        return values
    return [f"runs/{v.split('/runs/', 1)[1]}" if isinstance(v, str) and "/runs/" in v else v
            for v in values]


def _same(x: object, y: object) -> bool:
    return x == y or (isinstance(x, float) and isinstance(y, float) and x != x and y != y)
