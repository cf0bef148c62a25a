"""Power of study 4's "RL learns" gate (docs/preregistration-4.md, G2), from study 3's committed
aggregate, with the registered estimator (the nested bootstrap of repro.evaluation.stats).

What it takes from study 3 (source `reuse`, the one study 4 runs), all from
results/offpolicy-study/aggregate:
- the mean and the between-start standard deviation of GRPO's held-out gain over its start
  (final avg@2, one gain per start: the mean of its units' paired differences);
- the within-start standard deviation of a unit's final accuracy: from the two RL seeds of
  each start of the main arms gspo_fair and dfpo_min_prod (GRPO ran one seed per start),
  pooled as sqrt(mean of (x0 - x1)^2 / 2);
- the per-problem standard deviation of GRPO - start around each unit's mean.

It simulates study 4's G2 data: STARTS starts x 2 RL seeds, a unit's gain = mean + start effect
+ seed effect (normal, with the spreads above), 256 problems with the per-problem spread around
it; it then applies the gate (mean >= MEAN_BAR and the nested 95% lower bound > LOWER_BAR, 10,000
bootstrap replicates as registered... here 2,000 for speed: the percentile bounds move by less
than 0.1 points) and prints the share of simulated studies that pass. Fixed seeds: the printed
numbers are the pre-registration's, and tests/test_power_study4.py reruns this script.

    python scripts/power_study4.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from repro.evaluation.stats import paired_seed_bootstrap  # noqa: E402
from repro.reporting.load import load_aggregate  # noqa: E402
from repro.reporting.verdict_metrics import Part, Scope, final_scores  # noqa: E402

AGGREGATE = ROOT / "results" / "offpolicy-study" / "aggregate"
SOURCE = "reuse"
MEAN_BAR, LOWER_BAR = 3.0, 0.0  # G2 holds if the mean gain >= +3 and its lower bound > 0
SEEDS = 2  # RL seeds per start
PROBLEMS = 256
REPLICATIONS, N_BOOT = 1000, 2000
DESIGNS = (6, 8, 10)  # starts; the registered one is the smallest with power >= 0.8


def unit_means(scores: dict) -> dict[str, float]:
    return {u: 100 * float(np.mean(list(v.values()))) for u, v in scores.items()}


def study3_spreads() -> dict[str, float]:
    """mean gain, between-start sd, within-start sd and per-problem sd, in points."""
    agg = load_aggregate(AGGREGATE)
    scope = Scope((Part(tuple(agg.models()), "{arm}-" + SOURCE),), by_seed=False)
    start, grpo = final_scores(agg, scope, "start"), final_scores(agg, scope, "grpo")
    per_start: dict[str, list[float]] = {}
    residuals = []
    for unit, problems in grpo.items():
        d = 100 * np.array([problems[p] - start[unit][p] for p in problems])
        per_start.setdefault(unit.rsplit("/", 1)[0], []).append(float(d.mean()))
        residuals.append(d - d.mean())
    gains = np.array([np.mean(v) for v in per_start.values()])
    diffs = []
    for arm in ("gspo_fair", "dfpo_min_prod"):
        means = unit_means(final_scores(agg, scope, arm))
        for model in agg.models():
            diffs.append(means[f"{model}/0"] - means[f"{model}/1"])
    return {"mean": float(gains.mean()), "between": float(gains.std(ddof=1)),
            "within": float(np.sqrt(np.mean(np.square(diffs)) / 2)),
            "problem": float(np.concatenate(residuals).std()), "starts": len(gains)}


def power(spreads: dict[str, float], starts: int, seed: int = 47) -> float:
    """The share of simulated studies whose G2 holds."""
    rng = np.random.default_rng(seed)
    clusters = [c for c in range(starts) for _ in range(SEEDS)]
    passed = 0
    for _ in range(REPLICATIONS):
        gain = (spreads["mean"] + rng.normal(0, spreads["between"], starts)[clusters]
                + rng.normal(0, spreads["within"], starts * SEEDS))
        noise = rng.normal(0, spreads["problem"], (starts * SEEDS, PROBLEMS))
        d = (gain[:, None] + noise - noise.mean(axis=1, keepdims=True)) / 100
        test = paired_seed_bootstrap(d, np.zeros_like(d), n_boot=N_BOOT, clusters=clusters)
        passed += 100 * test["diff"] >= MEAN_BAR and 100 * test["lo"] > LOWER_BAR
    return passed / REPLICATIONS


def main() -> None:
    spreads = study3_spreads()
    print(f"study 3 ({SOURCE}, {spreads['starts']} starts): GRPO gain {spreads['mean']:.1f} "
          f"points, between-start sd {spreads['between']:.1f}, within-start sd "
          f"{spreads['within']:.1f}, per-problem sd {spreads['problem']:.1f}")
    for starts in DESIGNS:
        print(f"G2 power, {starts} starts x {SEEDS} RL seeds: {power(spreads, starts):.2f}")


if __name__ == "__main__":
    main()
