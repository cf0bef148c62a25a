"""Statistics: pass@k against subset enumeration, avg@k by hand, bootstrap and paired tests."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from repro.evaluation.stats import avg_at_k, bootstrap_ci, paired_bootstrap, pass_at_k


def enumerated_pass_at_k(n: int, c: int, k: int) -> float:
    """P(a uniformly drawn k-subset of n samples, c of them correct, holds a correct one)."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


# ---- pass@k, avg@k ---------------------------------------------------------------------------

@pytest.mark.parametrize(("n", "c", "k", "expected"), [
    (5, 0, 1, 0.0),
    (5, 2, 1, 2 / 5),
    (4, 1, 2, 1 / 2),  # 3 of the 6 pairs contain the one correct sample
    (5, 2, 2, 7 / 10),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    (5, 3, 3, 1.0),  # only 2 wrong samples: every triple has a correct one
    (10, 10, 10, 1.0),
])
def test_pass_at_k_by_hand(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@given(st.integers(1, 8).flatmap(
    lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))
))
def test_pass_at_k_equals_subset_enumeration(nck: tuple[int, int, int]) -> None:
    n, c, k = nck
    assert pass_at_k(n, c, k) == pytest.approx(enumerated_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_k_large_n_is_stable() -> None:
    exact = 1 - math.comb(900, 50) / math.comb(1000, 50)
    assert pass_at_k(1000, 100, 50) == pytest.approx(exact, rel=1e-12)


@pytest.mark.parametrize(("args", "name"), [((3, 1, 5), "n"), ((5, 1, 0), "k"), ((5, 6, 2), "c")])
def test_pass_at_k_rejects_bad_arguments(args: tuple[int, int, int], name: str) -> None:
    with pytest.raises(ValueError, match=rf"\b{name} must"):
        pass_at_k(*args)


def test_avg_at_k_by_hand() -> None:
    assert avg_at_k([(1, 4), (3, 4), (0, 2)]) == pytest.approx((0.25 + 0.75 + 0.0) / 3)
    assert avg_at_k([[1, 0, 0, 0], [True, True, True, False], np.zeros(2)]) == pytest.approx(
        1 / 3
    )
    assert avg_at_k(np.array([[1, 1], [0, 1]])) == pytest.approx(0.75)  # rows are problems
    with pytest.raises(ValueError, match="problem 1"):
        avg_at_k([(1, 2), (3, 2)])
    with pytest.raises(ValueError):
        avg_at_k([])


# ---- bootstrap over problems (and seeds, and samples) ----------------------------------------

SCORES = np.random.default_rng(7).random(30)


def test_bootstrap_of_a_constant_is_degenerate() -> None:
    assert bootstrap_ci([0.4] * 30) == pytest.approx((0.4, 0.4, 0.4))


def test_bootstrap_brackets_the_mean_at_the_normal_width() -> None:
    mean, lo, hi = bootstrap_ci(SCORES)
    assert mean == pytest.approx(SCORES.mean())
    assert lo < mean < hi
    normal_width = 2 * 1.96 * SCORES.std() / math.sqrt(len(SCORES))
    assert hi - lo == pytest.approx(normal_width, rel=0.15)


def test_bootstrap_narrows_with_more_problems() -> None:
    _, lo, hi = bootstrap_ci(SCORES)
    _, lo10, hi10 = bootstrap_ci(np.tile(SCORES, 10))
    assert (hi10 - lo10) < 0.5 * (hi - lo)  # ~ 1/sqrt(10)


def test_bootstrap_is_deterministic_under_seed() -> None:
    assert bootstrap_ci(SCORES, seed=3) == bootstrap_ci(SCORES, seed=3)
    assert bootstrap_ci(SCORES, seed=3) != bootstrap_ci(SCORES, seed=4)


def test_bootstrap_over_seeds_and_problems() -> None:
    identical_runs = np.tile(SCORES, (4, 1))  # [seeds, problems], every run the same
    assert bootstrap_ci(identical_runs) == pytest.approx(bootstrap_ci(SCORES))
    run_offsets = np.array([[0.1], [0.3], [0.5], [0.7]]) * np.ones((4, 30))
    mean, lo, hi = bootstrap_ci(run_offsets)  # problems identical, runs differ
    assert mean == pytest.approx(0.4)
    assert lo < 0.3 and hi > 0.5  # only seed resampling can produce this spread


def test_two_level_bootstrap_resamples_samples_within_problems() -> None:
    half = np.tile([1, 0], (30, 16))  # every problem solved 16 of 32 times
    assert bootstrap_ci(half.mean(axis=1)) == pytest.approx((0.5, 0.5, 0.5))
    mean, lo, hi = bootstrap_ci(samples=half)
    assert mean == 0.5
    assert hi - lo == pytest.approx(2 * 1.96 * math.sqrt(0.25 / half.size), rel=0.15)
    with pytest.raises(ValueError, match="exactly one"):
        bootstrap_ci(SCORES, samples=half)
    with pytest.raises(ValueError, match="0/1"):
        bootstrap_ci(samples=half * 0.5)


# ---- paired bootstrap --------------------------------------------------------------------------

def correctness(rate: float, seed: int) -> np.ndarray:
    """A [30 problems, 8 samples] 0/1 matrix; each test draws its own, order does not matter."""
    return (np.random.default_rng(seed).random((30, 8)) < rate).astype(int)


B_RESULTS = correctness(0.3, seed=11)


def test_paired_identical_inputs() -> None:
    result = paired_bootstrap(B_RESULTS, B_RESULTS)
    assert result == {"diff": 0.0, "lo": 0.0, "hi": 0.0, "p_value": 1.0}


def test_paired_large_consistent_improvement() -> None:
    better = np.maximum(B_RESULTS, correctness(0.8, seed=12))
    result = paired_bootstrap(better, B_RESULTS, n_boot=2_000)
    assert result["diff"] == pytest.approx(better.mean() - B_RESULTS.mean())
    assert 0 < result["lo"] < result["diff"] < result["hi"]
    assert result["p_value"] < 0.01
    assert result["p_value"] >= 1 / 2_001  # floor


def test_paired_p_value_matches_the_normal_approximation() -> None:
    a = correctness(0.36, seed=13)  # a small, noisy edge over B_RESULTS
    result = paired_bootstrap(a, B_RESULTS)
    per_problem = (a - B_RESULTS).mean(axis=1)
    z = per_problem.mean() / (per_problem.std() / math.sqrt(30))
    normal_p = math.erfc(abs(z) / math.sqrt(2))
    assert 0.05 < normal_p < 0.95  # a case where the test must not call it significant
    assert result["p_value"] == pytest.approx(normal_p, abs=0.05)


def test_paired_swap_negates() -> None:
    a = correctness(0.45, seed=14)
    forward, backward = paired_bootstrap(a, B_RESULTS), paired_bootstrap(B_RESULTS, a)
    assert backward["diff"] == pytest.approx(-forward["diff"])
    assert (backward["lo"], backward["hi"]) == pytest.approx((-forward["hi"], -forward["lo"]))
    assert backward["p_value"] == forward["p_value"]


def test_paired_rejects_misaligned_inputs() -> None:
    with pytest.raises(ValueError, match="aligned"):
        paired_bootstrap(B_RESULTS, B_RESULTS[:, :4])


def test_paired_seed_bootstrap_cancels_what_the_pair_shares():
    """Per-seed paired differences: a seed effect and problem difficulty common to A and B drop
    out of the interval, which an unpaired interval of A alone cannot do."""
    from repro.evaluation.stats import paired_seed_bootstrap

    rng = np.random.default_rng(0)
    shared = rng.uniform(0, 1, size=(3, 128)) + np.array([[0.0], [0.2], [-0.2]])  # seeds differ
    effect = rng.normal(0.1, 0.01, size=(3, 128))
    test = paired_seed_bootstrap(shared + effect, shared)
    assert test["diff"] == pytest.approx(effect.mean())
    assert test["per_seed"] == pytest.approx(effect.mean(axis=1).tolist())
    assert test["lo"] < effect.mean() < test["hi"] and test["hi"] - test["lo"] < 0.01
    assert test["p_value"] < 0.001
    _, lo, hi = bootstrap_ci(shared + effect)
    assert hi - lo > 10 * (test["hi"] - test["lo"])
    same = paired_seed_bootstrap(shared, shared)
    assert (same["diff"], same["lo"], same["hi"], same["p_value"]) == (0.0, 0.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="aligned"):
        paired_seed_bootstrap(shared, shared[:2])


def test_seed_problem_replicates_share_one_draw_across_matrices():
    from repro.evaluation.stats import seed_problem_replicates

    rng = np.random.default_rng(1)
    base = rng.random((4, 50))
    means, reps = seed_problem_replicates([base, base + 0.1, 2 * base], n_boot=500)
    assert means == pytest.approx([base.mean(), base.mean() + 0.1, 2 * base.mean()])
    assert reps.shape == (500, 3)
    assert reps[:, 1] - reps[:, 0] == pytest.approx(np.full(500, 0.1))  # same draw for all
    assert reps[:, 2] == pytest.approx(2 * reps[:, 0])
    with pytest.raises(ValueError, match="seeds, problems"):
        seed_problem_replicates(base)


def test_memoised_resampling_draws_what_a_fresh_generator_draws() -> None:
    """bootstrap_ci reuses the first multinomial draw of default_rng(seed) across calls
    (tables ask for hundreds of intervals over the same problems); the intervals of a second,
    cached call, and of the draws that follow the cached one (seeds, samples within problems),
    are exactly those of a generator drawn from scratch."""
    data = np.random.default_rng(7)
    scores = data.random((3, 40))
    samples = (data.random((40, 4)) < 0.4).astype(float)

    def fresh_scores(seed: int) -> tuple[float, float]:
        rng = np.random.default_rng(seed)
        problem_w = rng.multinomial(40, np.full(40, 1 / 40), size=500) / 40
        seed_w = rng.multinomial(3, np.full(3, 1 / 3), size=500) / 3
        reps = np.einsum("br,rp,bp->b", seed_w, scores, problem_w)
        lo, hi = np.quantile(reps, [0.025, 0.975])
        return float(lo), float(hi)

    def fresh_samples(seed: int) -> tuple[float, float]:
        rng = np.random.default_rng(seed)
        counts = rng.multinomial(40, np.full(40, 1 / 40), size=500)
        reps = rng.binomial(counts * 4, samples.mean(axis=1)).sum(axis=1) / 160
        lo, hi = np.quantile(reps, [0.025, 0.975])
        return float(lo), float(hi)

    for seed in (0, 3, 0):  # the second seed 0 is served from the cache
        assert bootstrap_ci(scores, seed=seed, n_boot=500)[1:] == fresh_scores(seed)
        assert bootstrap_ci(samples=samples, seed=seed, n_boot=500)[1:] == fresh_samples(seed)


# ---- per-unit values: the unit bootstrap, bands over curves, Holm -----------------------------

def test_unit_bootstrap_resamples_units_by_index():
    """The mean of the units and the percentile interval of means of units drawn as indices
    from default_rng(seed) (how the mechanism study's P7-P9 intervals were drawn)."""
    from repro.evaluation.stats import unit_bootstrap

    d = np.array([-1.2, 0.3, -0.4, -2.0, 0.1, -0.9])
    draws = np.random.default_rng(0).integers(0, 6, (10_000, 6))
    lo, hi = np.quantile(d[draws].mean(axis=1), [0.025, 0.975])
    assert unit_bootstrap(d) == (pytest.approx(d.mean()), lo, hi)
    assert unit_bootstrap([0.5] * 4) == pytest.approx((0.5, 0.5, 0.5))
    assert unit_bootstrap(d, seed=1) != unit_bootstrap(d)
    with pytest.raises(ValueError, match="finite"):
        unit_bootstrap([0.1, float("nan")])


def test_unit_band_is_the_mean_over_units_and_covers_it():
    from repro.evaluation.stats import unit_band

    rng = np.random.default_rng(3)
    curves = rng.normal(0, 1, (6, 40)) + np.linspace(0, 4, 40)
    curves[2, 5] = np.nan  # a unit without that point
    curves[:, 7] = np.nan  # a point no unit has
    mean, lo, hi = unit_band(curves, n_boot=500)
    expected = np.nanmean(np.delete(curves, 7, axis=1), axis=0)
    assert np.delete(mean, 7) == pytest.approx(expected)
    assert np.isnan(mean[7]) and np.isnan(lo[7]) and np.isnan(hi[7])
    live = np.isfinite(mean)
    assert np.all(lo[live] <= mean[live]) and np.all(mean[live] <= hi[live])
    assert np.all(hi[live] - lo[live] > 0)
    wide = unit_band(np.repeat(curves[:2], 3, axis=0) * 4, n_boot=500)  # more spread, wider
    assert np.nanmean(wide[2] - wide[1]) > np.nanmean(hi - lo)
    flat = unit_band(np.ones((3, 5)))
    assert [list(x) for x in flat] == [[1.0] * 5] * 3


def test_holm_adjusts_step_down_and_keeps_order():
    from repro.evaluation.stats import holm

    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5]
