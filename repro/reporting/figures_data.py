"""What the figures draw, apart from drawing it: per-run curves on a common x, pooled over every
model and seed of an algorithm (a run is a unit: model/seed), with the mean and its 95%
bootstrap band over runs; per-run summaries by algorithm; held-out accuracy over the budget
and each arm's paired difference from its reference, per panel (a source of study 3, or the
main arms and the ablations), through the verdict engine's units and paired test. Every
interval comes from repro.evaluation.stats.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from repro.diagnostics.curves import moving_average
from repro.evaluation.stats import unit_band
from repro.reporting.load import Aggregate, SeedScores
from repro.reporting.scores import estimate
from repro.reporting.study import INIT_FRAC
from repro.reporting.tables_train import nanmean
from repro.reporting.verdict import unit_clusters
from repro.reporting.verdict_metrics import Part, Scope, final_scores, pooled_scope, unit_scores
from repro.reporting.verdict_rules import paired
from repro.reporting.verdict_spec import START, Spec, Subset, spec_for

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


def pooled_runs(agg: Aggregate, algo: str, group_size: int | None, frac: float) -> SeedScores:
    """"model/seed" -> "benchmark/problem" -> avg, over every model and benchmark."""
    return unit_scores(agg, pooled_scope(agg), algo, group_size, frac)


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


@dataclass(frozen=True)
class BudgetPanel:
    """One panel of the budget figures: some arms (as the predictions file names them, without
    a subset's label) against a reference arm, over the units of `scope`."""

    title: str
    reference: str
    arms: tuple[str, ...]
    scope: Scope


@dataclass(frozen=True)
class Point:
    """One arm at one budget fraction: a mean and its 95% interval (percent or points)."""

    frac: float
    mean: float
    lo: float
    hi: float


def registered(agg: Aggregate, spec: Spec, scope: Scope) -> Scope:
    """`scope` with the units' clusters where the predictions file registers the nested
    estimator (as the verdict engine reads it), so a figure's intervals are the verdicts'."""
    if spec.estimator == "nested" and spec.cluster is not None:
        return replace(scope, clusters=unit_clusters(agg, spec, scope))
    return scope


def budget_panels(agg: Aggregate) -> list[BudgetPanel]:
    """A panel per subset of the study's predictions file (study 3: per source), every arm of
    the subset against the baseline; without subsets, the main arms against the baseline and
    the ablations against the proposed method (the references of the verdict rows). Units and
    intervals as the verdict engine reads them (registered)."""
    s, spec = agg.study, spec_for(agg.study.experiment)
    labels = [*s.main_algos, *s.ablation_algos]
    if not spec.subsets:
        models = tuple(agg.models())
        scope = registered(agg, spec, Scope((Part(models),),
                                            by_seed=spec.unit == "seed" and len(models) == 1))
        panels = [BudgetPanel(f"main comparison: A - {s.baseline}", s.baseline,
                              tuple(a for a in s.main_algos if a != s.baseline), scope)]
        if s.ablation_algos:
            panels.append(BudgetPanel(f"ablations: A - {s.proposed}", s.proposed,
                                      s.ablation_algos, scope))
        return panels
    reference = next((a for sub in spec.subsets if (a := subset_arm(sub, s.baseline))), s.baseline)
    out = []
    for sub in spec.subsets:
        arms = tuple(a for label in labels if (a := subset_arm(sub, label)) and a != reference)
        models = tuple(m for m in agg.models() if sub.holds_model(m))
        out.append(BudgetPanel(f"{spec.subset_column} {sub.name}: A - {reference}", reference,
                               arms, registered(agg, spec, Scope((Part(models, sub.label),),
                                                                 by_seed=False))))
    return out


def arm_order(agg: Aggregate) -> list[str]:
    """The study's arms in its order (main, then ablations), as the budget panels name them
    (without a subset's label): one look per arm across a study's figures."""
    s, spec = agg.study, spec_for(agg.study.experiment)
    labels = [*s.main_algos, *s.ablation_algos]
    if spec.subsets:
        labels = [a for label in labels for sub in spec.subsets if (a := subset_arm(sub, label))]
    return list(dict.fromkeys(labels))


def subset_arm(sub: Subset, label: str) -> str | None:
    """The arm whose run label in `sub` is `label`, or None."""
    head, _, tail = sub.label.partition("{arm}")
    if label.startswith(head) and label.endswith(tail) and len(label) > len(head) + len(tail):
        return label[len(head):len(label) - len(tail)]
    return None


def budget_fractions(agg: Aggregate) -> list[float]:
    """The budget fractions RL checkpoints were evaluated at (main G)."""
    g = agg.study.main_group_size
    return sorted({key[3] for key in agg.scores if key[2] == g and key[3] > INIT_FRAC})


def differences(agg: Aggregate, panel: BudgetPanel, arm: str) -> list[Point]:
    """arm - reference in points at each fraction both were evaluated at: the verdict engine's
    paired test (verdict_rules.paired), so the interval is the one the verdicts use."""
    g, out = agg.study.main_group_size, []
    for f in budget_fractions(agg):
        stats = paired(unit_scores(agg, panel.scope, arm, g, f),
                       unit_scores(agg, panel.scope, panel.reference, g, f), panel.scope.clusters)
        if stats is not None:
            out.append(Point(f, stats["diff"], stats["lo"], stats["hi"]))
    return out


def levels(agg: Aggregate, panel: BudgetPanel, arm: str) -> list[Point]:
    """The arm's held-out avg@k (%) at each fraction it was evaluated at; the start (START) at
    0. Mean over units and problems, 95% bootstrap over both (scores.estimate)."""
    if arm == START:
        found = [(INIT_FRAC, estimate(final_scores(agg, panel.scope, START)))]
    else:
        g = agg.study.main_group_size
        found = [(f, estimate(unit_scores(agg, panel.scope, arm, g, f)))
                 for f in budget_fractions(agg)]
    return [Point(f, e.mean, e.lo, e.hi) for f, e in found if e is not None]
