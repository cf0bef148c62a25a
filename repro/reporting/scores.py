"""avg@k estimates and paired comparisons over seeds, from per-seed problem scores.

Every Δ is paired by seed: runs (and the SFT start) of one seed are evaluated with that seed as
the sampling seed, so A and B share their random numbers and D = A - B per (seed, problem)
carries only what differs; Δ is the mean of the per-seed paired differences.

Thin adapters from the aggregate's {seed: {problem: avg}} to repro.evaluation.stats (which
owns every bootstrap): they align problems and seeds, and report in percent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from repro.evaluation.stats import bootstrap_ci, paired_seed_bootstrap
from repro.reporting.load import SeedScores


@dataclass(frozen=True)
class Estimate:
    """Mean avg@k over seeds and problems with its 95% bootstrap interval, in percent."""

    mean: float
    lo: float
    hi: float
    seeds: int
    problems: int


@dataclass(frozen=True)
class Comparison:
    """Paired difference A - B in percentage points, its 95% interval and two-sided p."""

    diff: float
    lo: float
    hi: float
    p_value: float
    seeds: int
    problems: int


def score_matrix(scores: SeedScores) -> tuple[np.ndarray, list[str]]:
    """[seeds, problems] of avg over the problems every seed has (seeds in sorted order)."""
    if not scores:
        return np.empty((0, 0)), []
    common = sorted(set.intersection(*(set(by_problem) for by_problem in scores.values())))
    matrix = np.array([[scores[seed][p] for p in common] for seed in sorted(scores)], dtype=float)
    return matrix.reshape(len(scores), len(common)), common


def estimate(scores: SeedScores) -> Estimate | None:
    """bootstrap_ci over the [seeds, problems] matrix; None without data."""
    matrix, problems = score_matrix(scores)
    if not problems:
        return None
    mean, lo, hi = bootstrap_ci(matrix)
    return Estimate(100 * mean, 100 * lo, 100 * hi, matrix.shape[0], len(problems))


def compare(a: SeedScores, b: SeedScores,
            clusters: Mapping[Any, Any] | None = None) -> Comparison | None:
    """A - B as the mean of per-seed paired differences (same seed, same problems, same
    sampling seed), with a bootstrap over seeds and problems; only the seeds both have count.
    `clusters` (seed -> the cluster it nests in, e.g. its start): the nested bootstrap of
    repro.evaluation.stats instead of the flat one. None when they share no seed or problem."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return None
    common = sorted(set.intersection(*(set(a[s]) & set(b[s]) for s in seeds)))
    if not common:
        return None
    x = np.array([[a[s][p] for p in common] for s in seeds], dtype=float)
    y = np.array([[b[s][p] for p in common] for s in seeds], dtype=float)
    test = paired_seed_bootstrap(
        x, y, clusters=None if clusters is None else [clusters[s] for s in seeds])
    return Comparison(100 * test["diff"], 100 * test["lo"], 100 * test["hi"], test["p_value"],
                      len(seeds), len(common))


def pool(by_benchmark: Mapping[str, SeedScores]) -> SeedScores:
    """One score set over all benchmarks' problems (ids become "benchmark/problem_id")."""
    pooled: SeedScores = {}
    for bench, scores in sorted(by_benchmark.items()):
        for seed, by_problem in scores.items():
            pooled.setdefault(seed, {}).update({f"{bench}/{p}": v for p, v in by_problem.items()})
    return pooled
