"""Tables from the training curves: compute to threshold and the mechanism metrics.

Each table has a data step (numbers per run and algorithm, tested against hand computations)
and a formatting step (text cells).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from repro.diagnostics.curves import jitter2, steps_to_threshold
from repro.reporting.load import Aggregate
from repro.reporting.render import NOT_RUN, Table, fmt_num, fmt_tokens, per_model

NOT_REACHED = "not reached"


@dataclass(frozen=True)
class ThresholdHits:
    """gen_tokens_cum at which each seed's smoothed train reward first reaches κ (None: never)."""

    hits: Mapping[int, float | None]

    @property
    def reached(self) -> list[float]:
        return [x for x in self.hits.values() if x is not None]

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.reached) if self.reached else None

    @property
    def median(self) -> float | None:
        return statistics.median(self.reached) if self.reached else None


def threshold_hits(agg: Aggregate, model: str, algo: str) -> ThresholdHits:
    s = agg.study
    return ThresholdHits({
        seed: steps_to_threshold(curve["reward_mean"].to_numpy(), s.threshold,
                                 window=s.smooth_window, x=curve["gen_tokens_cum"].to_numpy())
        for seed, curve in agg.seed_curves(model, algo, s.main_group_size).items()
    })


def compute_ratio(algo: ThresholdHits, baseline: ThresholdHits) -> float | None:
    """Mean compute of `algo` over the baseline's (None unless both reach κ)."""
    if algo.mean is None or baseline.mean is None:
        return None
    return algo.mean / baseline.mean


def compute_table(agg: Aggregate) -> list[Table]:
    s = agg.study

    def rows_for(model: str) -> list[list[str]]:
        base = threshold_hits(agg, model, s.baseline)
        rows = []
        for algo in s.main_algos:
            hits = threshold_hits(agg, model, algo)
            if not hits.hits:
                rows.append([algo, NOT_RUN, NOT_RUN, NOT_RUN, NOT_RUN])
                continue
            ratio = compute_ratio(hits, base)
            rows.append([
                algo,
                f"({len(hits.reached)}/{len(hits.hits)})",
                NOT_REACHED if hits.median is None else fmt_tokens(hits.median),
                NOT_REACHED if hits.mean is None else fmt_tokens(hits.mean),
                "n/a" if ratio is None else f"{ratio:.2f}",
            ])
        return rows

    header, rows = per_model(agg.models(), ["method", "seeds reaching κ", "median gen. tokens",
                                            "mean gen. tokens", f"mean / {s.baseline}"], rows_for)
    notes = [
        f"κ = {s.threshold:g} on the train reward_mean, smoothed by a trailing mean over "
        f"{s.smooth_window} steps; compute = cumulative generated tokens (gen_tokens_cum) at the "
        f"first smoothed point ≥ κ. Runs at G = {s.main_group_size}.",
        f"Median and mean over the seeds that reach κ; '{NOT_REACHED}': no seed does. "
        f"Ratio: mean over the {s.baseline} mean (< 1: less compute); n/a unless both reach κ.",
    ]
    return [Table(f"Compute to threshold relative to {s.baseline} ({s.experiment})", header, rows,
                  notes)]


MECHANISM = {  # metric -> column header
    "asym": "asym",
    "residual_full": "residual_full",
    "freq_energy": "freq_energy",
    "jitter2": "Jitter2(reward)",
    "entropy_final": "entropy (final)",
    "logodds_drift_final": "log-odds drift (final)",
    "abs_drift_mean": "mean |log-odds drift|",
    "kl_template": "KL template",
    "grader_errors": "grader errors",
}


def nanmean(values: np.ndarray) -> float:
    """Mean of the finite entries; NaN (no warning) when there are none."""
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else float("nan")


def seed_mechanism(curve: pa.Table) -> dict[str, float]:
    """MECHANISM metrics of one run: step means ignore NaN steps (no shared token, no probe)."""
    def col(name: str) -> np.ndarray:
        return curve[name].to_numpy().astype(float)

    drift = col("logodds_drift")
    return {
        "asym": nanmean(col("asym")),
        "residual_full": nanmean(col("residual_full")),
        "freq_energy": nanmean(col("freq_energy")),
        "jitter2": jitter2(col("reward_mean")),
        "entropy_final": float(col("entropy")[-1]),
        "logodds_drift_final": float(drift[-1]),
        "abs_drift_mean": nanmean(np.abs(drift)),
        "kl_template": nanmean(col("kl_template")),
        # total over the run: rewards of 0 that were the grader's failure, not the policy's
        "grader_errors": total(col("grader_errors"))
        if "grader_errors" in curve.column_names else math.nan,
    }


def total(values: np.ndarray) -> float:
    """Sum of the measured steps; NaN when no step measured it (logs before the column)."""
    finite = values[np.isfinite(values)]
    return float(finite.sum()) if len(finite) else math.nan


def mechanism(curves: Mapping[int, pa.Table]) -> dict[str, float]:
    """Mean over seeds (NaN-aware) of each run's MECHANISM metrics; {} without runs."""
    per_seed = [seed_mechanism(curve) for curve in curves.values()]
    if not per_seed:
        return {}
    return {m: nanmean(np.array([run[m] for run in per_seed])) for m in MECHANISM}


def mechanism_table(agg: Aggregate) -> list[Table]:
    s = agg.study

    def rows_for(model: str) -> list[list[str]]:
        rows = []
        for algo in s.main_algos:
            curves = agg.seed_curves(model, algo, s.main_group_size)
            means = mechanism(curves)
            rows.append([algo, str(len(curves)),
                         *(fmt_num(means[m]) if means else NOT_RUN for m in MECHANISM)])
        return rows

    header, rows = per_model(agg.models(), ["method", "seeds", *MECHANISM.values()], rows_for)
    notes = [
        f"Mean over seeds of per-run values, runs at G = {s.main_group_size}. asym, residual_full, "
        "freq_energy, mean |log-odds drift| and KL template: mean over steps, ignoring steps "
        "where the metric is undefined (NaN); n/a: undefined on every step.",
        "Jitter2: mean |m(t+1) - 2 m(t) + m(t-1)| of the raw reward_mean curve; entropy and "
        "log-odds drift (change since step 0 on the probes): last step.",
        "grader errors: responses per run whose grading timed out or failed (scored 0, not the "
        "policy's fault); a count well above 0 makes the reward curves suspect.",
    ]
    return [Table(f"Mechanism metrics ({s.experiment})", header, rows, notes)]


REGIME = ("s_spread", "s_spread_product", "w_shift", "clip_frac", "shared_frac")


def regime_table(agg: Aggregate) -> Table:
    """Per algorithm, the mean over every logged step of every run (all models) of what the
    off-policy regime is made of: the spread of s, DFPO's weight shift, clipping."""
    s, rows = agg.study, []
    for algo in (*s.main_algos, *s.ablation_algos):
        runs = [curve for model in agg.models()
                for curve in agg.seed_curves(model, algo, s.main_group_size).values()]
        cells = []
        for column in REGIME:
            values = np.concatenate([c[column].to_numpy(zero_copy_only=False).astype(float)
                                     for c in runs] or [np.empty(0)])
            cells.append(f"{nanmean(values):.4f}" if np.isfinite(values).any() else "n/a")
        rows.append([algo, str(len(runs)), *cells])
    title = f"The regime: spread of s, DFPO's weight shift, clipping ({s.experiment})"
    return Table(title, ["method", "units", *REGIME], rows,
                 ["Mean over every logged step of every unit (train log); s_spread: the mean "
                  "reading, s_spread_product: the product reading (docs/objectives.md)."])
