"""What a verdict compares, read from the aggregate per unit: problem scores (final accuracy,
AUC over the budget), tokens to κ, and summaries of train-log columns.

A `Scope` is the set of runs one block of a verdict table pools: some models, each arm under
a run label, with a key per unit: the bare seed (study 1: one model, the replicate is the RL
seed) or "model/seed" (study 2: a (start, RL seed) pair), prefixed by the subset when blocks
are pooled over subsets ("source/model/seed").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from repro.reporting.load import Aggregate, SeedScores
from repro.reporting.scores import pool
from repro.reporting.study import INIT_ALGO, INIT_FRAC
from repro.reporting.tables_budget import auc_scores, common_fractions, run_fractions
from repro.reporting.tables_train import nanmean, threshold_hits
from repro.reporting.verdict_spec import START, metric_parts

Unit = int | str
UnitScores = dict[Unit, dict[str, float]]  # unit -> problem -> score


@dataclass(frozen=True)
class Part:
    """Runs of some models, an arm's run label given by `label` ("{arm}", "{arm}-stale")."""

    models: tuple[str, ...]
    label: str = "{arm}"
    prefix: str = ""  # of the unit keys: "" or "SUBSET/"


@dataclass(frozen=True)
class Scope:
    parts: tuple[Part, ...]
    by_seed: bool  # unit key: the bare seed (one model) or PREFIX + "model/seed"
    # unit -> the cluster (start) it nests in, for the nested bootstrap; None: flat
    clusters: Mapping[Unit, str] | None = field(default=None, compare=False)

    def key(self, part: Part, model: str, seed: int) -> Unit:
        return seed if self.by_seed else f"{part.prefix}{model}/{seed}"

    def runs(self, arm: str) -> list[tuple[Part, str, str]]:
        """(part, model, run label) of `arm` in every part."""
        return [(p, m, p.label.format(arm=arm)) for p in self.parts for m in p.models]


def pooled_scope(agg: Aggregate) -> Scope:
    """Every model, units "model/seed": the mechanism study's units."""
    return Scope((Part(tuple(agg.models())),), by_seed=False)


def unit_scores(agg: Aggregate, scope: Scope, algo: str, group_size: int | None,
                frac: float) -> UnitScores:
    """unit -> "benchmark/problem" -> avg@k of `algo` at (G, frac), pooled over benchmarks."""
    out: UnitScores = {}
    for part, model, label in scope.runs(algo):
        scores = pool({b: agg.seed_scores(model, label, b, group_size, frac)
                       for b in agg.benchmarks()})
        out |= {scope.key(part, model, seed): v for seed, v in scores.items()}
    return out


def final_scores(agg: Aggregate, scope: Scope, arm: str, group_size: int | None = None
                 ) -> UnitScores:
    """unit -> problem -> avg@k at the final fraction, pooled over benchmarks (the start: frac
    0, no group size)."""
    if arm == START:  # one start per model, whatever label a subset gives its arms
        return unit_scores(agg, Scope(tuple(Part(p.models, prefix=p.prefix) for p in scope.parts),
                                      scope.by_seed), INIT_ALGO, None, INIT_FRAC)
    return unit_scores(agg, scope, arm, group_size or agg.study.main_group_size,
                       agg.study.final_frac)


def auc_pair(agg: Aggregate, scope: Scope, a: str, b: str) -> tuple[UnitScores, UnitScores]:
    """unit -> problem -> AUC for A and B, over the fractions both were evaluated at."""
    g = agg.study.main_group_size
    out: tuple[UnitScores, UnitScores] = ({}, {})
    for (part, model, la), (_, _, lb) in zip(scope.runs(a), scope.runs(b), strict=True):
        runs = {x: {bench: run_fractions(agg, model, x, bench, g) for bench in agg.benchmarks()}
                for x in (la, lb)}
        for side, (x, y) in zip(out, ((la, lb), (lb, la)), strict=True):
            by_bench = {bench: auc_scores(runs[x][bench], common_fractions(
                {x: runs[x][bench], y: runs[y][bench]})) for bench in agg.benchmarks()}
            side |= {scope.key(part, model, seed): v for seed, v in pool(by_bench).items()}
    return out


def auc_units(agg: Aggregate, a: str, b: str) -> tuple[SeedScores, SeedScores]:
    """The mechanism study's AUC pair: every model, units "model/seed"."""
    return auc_pair(agg, pooled_scope(agg), a, b)


def score_pair(agg: Aggregate, scope: Scope, metric: str, a: str, b: str,
               group_size: int | None = None) -> tuple[UnitScores, UnitScores]:
    if metric == "auc":
        return auc_pair(agg, scope, a, b)
    return final_scores(agg, scope, a, group_size), final_scores(agg, scope, b, group_size)


def curves(agg: Aggregate, scope: Scope, arm: str, column: str) -> dict[Unit, np.ndarray]:
    """unit -> the run's train-log column, by step."""
    g = agg.study.main_group_size
    return {scope.key(part, model, seed):
            curve[column].to_numpy(zero_copy_only=False).astype(float)
            for part, model, label in scope.runs(arm)
            for seed, curve in agg.seed_curves(model, label, g).items()}


def _final(steps: int) -> Callable[[np.ndarray], float]:
    """The mean of the last `steps` logged values, NaN steps left out (NaN if none)."""
    return lambda x: nanmean(x[-steps:])


def unit_values(agg: Aggregate, scope: Scope, arm: str, expr: str,
                final_steps: int) -> dict[Unit, float]:
    """unit -> one number: tokens_to_threshold, or mean/final/drop(COLUMN), or abs(...)."""
    head, inner = metric_parts(expr)
    if head == "abs":
        return {u: abs(v) for u, v in unit_values(agg, scope, arm, inner, final_steps).items()}
    if head == "tokens_to_threshold":
        return tokens_to_threshold(agg, scope, arm)
    final = _final(final_steps)
    summary = {"mean": nanmean, "final": final,
               "drop": lambda x: float(x[0]) - final(x)}[head]
    return {u: summary(x) for u, x in curves(agg, scope, arm, inner).items()}


def tokens_to_threshold(agg: Aggregate, scope: Scope, arm: str) -> dict[Unit, float]:
    """Generated tokens until the smoothed train reward first reaches κ; a run that never
    reaches it counts as its budget plus one step's mean tokens."""
    g, out = agg.study.main_group_size, {}
    for part, model, label in scope.runs(arm):
        hits = threshold_hits(agg, model, label).hits
        for seed, curve in agg.seed_curves(model, label, g).items():
            tokens = curve["gen_tokens_cum"].to_numpy()
            step = tokens[-1] / len(tokens)
            out[scope.key(part, model, seed)] = (hits[seed] if hits[seed] is not None
                                                 else float(tokens[-1] + step))
    return out


def log_ratio(a: float, b: float) -> float:
    return math.log(a / b) if a > 0 and b > 0 else math.nan
