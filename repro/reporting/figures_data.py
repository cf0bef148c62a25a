"""What the figures draw, apart from drawing it: per-run curves on a common x, pooled over every
model and seed of an algorithm (a run is a unit: model/seed), with the mean and its 95%
bootstrap band over runs; held-out accuracy over the budget; per-run summaries by algorithm.
Every interval comes from repro.evaluation.stats.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from repro.diagnostics.curves import moving_average
from repro.evaluation.stats import unit_band
from repro.reporting.load import Aggregate, SeedScores
from repro.reporting.scores import Estimate, estimate
from repro.reporting.study import INIT_ALGO, INIT_FRAC
from repro.reporting.tables_train import nanmean
from repro.reporting.verdict_metrics import pooled_scope, unit_scores

GRID_POINTS = 100  # common x grid of curves against cumulative tokens


@dataclass(frozen=True)
class Band:
    """One algorithm's runs on a common x, their mean and its 95% bootstrap band over runs."""

    algo: str
    x: np.ndarray
    runs: np.ndarray  # [runs, points]
    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


def seed_matrix(curves: Mapping[object, pa.Table], column: str, *, x: str = "step",
                window: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """x [points] and `column` [runs, points] (trailing mean over `window` steps) on a common x:
    the steps every run has, or for a cumulative x (gen_tokens_cum) a grid over the range every
    run covers, linearly interpolated."""
    series = []
    for curve in curves.values():
        y = curve[column].to_numpy(zero_copy_only=False).astype(float)
        series.append((curve[x].to_numpy().astype(float)[window - 1:],
                       y if window == 1 else moving_average(y, window)))
    if not series or min(xs.size for xs, _ in series) == 0:
        return np.empty(0), np.empty((0, 0))
    if x == "step":
        common = functools.reduce(np.intersect1d, (xs for xs, _ in series))
        return common, np.array([y[np.isin(xs, common)] for xs, y in series])
    lo, hi = max(xs[0] for xs, _ in series), min(xs[-1] for xs, _ in series)
    if lo > hi:
        return np.empty(0), np.empty((0, 0))
    grid = np.linspace(lo, hi, GRID_POINTS)
    return grid, np.array([np.interp(grid, xs, y) for xs, y in series])


def run_curves(agg: Aggregate, algo: str) -> dict[str, pa.Table]:
    """"model/seed" -> train curve of every run of `algo` at the main group size."""
    g = agg.study.main_group_size
    return {f"{m}/{s}": c for m in agg.models() for s, c in agg.seed_curves(m, algo, g).items()}


def bands(agg: Aggregate, algos: Sequence[str], column: str, *, x: str = "step",
          window: int = 1) -> list[Band]:
    """A band per algorithm that logged `column` on at least one finite step."""
    out = []
    for algo in algos:
        curves = run_curves(agg, algo)
        if not curves or column not in next(iter(curves.values())).column_names:
            continue
        xs, ys = seed_matrix(curves, column, x=x, window=window)
        if xs.size and np.isfinite(ys).any():
            out.append(Band(algo, xs, ys, *unit_band(ys)))
    return out


@dataclass(frozen=True)
class Budget:
    """Held-out avg@k (%) of one algorithm at each budget fraction (the start at 0): the mean
    over runs and problems with its 95% bootstrap interval, and each run's mean."""

    algo: str
    fracs: list[float]
    estimates: list[Estimate]
    runs: np.ndarray  # [runs, fracs] of the runs evaluated at every fraction; NaN elsewhere


def pooled_runs(agg: Aggregate, algo: str, group_size: int | None, frac: float) -> SeedScores:
    """"model/seed" -> "benchmark/problem" -> avg, over every model and benchmark."""
    return unit_scores(agg, pooled_scope(agg), algo, group_size, frac)


def budget_curves(agg: Aggregate, algos: Sequence[str]) -> tuple[Budget | None, list[Budget]]:
    """The start and each algorithm over the fractions it was evaluated at (main G)."""
    g = agg.study.main_group_size

    def of(algo: str, group_size: int | None, fracs: list[float]) -> Budget | None:
        scores = {f: pooled_runs(agg, algo, group_size, f) for f in fracs}
        scores = {f: s for f, s in scores.items() if s}
        if not scores:
            return None
        runs = sorted(set().union(*scores.values()))
        means = np.array([[np.mean(list(scores[f][r].values())) if r in scores[f] else np.nan
                           for f in scores] for r in runs])
        return Budget(algo, list(scores), [estimate(s) for s in scores.values()], 100 * means)

    start = of(INIT_ALGO, None, [INIT_FRAC])
    fracs = sorted({key[3] for key in agg.scores if key[2] == g and key[3] > INIT_FRAC})
    return start, [b for a in algos if (b := of(a, g, fracs)) is not None]


@dataclass(frozen=True)
class PerRun:
    """One algorithm's per-run mean over steps of a train-log column, and the mean over runs
    with its 95% bootstrap interval."""

    algo: str
    values: np.ndarray
    mean: float
    lo: float
    hi: float


def per_run(agg: Aggregate, algos: Sequence[str], column: str) -> list[PerRun]:
    out = []
    for algo in algos:
        values = np.array([nanmean(c[column].to_numpy(zero_copy_only=False).astype(float))
                           for c in run_curves(agg, algo).values() if column in c.column_names])
        values = values[np.isfinite(values)]
        if values.size:
            mean, lo, hi = (float(v[0]) for v in unit_band(values[:, None]))
            out.append(PerRun(algo, values, mean, lo, hi))
    return out
