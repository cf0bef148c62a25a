"""The verdict table: each pre-registered prediction (docs/preregistration.md) with its numbers
and "holds", "fails" or "inconclusive", decided by the thresholds written there before the run.

The rules below are the pre-registration's table, one function per row; they read only the
aggregate, compare only seeds both sides have, and say so in the numbers they print.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from repro.evaluation.stats import seed_problem_replicates
from repro.reporting.load import Aggregate, SeedScores
from repro.reporting.render import Table
from repro.reporting.scores import Comparison, compare
from repro.reporting.study import INIT_ALGO, INIT_FRAC
from repro.reporting.tables_eval import pooled_scores
from repro.reporting.tables_train import threshold_hits

HOLDS, FAILS, INCONCLUSIVE = "holds", "fails", "inconclusive"
NO_LEARNING = "inconclusive (no learning)"
MIN_EFFECT = 1.0  # points of avg@k: the smallest accuracy effect of interest
LEARNING_FLOOR = 5.0  # V: grpo's gain over the start must have its lower bound above this
SMOOTH = 5  # steps of the "final" train-log values


@dataclass(frozen=True)
class Verdict:
    pid: str
    claim: str
    numbers: str
    verdict: str


def _accuracy(test: Comparison | None, pid: str, claim: str, learned: bool) -> Verdict:
    if test is None:
        return Verdict(pid, claim, "no paired runs", INCONCLUSIVE)
    numbers = (f"Δ = {test.diff:+.1f} [{test.lo:+.1f}, {test.hi:+.1f}] points, "
               f"{test.seeds} seeds x {test.problems} problems")
    if not learned:
        return Verdict(pid, claim, numbers, NO_LEARNING)
    verdict = HOLDS if test.lo > 0 else FAILS if test.hi < MIN_EFFECT else INCONCLUSIVE
    return Verdict(pid, claim, numbers, verdict)


def _final(agg: Aggregate, model: str, algo: str, g: int) -> SeedScores:
    return pooled_scores(agg, model, algo, g)


def _per_seed(agg: Aggregate, model: str, algo: str, g: int,
              value: Callable[[Callable[[str], np.ndarray]], float]) -> dict[int, float]:
    """seed -> value(col) of each run, where col(name) is that run's train-log column."""
    return {seed: value(lambda name, c=curve: c[name].to_numpy().astype(float))
            for seed, curve in agg.seed_curves(model, algo, g).items()}


def _paired(a: dict[int, float], b: dict[int, float]) -> list[tuple[float, float]]:
    return [(a[s], b[s]) for s in sorted(set(a) & set(b))]


def validity(agg: Aggregate, model: str) -> tuple[Verdict, bool]:
    s = agg.study
    init = {b: agg.seed_scores(model, INIT_ALGO, b, None, INIT_FRAC) for b in agg.benchmarks()}
    pooled: SeedScores = {}
    for b, scores in sorted(init.items()):
        for seed, by_problem in scores.items():
            pooled.setdefault(seed, {}).update({f"{b}/{p}": v for p, v in by_problem.items()})
    test = compare(_final(agg, model, "grpo", s.main_group_size), pooled)
    claim = f"V: RL learns (grpo - start > {LEARNING_FLOOR:g} points)"
    if test is None:
        return Verdict("V", claim, "no paired runs", INCONCLUSIVE), False
    learned = test.lo > LEARNING_FLOOR
    numbers = f"Δ = {test.diff:+.1f} [{test.lo:+.1f}, {test.hi:+.1f}], {test.seeds} seeds"
    return Verdict("V", claim, numbers, HOLDS if learned else FAILS), learned


def _tokens(agg: Aggregate, model: str, algo: str) -> dict[int, float]:
    """Tokens to κ per seed; a seed that never reaches it counts as its budget + one step."""
    hits = threshold_hits(agg, model, algo).hits
    out = {}
    for seed, curve in agg.seed_curves(model, algo, agg.study.main_group_size).items():
        tokens = curve["gen_tokens_cum"].to_numpy()
        step = tokens[-1] / len(tokens)
        out[seed] = hits[seed] if hits[seed] is not None else float(tokens[-1] + step)
    return out


def compute_verdict(agg: Aggregate, model: str, base: str, prop: str) -> Verdict:
    pairs = _paired(_tokens(agg, model, prop), _tokens(agg, model, base))
    claim = f"P2: {prop} reaches κ = {agg.study.threshold:g} in fewer tokens than {base}"
    if not pairs:
        return Verdict("P2", claim, "no paired runs", INCONCLUSIVE)
    ratios = [a / b for a, b in pairs]
    below, mean = sum(r < 1 for r in ratios), float(np.mean(ratios))
    numbers = f"ratio < 1 in {below}/{len(ratios)} seeds, mean ratio {mean:.2f}"
    verdict = (HOLDS if below == len(ratios) and mean <= 0.9
               else FAILS if len(ratios) - below >= 0.8 * len(ratios) else INCONCLUSIVE)
    return Verdict("P2", claim, numbers, verdict)


def _lower(pid: str, claim: str, pairs: list[tuple[float, float]], hold_share: float,
           fail_share: float, max_ratio: float | None = None, fail_on_tie: bool = True) -> Verdict:
    """`prop` (first) lower than `base` (second) per seed: holds when lower in >= hold_share of
    the seeds with a lower mean (and mean ratio <= max_ratio if given); fails when not lower
    (larger, if not fail_on_tie) in >= fail_share of the seeds; else inconclusive."""
    pairs = [(a, b) for a, b in pairs if np.isfinite(a) and np.isfinite(b)]
    if not pairs:
        return Verdict(pid, claim, "no paired runs", INCONCLUSIVE)
    n, lower = len(pairs), sum(a < b for a, b in pairs)
    mean_a, mean_b = (float(np.mean(x)) for x in zip(*pairs, strict=True))
    ratio = mean_a / mean_b if mean_b else float("nan")
    numbers = f"lower in {lower}/{n} seeds, means {mean_a:.3g} vs {mean_b:.3g}"
    holds = lower >= np.ceil(hold_share * n) and mean_a < mean_b and (
        max_ratio is None or ratio <= max_ratio)
    against = n - lower if fail_on_tie else sum(a > b for a, b in pairs)
    verdict = HOLDS if holds else FAILS if against >= np.ceil(fail_share * n) else INCONCLUSIVE
    return Verdict(pid, claim, numbers, verdict)


def _mean(name: str) -> Callable[[Callable[[str], np.ndarray]], float]:
    def value(col: Callable[[str], np.ndarray]) -> float:
        x = col(name)
        x = x[np.isfinite(x)]
        return float(x.mean()) if x.size else float("nan")
    return value


def _abs_final_drift(col: Callable[[str], np.ndarray]) -> float:
    return float(abs(col("logodds_drift")[-SMOOTH:].mean()))


def _entropy_drop(col: Callable[[str], np.ndarray]) -> float:
    return float(col("entropy")[0] - col("entropy")[-SMOOTH:].mean())


def group_verdict(agg: Aggregate, model: str, base: str, prop: str, learned: bool) -> Verdict:
    claim = f"P8: the gain of {prop} over {base} grows with G"
    runs = {g: (_final(agg, model, prop, g), _final(agg, model, base, g))
            for g in agg.group_sizes(model, (base, prop))}
    runs = {g: ab for g, ab in runs.items() if ab[0] and ab[1]}
    seeds = sorted(set.intersection(*(set(a) & set(b) for a, b in runs.values()))) if runs else []
    if len(runs) < 3 or not seeds:
        return Verdict("P8", claim, f"{len(runs)} group sizes with paired runs", INCONCLUSIVE)
    common = sorted(set.intersection(*(set(a[s]) & set(b[s]) for a, b in runs.values()
                                       for s in seeds)))
    sizes = sorted(runs)  # every G on the same seeds and problems: a joint bootstrap
    diffs = [[[runs[g][0][s][p] - runs[g][1][s][p] for p in common] for s in seeds]
             for g in sizes]
    x = np.log2(sizes)
    means, reps = seed_problem_replicates(diffs)
    centred = (x - x.mean()) / ((x - x.mean()) ** 2).sum()
    slope, lo, hi = 100 * float(means @ centred), *(100 * np.quantile(reps @ centred, [.025, .975]))
    per_g = ", ".join(f"G{g}: {100 * m:+.1f}" for g, m in zip(sizes, means, strict=True))
    numbers = (f"Δ_G = {per_g}; "
               f"slope {slope:+.2f} [{lo:+.2f}, {hi:+.2f}] points per doubling")
    if not learned:
        return Verdict("P8", claim, numbers, NO_LEARNING)
    return Verdict("P8", claim, numbers, HOLDS if lo > 0 else FAILS if hi < 0 else INCONCLUSIVE)


def verdicts(agg: Aggregate, model: str) -> list[Verdict]:
    s = agg.study
    g, base, prop = s.main_group_size, s.baseline, s.proposed
    v, learned = validity(agg, model)
    nosg = next((a for a in s.ablation_algos if a.endswith("_nosg")), None)
    side = {name: (_per_seed(agg, model, prop, g, fn), _per_seed(agg, model, base, g, fn))
            for name, fn in (("asym", _mean("asym")), ("residual", _mean("residual_full")),
                             ("freq", _mean("freq_energy")), ("drift", _abs_final_drift),
                             ("entropy", _entropy_drop))}
    p3 = [_lower("P3", f"P3: {prop} has lower {m} than {base}", _paired(*side[k]), 1.0, 0.6,
                 max_ratio=0.5) for k, m in (("asym", "asym"), ("residual", "residual_full"))]
    p3_verdict = (HOLDS if all(x.verdict == HOLDS for x in p3)
                  else FAILS if any(x.verdict == FAILS for x in p3) else INCONCLUSIVE)
    return [
        v,
        _accuracy(compare(_final(agg, model, prop, g), _final(agg, model, base, g)), "P1",
                  f"P1: {prop} ends more accurate than {base}", learned),
        compute_verdict(agg, model, base, prop),
        Verdict("P3", f"P3: {prop} has lower asym and residual_full than {base}",
                "; ".join(f"{m}: {x.numbers}"
                          for m, x in zip(("asym", "residual_full"), p3, strict=True)),
                p3_verdict),
        _lower("P4", f"P4: {prop} has lower freq_energy than {base}", _paired(*side["freq"]),
               1.0, 0.6),
        _lower("P5", f"P5: {prop} drifts less between equal forms than {base}",
               _paired(*side["drift"]), 0.8, 0.8, fail_on_tie=False),
        _lower("P6", f"P6: {prop} loses less entropy than {base}", _paired(*side["entropy"]),
               0.8, 0.8, fail_on_tie=False),
        _accuracy(None if nosg is None else compare(_final(agg, model, prop, g),
                                                    _final(agg, model, nosg, g)),
                  "P7", f"P7: stop-gradient matters ({prop} vs {nosg or 'a _nosg ablation'})",
                  learned),
        group_verdict(agg, model, base, prop, learned),
    ]


def verdict_table(agg: Aggregate) -> list[Table]:
    rows = [[model, v.pid, v.claim, v.numbers, v.verdict] if len(agg.models()) > 1
            else [v.pid, v.claim, v.numbers, v.verdict]
            for model in agg.models() for v in verdicts(agg, model)]
    header = (["model"] if len(agg.models()) > 1 else []) + ["id", "prediction", "numbers",
                                                             "verdict"]
    notes = ["Rules and thresholds: docs/preregistration.md (written before the study ran). "
             "Accuracy Δ: mean of per-seed paired differences on the held-out problems, 95% "
             "bootstrap interval over seeds and problems; holds if the lower bound > 0, fails if "
             f"the upper bound < +{MIN_EFFECT:g}. Per-seed rules compare only seeds both runs "
             "have. P2-P8 are secondary and not corrected for multiplicity."]
    return [Table(f"Pre-registered predictions: verdicts ({agg.study.experiment})", header, rows,
                  notes)]
