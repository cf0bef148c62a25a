"""The tests a predictions file can name (repro.reporting.verdict_spec.STATISTICS): each turns
per-unit data into the statistics its holds/fails conditions read and its numbers print, or
None when there is nothing to compare. Every interval comes from repro.evaluation.stats.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from repro.evaluation.stats import seed_problem_replicates, unit_bootstrap
from repro.reporting.scores import compare
from repro.reporting.verdict_metrics import Unit, UnitScores, log_ratio

Stats = dict[str, float]
Clusters = Mapping[Unit, str] | None  # unit -> the cluster it nests in; None: flat bootstrap


def paired(a: UnitScores, b: UnitScores, clusters: Clusters = None) -> Stats | None:
    """A - B in points: the mean of per-unit paired differences over the units and problems
    both have, 95% bootstrap over units and problems (scores.compare; nested in `clusters`,
    unit -> cluster, when given), two-sided p."""
    c = compare(a, b, clusters)
    if c is None:
        return None
    return {"diff": c.diff, "lo": c.lo, "hi": c.hi, "p": c.p_value, "units": c.seeds,
            "problems": c.problems}


def _pairs(a: Mapping[Unit, float], b: Mapping[Unit, float]) -> list[tuple[float, float]]:
    """(A, B) of the units both have, in unit order, where both are finite."""
    pairs = [(a[u], b[u]) for u in sorted(set(a) & set(b))]
    return [(x, y) for x, y in pairs if np.isfinite(x) and np.isfinite(y)]


def sign(a: Mapping[Unit, float], b: Mapping[Unit, float]) -> Stats | None:
    """Per-unit "A lower than B": counts, shares and the means of both."""
    pairs = _pairs(a, b)
    if not pairs:
        return None
    n = len(pairs)
    lower, higher = sum(x < y for x, y in pairs), sum(x > y for x, y in pairs)
    mean_a, mean_b = (float(np.mean(v)) for v in zip(*pairs, strict=True))
    return {"units": n, "lower": lower, "higher": higher, "lower_share": lower / n,
            "not_lower_share": (n - lower) / n, "higher_share": higher / n,
            "mean_a": mean_a, "mean_b": mean_b, "mean_diff": mean_a - mean_b,
            "mean_ratio": mean_a / mean_b if mean_b else math.nan}


def ratio(a: Mapping[Unit, float], b: Mapping[Unit, float]) -> Stats | None:
    """Per-unit ratio A / B: how many are below 1 and their mean."""
    ratios = [a[u] / b[u] for u in sorted(set(a) & set(b))]
    if not ratios:
        return None
    n, below = len(ratios), sum(r < 1 for r in ratios)
    return {"units": n, "below": below, "below_share": below / n,
            "not_below_share": (n - below) / n, "mean_ratio": float(np.mean(ratios))}


def unit_mean(a: Mapping[Unit, float], b: Mapping[Unit, float], difference: str,
              clusters: Clusters = None) -> Stats | None:
    """The mean over units of D_u (A - B, or log(A / B)), 95% bootstrap over units (nested in
    `clusters` when given)."""
    diff = log_ratio if difference == "log_ratio" else (lambda x, y: x - y)
    found = {u: d for u in sorted(set(a) & set(b)) if math.isfinite(d := diff(a[u], b[u]))}
    if not found:
        return None
    values = list(found.values())
    mean, lo, hi = unit_bootstrap(
        values, clusters=None if clusters is None else [clusters[u] for u in found])
    return {"mean": mean, "lo": lo, "hi": hi, "units": len(values)}


def level(steps: Mapping[Unit, np.ndarray]) -> Stats | None:
    """The mean of every finite step of every unit."""
    values = [v for x in steps.values() for v in x if np.isfinite(v)]
    return {"value": float(np.mean(values)), "count": len(values)} if values else None


def differ(a: Mapping[Unit, np.ndarray], others: Sequence[Mapping[Unit, np.ndarray]]
           ) -> tuple[Stats, list[Stats]] | None:
    """Per other arm, the share of steps on which A's value differs from its, per unit of A
    that both ran for the same number of steps; overall: the smallest share, and whether every
    other arm has every unit of A."""
    if not a:
        return None
    per_other = []
    for b in others:
        shares = {u: float(np.mean(x != b[u][:len(x)])) for u, x in a.items()
                  if u in b and len(b[u]) == len(x)}
        per_other.append({"min_share": min(shares.values(), default=math.nan),
                          "units": len(shares), "complete": set(shares) == set(a)})
    overall = {"min_share": min(s["min_share"] for s in per_other),
               "every_unit": float(all(s["complete"] for s in per_other))}
    return overall, per_other


def slope(by_size: Mapping[int, tuple[UnitScores, UnitScores]], min_sizes: int,
          clusters: Clusters = None) -> tuple[Stats | None, int]:
    """Least-squares slope of Δ_G = mean(A - B) on log2 G, in points per doubling, with a joint
    bootstrap: every G on the same units and problems, resampled together. Also returns how
    many group sizes have runs of both arms."""
    runs = {g: ab for g, ab in sorted(by_size.items()) if ab[0] and ab[1]}
    units = (sorted(set.intersection(*(set(a) & set(b) for a, b in runs.values())))
             if runs else [])
    if len(runs) < min_sizes or not units:
        return None, len(runs)
    common = sorted(set.intersection(*(set(a[u]) & set(b[u]) for a, b in runs.values()
                                       for u in units)))
    sizes = sorted(runs)
    diffs = [[[runs[g][0][u][p] - runs[g][1][u][p] for p in common] for u in units]
             for g in sizes]
    x = np.log2(sizes)
    means, reps = seed_problem_replicates(
        diffs, clusters=None if clusters is None else [clusters[u] for u in units])
    centred = (x - x.mean()) / ((x - x.mean()) ** 2).sum()
    lo, hi = 100 * np.quantile(reps @ centred, [.025, .975])
    per_size = ", ".join(f"G{g}: {100 * m:+.1f}" for g, m in zip(sizes, means, strict=True))
    return {"slope": 100 * float(means @ centred), "lo": float(lo), "hi": float(hi),
            "per_size": per_size, "sizes": len(sizes)}, len(runs)
