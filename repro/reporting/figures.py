"""`repro figures`: one function per figure, `(Aggregate) -> Figure`, from the aggregate alone.

Data preparation (seed curves on a common x, bands over seeds) is kept apart from drawing.
Figures use `matplotlib.figure.Figure` without pyplot (no GUI backend, no global figure state;
PNG goes through Agg) and are built and saved inside the package's style sheet
(`paper.mplstyle`: TrueType fonts, colour-blind-safe cycle). Saved files carry no date or
version stamp, so the same aggregate gives the same bytes. A figure without data still gets
written, with a "no data" note, so the pipeline's declared outputs always exist.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import matplotlib as mpl
import numpy as np
import pyarrow as pa
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.style import context as style_context

from repro.atomic import atomic_file
from repro.diagnostics.curves import moving_average
from repro.reporting.load import Aggregate, load_aggregate
from repro.reporting.scores import compare, estimate
from repro.reporting.study import Study
from repro.reporting.tables_eval import pooled_scores

STYLE = Path(__file__).with_name("paper.mplstyle")
SAVE_METADATA = {"pdf": {"CreationDate": None}, "png": {"Software": None}}
LINESTYLES = ("-", "--", "-.", ":")  # one per model when an aggregate holds several
GRID_POINTS = 100  # common x grid of curves against cumulative tokens
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Band:
    """One algorithm's curve over seeds: mean line, min-max band."""

    algo: str
    label: str
    x: np.ndarray
    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    linestyle: str


def seed_matrix(curves: Mapping[int, pa.Table], column: str, *, x: str = "step",
                window: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """x [points] and `column` [seeds, points] (trailing mean over `window` steps) on a common x:
    the steps every seed has, or for a cumulative x (gen_tokens_cum) a grid over the range every
    seed covers, linearly interpolated."""
    series = []
    for curve in curves.values():
        y = curve[column].to_numpy().astype(float)
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


def main_bands(agg: Aggregate, column: str, *, x: str = "step", window: int = 1) -> list[Band]:
    """Bands of the main algorithms at the main group size, per model."""
    s, models, bands = agg.study, agg.models(), []
    for i, model in enumerate(models):
        for algo in s.main_algos:
            xs, ys = seed_matrix(agg.seed_curves(model, algo, s.main_group_size), column, x=x,
                                 window=window)
            if xs.size:
                label = algo if len(models) == 1 else f"{algo} ({model})"
                bands.append(Band(algo, label, xs, *_spread(ys), LINESTYLES[i % len(LINESTYLES)]))
    return bands


def _spread(ys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, min and max over seeds, ignoring NaN (NaN where every seed is NaN), no warnings."""
    finite = np.isfinite(ys)
    count = finite.sum(axis=0)
    mean = np.where(count > 0, np.where(finite, ys, 0.0).sum(axis=0) / np.maximum(count, 1), np.nan)
    return mean, np.fmin.reduce(ys, axis=0), np.fmax.reduce(ys, axis=0)


def colours(study: Study) -> dict[str, str]:
    """Run label -> colour, in the study's order, the same in every figure (style's cycle)."""
    cycle = mpl.rcParams["axes.prop_cycle"].by_key()["color"]
    order = dict.fromkeys([*study.main_algos, *study.ablation_algos, *study.group_algos])
    return {algo: cycle[i % len(cycle)] for i, algo in enumerate(order)}


def _draw(ax: Axes, bands: list[Band], study: Study, *, log_y: bool = False) -> None:
    palette = colours(study)
    for band in bands:
        ax.plot(band.x, band.mean, band.linestyle, color=palette[band.algo], label=band.label)
        ax.fill_between(band.x, band.lo, band.hi, color=palette[band.algo], alpha=0.18, linewidth=0)
    values = np.concatenate([band.lo for band in bands] or [np.empty(0)])
    values = values[np.isfinite(values)]
    if log_y and values.size and values.min() > 0:
        ax.set_yscale("log")


def no_data(what: str) -> Figure:
    log.warning("figure without data: %s", what)
    fig = Figure(figsize=(5.5, 2.0))
    fig.text(0.5, 0.5, f"no data: {what}", ha="center", va="center")
    return fig


def _band_note(agg: Aggregate) -> str:
    return (f"{agg.study.experiment}, G = {agg.study.main_group_size}: mean over seeds, "
            "band min-max")


def reward_vs_compute(agg: Aggregate) -> Figure:
    s = agg.study
    bands = main_bands(agg, "reward_mean", x="gen_tokens_cum", window=s.smooth_window)
    if not bands:
        return no_data("no training runs of the main algorithms")
    fig = Figure(layout="constrained")
    ax = fig.add_subplot()
    _draw(ax, bands, s)
    ax.axhline(s.threshold, color="0.4", linestyle=":", linewidth=1, label=f"κ = {s.threshold:g}")
    ax.set(xlabel="generated tokens (cumulative)",
           ylabel=f"train reward (trailing mean of {s.smooth_window} steps)")
    ax.legend()
    fig.suptitle(_band_note(agg), fontsize=9)
    return fig


def _step_figure(agg: Aggregate, column: str, ylabel: str) -> Figure:
    bands = main_bands(agg, column)
    if not bands:
        return no_data(f"no {column} curves of the main algorithms")
    fig = Figure(layout="constrained")
    ax = fig.add_subplot()
    _draw(ax, bands, agg.study)
    ax.set(xlabel="step (rollout batch)", ylabel=ylabel)
    ax.legend()
    fig.suptitle(_band_note(agg), fontsize=9)
    return fig


def entropy_vs_step(agg: Aggregate) -> Figure:
    return _step_figure(agg, "entropy", "token entropy of rollouts")


def logodds_drift_vs_step(agg: Aggregate) -> Figure:
    return _step_figure(agg, "logodds_drift", "log-odds drift between equal answers")


def kl_template_vs_step(agg: Aggregate) -> Figure:
    return _step_figure(agg, "kl_template", "KL at template contexts (consecutive steps)")


def mechanism_vs_step(agg: Aggregate) -> Figure:
    panels = [(c, main_bands(agg, c)) for c in ("asym", "freq_energy")]
    if not any(bands for _, bands in panels):
        return no_data("no asym / freq_energy curves of the main algorithms")
    fig = Figure(figsize=(9.0, 3.5), layout="constrained")
    for ax, (column, bands) in zip(fig.subplots(1, 2), panels, strict=True):
        _draw(ax, bands, agg.study, log_y=True)
        ax.set(xlabel="step (rollout batch)", ylabel=column, title=column)
    fig.axes[0].legend()
    fig.suptitle(_band_note(agg), fontsize=9)
    return fig


@dataclass(frozen=True)
class Points:
    """One error-bar series: (G, value, lo, hi) by group size."""

    algo: str
    label: str
    rows: list[tuple[int, float, float, float]]
    linestyle: str


def group_size_points(agg: Aggregate) -> tuple[list[Points], list[Points]]:
    """avg@k (pooled over benchmarks, 95% CI) and Δ vs the baseline (paired, 95% CI) by G."""
    s, models = agg.study, agg.models()
    scores, deltas = [], []
    for i, model in enumerate(models):
        style = LINESTYLES[i % len(LINESTYLES)]
        suffix = "" if len(models) == 1 else f" ({model})"
        gs = agg.group_sizes(model, s.group_algos)
        pooled = {(a, g): pooled_scores(agg, model, a, g) for a in s.group_algos for g in gs}
        for algo in s.group_algos:
            ests = [(g, estimate(pooled[algo, g])) for g in gs]
            scores.append(Points(algo, algo + suffix,
                                 [(g, e.mean, e.lo, e.hi) for g, e in ests if e], style))
            if algo != s.baseline:
                tests = [(g, compare(pooled[algo, g], pooled[s.baseline, g])) for g in gs]
                deltas.append(Points(algo, f"{algo} - {s.baseline}{suffix}",
                                     [(g, t.diff, t.lo, t.hi) for g, t in tests if t], style))
    return [p for p in scores if p.rows], [p for p in deltas if p.rows]


def group_size_ablation(agg: Aggregate) -> Figure:
    s = agg.study
    scores, deltas = group_size_points(agg)
    if not scores:
        return no_data("no group-size ablation runs")
    palette = colours(s)
    gs = sorted({row[0] for points in scores for row in points.rows})
    fig = Figure(figsize=(9.0, 3.5), layout="constrained")
    left, right = fig.subplots(1, 2)
    for ax, series, ylabel in ((left, scores, "avg@k (%), pooled over benchmarks"),
                               (right, deltas, f"Δ vs {s.baseline} (points, 95% CI)")):
        for points in series:
            g, mid, lo, hi = (np.array(v, dtype=float) for v in zip(*points.rows, strict=True))
            ax.errorbar(g, mid, yerr=[mid - lo, hi - mid], fmt="o" + points.linestyle,
                        color=palette[points.algo], capsize=3, label=points.label)
        ax.set(xscale="log", xlabel="group size G", ylabel=ylabel)
        ax.set_xticks(gs, labels=[str(g) for g in gs])
        ax.minorticks_off()
        if series:
            ax.legend()
    right.axhline(0, color="0.4", linewidth=1)
    fig.suptitle(f"Group size ablation, frac = {s.final_frac:g} ({s.experiment})", fontsize=9)
    return fig


FIGURES: dict[str, Callable[[Aggregate], Figure]] = {
    "reward_vs_compute": reward_vs_compute,
    "entropy_vs_step": entropy_vs_step,
    "logodds_drift_vs_step": logodds_drift_vs_step,
    "kl_template_vs_step": kl_template_vs_step,
    "mechanism_vs_step": mechanism_vs_step,
    "group_size_ablation": group_size_ablation,
}


def write_figures(aggregate: Path, out: Path) -> list[Path]:
    """Every figure as NAME.pdf and NAME.png under `out` (each file atomically)."""
    agg = load_aggregate(aggregate)
    paths = []
    with style_context(STYLE):
        for name, build in FIGURES.items():
            fig = build(agg)
            for ext, metadata in SAVE_METADATA.items():
                path = out / f"{name}.{ext}"
                atomic_file(path, lambda tmp, fig=fig, ext=ext, metadata=metadata:
                            fig.savefig(tmp, format=ext, metadata=metadata))
                paths.append(path)
    return paths
