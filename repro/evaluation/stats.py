"""Benchmark statistics: pass@k, avg@k, bootstrap intervals and paired comparisons.

All bootstraps are percentile bootstraps from a fixed numpy seed, so a rerun on the same data
reports the same interval. Resampling is drawn as multinomial counts per replicate ("problem
i appears m times") instead of index arrays, which keeps 10,000 replicates over a few hundred
problems to a few MB and one matrix product.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): 1 - C(n-c, k) / C(n, k), as a stable product.

    The product form 1 - prod_{i=n-c+1}^{n} (1 - k/i) avoids the huge binomials of large n.
    """
    if k < 1:
        raise ValueError(f"pass_at_k: k must be >= 1, got k={k}")
    if n < k:
        raise ValueError(f"pass_at_k: n must be >= k (n samples, k drawn), got n={n}, k={k}")
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: c must be in [0, n], got c={c}, n={n}")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def avg_at_k(correct: Sequence[Any]) -> float:
    """avg@k: mean over problems of the fraction of correct samples.

    Each entry is either a `(c, n)` tuple or a per-sample correctness array of that problem
    (bools or 0/1; problems may have different sample counts).
    """
    if len(correct) == 0:
        raise ValueError("avg_at_k: correct must hold at least one problem")
    fractions = []
    for i, entry in enumerate(correct):
        if isinstance(entry, tuple):
            c, n = entry
            if n < 1 or not 0 <= c <= n:
                raise ValueError(f"avg_at_k: problem {i}: need 0 <= c <= n, n >= 1; got {entry}")
            fractions.append(c / n)
        else:
            samples = np.asarray(entry, dtype=np.float64)
            if samples.ndim != 1 or samples.size == 0:
                raise ValueError(f"avg_at_k: problem {i}: need a non-empty 1-D sample array")
            fractions.append(float(samples.mean()))
    return float(np.mean(fractions))


def _counts(rng: np.random.Generator, size: int, n_boot: int) -> np.ndarray:
    """[n_boot, size] multiplicities of `size` draws with replacement from `size` items."""
    return rng.multinomial(size, np.full(size, 1.0 / size), size=n_boot)


@functools.lru_cache(maxsize=4)
def _first_counts(seed: int, size: int, n_boot: int) -> tuple[np.ndarray, dict[str, Any]]:
    rng = np.random.default_rng(seed)
    counts = _counts(rng, size, n_boot)
    counts.flags.writeable = False  # shared by every caller of the cache
    return counts, rng.bit_generator.state


def _resample(seed: int, size: int, n_boot: int) -> tuple[np.ndarray, np.random.Generator]:
    """`_counts` drawn first from `default_rng(seed)`, and that generator just after the draw.

    Memoised: a table renders hundreds of intervals over the same problems with the same seed,
    and each multinomial draw of 10,000 x 256 costs ~80 ms, most of `repro tables`' time. The
    counts and every later draw are exactly those of an uncached `default_rng(seed)`.
    """
    counts, state = _first_counts(int(seed), size, n_boot)
    rng = np.random.default_rng()
    rng.bit_generator.state = state
    return counts, rng


def _as_matrix(values: Any, name: str, ndims: tuple[int, ...]) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim not in ndims or array.size == 0:
        raise ValueError(f"{name}: need a non-empty array with ndim in {ndims}, got {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name}: values must be finite (no NaN/inf)")
    return array


def _check_boot(n_boot: int, alpha: float) -> None:
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got n_boot={n_boot}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got alpha={alpha}")


Clusters = Sequence[Any] | None  # per unit (seed), the cluster it nests in; None: independent


def cluster_codes(clusters: Clusters, n_units: int) -> np.ndarray | None:
    """Integer codes (in order of first appearance) of the units' clusters, or None when every
    unit is its own cluster: nesting then changes nothing and the flat bootstrap is exact."""
    if clusters is None:
        return None
    labels = list(clusters)
    if len(labels) != n_units:
        raise ValueError(f"clusters: need one cluster per unit ({n_units}), got {len(labels)}")
    codes = np.array([list(dict.fromkeys(labels)).index(c) for c in labels])
    return None if len(set(labels)) == n_units else codes


def nested_counts(rng: np.random.Generator, codes: np.ndarray, n_boot: int) -> np.ndarray:
    """[n_boot, units] multiplicities of the two-stage (hierarchical) bootstrap: the C clusters
    are drawn with replacement, then, for each drawn copy of a cluster of n units, its n units
    with replacement. m copies of one cluster draw its units m*n times in all: one multinomial."""
    n_clusters = int(codes.max()) + 1
    copies = _counts(rng, n_clusters, n_boot)
    out = np.zeros((n_boot, len(codes)), dtype=np.int64)
    for c in range(n_clusters):
        members = np.flatnonzero(codes == c)
        if len(members) == 1:
            out[:, members[0]] = copies[:, c]
        else:
            out[:, members] = rng.multinomial(copies[:, c] * len(members),
                                              np.full(len(members), 1.0 / len(members)))
    return out


def _unit_weights(rng: np.random.Generator, n_units: int, n_boot: int,
                  clusters: Clusters = None) -> np.ndarray:
    """[n_boot, units] resampling weights (rows sum to 1): units drawn independently (flat), or
    nested in their clusters (`nested_counts`); each drawn unit weighs the same, so the
    statistic stays the mean over units."""
    codes = cluster_codes(clusters, n_units)
    counts = _counts(rng, n_units, n_boot) if codes is None else nested_counts(rng, codes, n_boot)
    return counts / counts.sum(axis=1, keepdims=True)


def _seed_problem_weights(seed: int, n_seeds: int, n_problems: int, n_boot: int,
                          clusters: Clusters = None) -> tuple[np.ndarray, np.ndarray]:
    """[n_boot, seeds] and [n_boot, problems] resampling weights (rows sum to 1) of the
    two-level bootstrap: problems drawn first from `default_rng(seed)`, then seeds, independently
    (with `clusters`: the seeds' clusters, then seeds within them). A replicate of a
    [seeds, problems] statistic is `seed_w @ matrix @ problem_w`."""
    counts, rng = _resample(seed, n_problems, n_boot)
    return _unit_weights(rng, n_seeds, n_boot, clusters), counts / n_problems


def _interval(replicates: np.ndarray, alpha: float) -> tuple[float, float]:
    """The percentile interval: the alpha/2 and 1 - alpha/2 quantiles of the replicates."""
    lo, hi = np.quantile(replicates, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def _centred_p(replicates: np.ndarray, diff: float) -> float:
    """Two-sided p of a centred null: (1 + #{|d*_b - diff| >= |diff|}) / (n_boot + 1)."""
    # tolerance: identical floating sums reached in another order must count as "as extreme"
    extreme = np.abs(replicates - diff) >= abs(diff) - 1e-12
    return (1 + int(extreme.sum())) / (len(replicates) + 1)


def bootstrap_ci(
    per_problem_scores: Any = None,
    *,
    samples: Any = None,
    seed: int = 0,
    n_boot: int = 10_000,
    alpha: float = 0.05,
) -> tuple[float, float, float]:
    """(mean, lo, hi): the score and its percentile interval for "problems like these".

    Give exactly one of:
    - `per_problem_scores`, shape [problems] (e.g. c/n per problem), or [seeds, problems]
      (one row per independent run): problems are resampled with replacement, and so are the
      seeds (rows) when there are several, independently; each replicate is the grand mean.
    - `samples`, a 0/1 matrix [problems, samples]: two-level bootstrap, problems with
      replacement and then samples within each drawn problem. A drawn problem with c of S
      correct contributes Binomial(S, c/S) correct, which is exactly what resampling its S
      samples with replacement yields, so no [n_boot, problems, samples] index array is needed.

    `mean` is the statistic on the data itself; (lo, hi) are the alpha/2 and 1 - alpha/2
    quantiles of the replicates.
    """
    _check_boot(n_boot, alpha)
    if (per_problem_scores is None) == (samples is None):
        raise ValueError("bootstrap_ci: give exactly one of per_problem_scores and samples")
    if samples is not None:
        matrix = _as_matrix(samples, "bootstrap_ci: samples", (2,))
        if not np.all((matrix == 0) | (matrix == 1)):
            raise ValueError("bootstrap_ci: samples must be 0/1 correctness values")
        n_problems, n_samples = matrix.shape
        rate = matrix.mean(axis=1)
        counts, rng = _resample(seed, n_problems, n_boot)
        correct = rng.binomial(counts * n_samples, rate)  # m draws of a problem: m*S samples
        replicates = correct.sum(axis=1) / (n_problems * n_samples)
        mean = float(rate.mean())
    else:
        scores = np.atleast_2d(_as_matrix(per_problem_scores, "bootstrap_ci: scores", (1, 2)))
        seed_w, problem_w = _seed_problem_weights(seed, *scores.shape, n_boot)
        replicates = np.einsum("br,rp,bp->b", seed_w, scores, problem_w)
        mean = float(scores.mean())
    return mean, *_interval(replicates, alpha)


def paired_bootstrap(
    a: Any, b: Any, *, seed: int = 0, n_boot: int = 10_000, alpha: float = 0.05
) -> dict[str, float]:
    """Is method A better than method B on the same problems? diff = mean(A) - mean(B).

    `a` and `b` are aligned correctness matrices [problems, samples] (or [problems] scores).
    The per-(problem, sample) differences are averaged within each problem, and problems are
    resampled with replacement, the same draw for both methods (paired), so problem difficulty
    cancels out of the interval.

    p_value (two-sided, centred null): shift the replicates to mean zero, d*_b - diff, and count
    how often they are at least as far from 0 as the observed diff:
        p = (1 + #{b : |d*_b - diff| >= |diff|}) / (n_boot + 1).
    It is 1 when the methods agree exactly and never below the floor 1 / (n_boot + 1).
    """
    _check_boot(n_boot, alpha)
    x = _as_matrix(a, "paired_bootstrap: a", (1, 2))
    y = _as_matrix(b, "paired_bootstrap: b", (1, 2))
    if x.shape != y.shape:
        raise ValueError(f"paired_bootstrap: a and b must be aligned, got {x.shape} and {y.shape}")
    per_problem = (x - y).reshape(len(x), -1).mean(axis=1)
    diff = float(per_problem.mean())
    replicates = _resample(seed, len(per_problem), n_boot)[0] @ per_problem / len(per_problem)
    lo, hi = _interval(replicates, alpha)
    return {"diff": diff, "lo": lo, "hi": hi, "p_value": _centred_p(replicates, diff)}


def paired_seed_bootstrap(
    a: Any, b: Any, *, seed: int = 0, n_boot: int = 10_000, alpha: float = 0.05,
    clusters: Clusters = None,
) -> dict[str, float]:
    """A vs B paired by seed and problem: diff = mean over seeds of the per-seed paired
    differences (A and B evaluated at the same seed, on the same problems, with the same
    sampling seed: common random numbers).

    `a` and `b` are aligned [seeds, problems] score matrices. The differences D = A - B are
    resampled as `bootstrap_ci` resamples scores (seeds and problems, independently), so the
    interval covers both seed and problem variation while the pairing cancels what they share.
    p_value: the centred two-sided rule of `paired_bootstrap`. `clusters` (one label per seed
    row, e.g. the start a seed's runs began from): seeds that share a cluster are not
    independent, so clusters are resampled first, then seeds within each drawn cluster.
    """
    _check_boot(n_boot, alpha)
    x = np.atleast_2d(_as_matrix(a, "paired_seed_bootstrap: a", (1, 2)))
    y = np.atleast_2d(_as_matrix(b, "paired_seed_bootstrap: b", (1, 2)))
    if x.shape != y.shape:
        raise ValueError(f"paired_seed_bootstrap: a and b must be aligned, got {x.shape} and "
                         f"{y.shape}")
    d = x - y
    seed_w, problem_w = _seed_problem_weights(seed, *d.shape, n_boot, clusters)
    replicates = np.einsum("br,rp,bp->b", seed_w, d, problem_w)
    diff = float(d.mean())
    lo, hi = _interval(replicates, alpha)
    return {"diff": diff, "lo": lo, "hi": hi, "p_value": _centred_p(replicates, diff),
            "per_seed": d.mean(axis=1).tolist()}


def seed_problem_replicates(
    d: Any, *, seed: int = 0, n_boot: int = 10_000, clusters: Clusters = None
) -> tuple[np.ndarray, np.ndarray]:
    """(means [m], replicates [n_boot, m]) of m aligned [seeds, problems] matrices d [m, S, P],
    all resampled with the same seed and problem draws (for statistics across the m, such as a
    slope over group sizes, whose interval must keep their pairing)."""
    _check_boot(n_boot, 0.05)
    stack = np.asarray(d, dtype=np.float64)
    if stack.ndim != 3 or stack.size == 0:
        raise ValueError(f"seed_problem_replicates: need a non-empty [m, seeds, problems] array, "
                         f"got {stack.shape}")
    seed_w, problem_w = _seed_problem_weights(seed, *stack.shape[1:], n_boot, clusters)
    return stack.mean(axis=(1, 2)), np.einsum("br,mrp,bp->bm", seed_w, stack, problem_w)


def unit_bootstrap(
    values: Any, *, seed: int = 0, n_boot: int = 10_000, alpha: float = 0.05,
    clusters: Clusters = None,
) -> tuple[float, float, float]:
    """(mean, lo, hi) of per-unit values (one number per independent unit, e.g. a per-unit
    paired difference of train-log metrics), resampling the units.

    Units are drawn as indices (`integers` of `default_rng(seed)`), not as the multinomial
    counts of `bootstrap_ci`: the same resampling distribution from another random stream, kept
    because the mechanism study's committed P7-P9 intervals were drawn this way. With
    `clusters` that nest units (some cluster holds several), the nested weights of
    `_unit_weights` instead.
    """
    _check_boot(n_boot, alpha)
    x = _as_matrix(values, "unit_bootstrap: values", (1,))
    rng = np.random.default_rng(seed)
    if cluster_codes(clusters, len(x)) is None:
        replicates = x[rng.integers(0, len(x), (n_boot, len(x)))].mean(axis=1)
    else:
        replicates = _unit_weights(rng, len(x), n_boot, clusters) @ x
    return float(x.mean()), *_interval(replicates, alpha)


def unit_band(
    curves: Any, *, seed: int = 0, n_boot: int = 2_000, alpha: float = 0.05
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, lo, hi) per point of [units, points] curves: the mean over units and its
    percentile interval, resampling the units (multinomial counts, as `bootstrap_ci` resamples
    seeds). A unit's NaN point is left out of that point's means (a replicate that drew only
    NaN units there is left out of its interval); a point with no finite value is NaN."""
    _check_boot(n_boot, alpha)
    y = np.asarray(curves, dtype=np.float64)
    if y.ndim != 2 or y.size == 0:
        raise ValueError(f"unit_band: need a non-empty [units, points] array, got {y.shape}")
    finite = np.isfinite(y)
    live = finite.any(axis=0)
    values, weights = np.where(finite, y, 0.0)[:, live], finite[:, live].astype(float)
    counts = _counts(np.random.default_rng(seed), len(y), n_boot).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):  # 0/0: a replicate of NaN units only
        reps = (counts @ values) / (counts @ weights)
    mean, lo, hi = (np.full(y.shape[1], np.nan) for _ in range(3))
    mean[live] = values.sum(axis=0) / weights.sum(axis=0)
    lo[live], hi[live] = np.nanquantile(reps, [alpha / 2, 1 - alpha / 2], axis=0)
    return mean, lo, hi


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    out, running = [1.0] * len(p_values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        out[i] = running
    return out
