"""The mechanism study's verdicts (docs/preregistration-2.md): validity gates G1-G3, then
P1-P9, each decided by the thresholds written there before the study ran.

The replicate is a (start, RL seed) pair, a "unit": the study's starts are the aggregate's
models (stage-2 SFT seeds), so every score set here is keyed by "model/seed" and pooled over
the models. Paired comparisons use only the units both runs have.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from repro.reporting.load import Aggregate, SeedScores
from repro.reporting.render import Table
from repro.reporting.scores import Comparison, compare, pool
from repro.reporting.study import INIT_ALGO, INIT_FRAC
from repro.reporting.tables_budget import auc_scores, common_fractions, run_fractions
from repro.reporting.verdict import FAILS, HOLDS, INCONCLUSIVE, MIN_EFFECT, Verdict

INVALID = "invalid regime"
SPREAD_FLOOR = 0.02  # G1: mean within-group spread of s (product reading)
LEARNING_FLOOR = 5.0  # G2: grpo's gain over the start, lower bound, points
DIFFER_SHARE = 0.5  # G3: share of steps on which two train rewards must differ
FINAL = 5  # steps of a run's "final" train-log value
BOOT, BOOT_SEED = 10_000, 0
NOT_AFTER_HOLM = "holds (not after Holm)"

# (id, claim, A, B): the accuracy family of the pre-registration, AUC of A vs B
ACCURACY = (
    ("P1", "DFPO learns more than GSPO at matched compute", "dfpo_min_prod", "gspo"),
    ("P2", "the transform matters: Min-Replace beats no transform", "dfpo_min_prod",
     "dfpo_none_prod"),
    ("P3", "per-group cancellation beats one global rescale", "dfpo_min_prod",
     "dfpo_global_prod"),
    ("P4", "constrained Orth-Proj beats the unconstrained Eq. 18", "dfpo_orth_prod",
     "dfpo_orth_plain_prod"),
    ("P5", "the product reading is the one that helps", "dfpo_min_prod", "dfpo_min"),
    ("P6a", "GSPO's clip costs it", "gspo_noclip", "gspo"),
    ("P6b", "GSPO's length normaliser costs it", "gspo_tokmean", "gspo"),
)
PROPOSED, BASELINE, NO_TRANSFORM, GLOBAL = "dfpo_min_prod", "gspo", "dfpo_none_prod", \
    "dfpo_global_prod"


def unit(model: str, seed: int) -> str:
    return f"{model}/{seed}"


def _by_unit(agg: Aggregate, per_model: Callable[[str], SeedScores]) -> SeedScores:
    return {unit(m, s): v for m in agg.models() for s, v in per_model(m).items()}


def auc_units(agg: Aggregate, a: str, b: str) -> tuple[SeedScores, SeedScores]:
    """unit -> problem -> AUC for A and B, over the fractions both were evaluated at."""
    g = agg.study.main_group_size

    def side(model: str, algo: str, other: str) -> SeedScores:
        by_bench = {}
        for bench in agg.benchmarks():
            runs = {x: run_fractions(agg, model, x, bench, g) for x in (algo, other)}
            by_bench[bench] = auc_scores(runs[algo], common_fractions(runs))
        return pool(by_bench)

    return (_by_unit(agg, lambda m: side(m, a, b)), _by_unit(agg, lambda m: side(m, b, a)))


def final_units(agg: Aggregate, algo: str) -> SeedScores:
    """unit -> problem -> avg@k at the final fraction (the start: at frac 0)."""
    g, frac = (None, INIT_FRAC) if algo == INIT_ALGO else (agg.study.main_group_size,
                                                          agg.study.final_frac)
    return _by_unit(agg, lambda m: pool({b: agg.seed_scores(m, algo, b, g, frac)
                                         for b in agg.benchmarks()}))


def curve_units(agg: Aggregate, algo: str, column: str) -> dict[str, np.ndarray]:
    """unit -> the run's train-log column, by step."""
    g = agg.study.main_group_size
    return {unit(m, s): c[column].to_numpy(zero_copy_only=False).astype(float)
            for m in agg.models() for s, c in agg.seed_curves(m, algo, g).items()}


def _final(x: np.ndarray) -> float:
    tail = x[-FINAL:]
    return float(np.nanmean(tail)) if np.isfinite(tail).any() else math.nan


def unit_bootstrap(d: Sequence[float]) -> tuple[float, float, float]:
    """Mean of per-unit values and its 95% percentile interval, resampling units."""
    x = np.asarray(d, dtype=float)
    reps = x[np.random.default_rng(BOOT_SEED).integers(0, len(x), (BOOT, len(x)))].mean(1)
    lo, hi = np.quantile(reps, [0.025, 0.975])
    return float(x.mean()), float(lo), float(hi)


def holm(p: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    out, running = [1.0] * len(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        out[i] = running
    return out


def _delta(c: Comparison | None) -> str:
    if c is None:
        return "no paired units"
    return f"Δ = {c.diff:+.1f} [{c.lo:+.1f}, {c.hi:+.1f}] points, {c.seeds} units"


def gates(agg: Aggregate) -> tuple[list[Verdict], bool, bool]:
    """G1-G3 and (valid, transforms_act)."""
    spread = [v for x in curve_units(agg, PROPOSED, "s_spread_product").values()
              for v in x if np.isfinite(v)]
    g1_value = float(np.mean(spread)) if spread else math.nan
    g1 = Verdict("G1", f"mean spread of s (product) in {PROPOSED} >= {SPREAD_FLOOR:.0%}",
                 f"{100 * g1_value:.1f}% over {len(spread)} steps",
                 HOLDS if g1_value >= SPREAD_FLOOR else FAILS)
    test = compare(final_units(agg, "grpo"), final_units(agg, INIT_ALGO))
    g2 = Verdict("G2", f"RL learns (grpo - start, lower bound > {LEARNING_FLOOR:g} points)",
                 _delta(test), HOLDS if test is not None and test.lo > LEARNING_FLOOR else FAILS)
    reward = {a: curve_units(agg, a, "reward_mean") for a in (PROPOSED, NO_TRANSFORM, GLOBAL)}
    shares = {other: {u: float(np.mean(x != reward[other][u][:len(x)]))
                      for u, x in reward[PROPOSED].items()
                      if u in reward[other] and len(reward[other][u]) == len(x)}
              for other in (NO_TRANSFORM, GLOBAL)}
    units = set(reward[PROPOSED])
    act = bool(units) and all(set(s) == units and min(s.values()) >= DIFFER_SHARE
                              for s in shares.values())
    g3 = Verdict("G3", f"{PROPOSED}'s train reward differs from {NO_TRANSFORM}'s and "
                 f"{GLOBAL}'s on >= {DIFFER_SHARE:.0%} of steps in every unit",
                 "; ".join(f"vs {o}: min {100 * min(s.values(), default=math.nan):.0f}% of "
                           f"steps over {len(s)} units" for o, s in shares.items()),
                 HOLDS if act else FAILS)
    return [g1, g2, g3], g1.verdict == HOLDS and g2.verdict == HOLDS, act


def accuracy_verdicts(agg: Aggregate, valid: bool, act: bool) -> list[Verdict]:
    aucs = [auc_units(agg, a, b) for _, _, a, b in ACCURACY]
    tests = [compare(*pair) for pair in aucs]
    adjusted = holm([1.0 if t is None else t.p_value for t in tests])
    out = []
    for (pid, claim, a, b), pair, test, p_holm in zip(ACCURACY, aucs, tests, adjusted,
                                                      strict=True):
        final = compare(final_units(agg, a), final_units(agg, b))
        numbers = (f"AUC {_delta(test)}; Holm p {p_holm:.3f}; final avg@k "
                   f"{_delta(final).removeprefix('Δ = ')}")
        if pid == "P1" and test is not None:
            numbers += "; per start: " + ", ".join(
                f"{m} {c.diff:+.1f}" for m in agg.models()
                if (c := compare(*(_only(s, m) for s in pair))) is not None)
        if not valid or (pid in ("P2", "P3") and not act):
            verdict = INVALID
        elif test is None:
            verdict = INCONCLUSIVE
        elif test.lo > 0:
            verdict = HOLDS if p_holm < 0.05 else NOT_AFTER_HOLM
        else:
            verdict = FAILS if test.hi < MIN_EFFECT else INCONCLUSIVE
        out.append(Verdict(pid, f"{claim} ({a} vs {b})", numbers, verdict))
    return out


def _only(scores: SeedScores, model: str) -> SeedScores:
    return {u: v for u, v in scores.items() if u.rsplit("/", 1)[0] == model}


def _train_verdict(pid: str, claim: str, d: Mapping[str, float], valid: bool) -> Verdict:
    values = [v for v in d.values() if math.isfinite(v)]
    if not values:
        return Verdict(pid, claim, "no paired units", INVALID if not valid else INCONCLUSIVE)
    mean, lo, hi = unit_bootstrap(values)
    numbers = f"mean D = {mean:+.3f} [{lo:+.3f}, {hi:+.3f}], {len(values)} units"
    verdict = INVALID if not valid else HOLDS if hi < 0 else FAILS if lo > 0 else INCONCLUSIVE
    return Verdict(pid, claim, numbers, verdict)


def train_verdicts(agg: Aggregate, valid: bool) -> list[Verdict]:
    def paired(column: str, summary: Callable[[np.ndarray], float],
               diff: Callable[[float, float], float]) -> dict[str, float]:
        a, b = curve_units(agg, PROPOSED, column), curve_units(agg, BASELINE, column)
        return {u: diff(summary(a[u]), summary(b[u])) for u in sorted(set(a) & set(b))}

    def log_ratio(x: float, y: float) -> float:
        return math.log(x / y) if x > 0 and y > 0 else math.nan

    def drop(x: np.ndarray) -> float:
        return float(x[0]) - _final(x)

    return [
        _train_verdict("P7", f"less learning tax on the preamble: final preamble_kl, "
                       f"D = log({PROPOSED} / {BASELINE})",
                       paired("preamble_kl", _final, log_ratio), valid),
        _train_verdict("P8", f"less drift between equal phrasings: final phrasing_kl, "
                       f"D = log({PROPOSED} / {BASELINE})",
                       paired("phrasing_kl", _final, log_ratio), valid),
        _train_verdict("P9", f"less entropy collapse: D = drop({PROPOSED}) - "
                       f"drop({BASELINE}), drop = first step - final",
                       paired("entropy", drop, lambda x, y: x - y), valid),
    ]


REGIME = ("s_spread", "s_spread_product", "w_shift", "clip_frac", "shared_frac")


def regime_table(agg: Aggregate) -> Table:
    """Per algorithm, the mean over steps and units of what the regime is made of."""
    rows = []
    for a in (*agg.study.main_algos, *agg.study.ablation_algos):
        cells = []
        for c in REGIME:
            v = [x for arr in curve_units(agg, a, c).values() for x in arr if np.isfinite(x)]
            cells.append(f"{np.mean(v):.4f}" if v else "n/a")
        rows.append([a, str(len(curve_units(agg, a, "step"))), *cells])
    title = f"The regime: spread of s, DFPO's weight shift, clipping ({agg.study.experiment})"
    return Table(title, ["method", "units", *REGIME], rows,
                 ["Mean over every logged step of every unit (train log); s_spread: the mean "
                  "reading, s_spread_product: the product reading (docs/objectives.md)."])


def mechanism_verdict_tables(agg: Aggregate) -> list[Table]:
    gate_rows, valid, act = gates(agg)
    rows = [*gate_rows, *accuracy_verdicts(agg, valid, act), *train_verdicts(agg, valid)]
    notes = [
        "Rules and thresholds: docs/preregistration-2.md (committed before the study's RL runs). "
        "Unit: a (start, RL seed) pair; starts are the models "
        f"({', '.join(agg.models())}). Accuracy: AUC of held-out avg@k over the budget "
        "fractions, Δ = mean of per-unit paired differences, 95% bootstrap over units and "
        f"problems; holds if the lower bound > 0, fails if the upper bound < +{MIN_EFFECT:g}. "
        "Holm p: Holm-adjusted over the accuracy family P1-P6b; a holds whose adjusted p >= "
        f"0.05 reads '{NOT_AFTER_HOLM}'. P7-P9: per-unit D of final (last {FINAL} steps) "
        "values, 95% bootstrap over units, a second family, not adjusted.",
        "If G1 or G2 fails every prediction reads 'invalid regime'; if only G3 fails, P2 and "
        "P3 do.",
    ]
    verdicts = Table(f"Pre-registered predictions 2: verdicts ({agg.study.experiment})",
                     ["id", "prediction", "numbers", "verdict"],
                     [[v.pid, v.claim, v.numbers, v.verdict] for v in rows], notes)
    return [verdicts, regime_table(agg)]
