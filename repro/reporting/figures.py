"""`repro figures`: one function per figure, `(Aggregate) -> Figure`, from the aggregate alone,
one question each (figures_data prepares what they draw; figures_budget draws the held-out
accuracy figures, one panel per source or condition).

Every curve figure pools an algorithm's runs over models and seeds: a thick line for the mean
over runs, a band for its 95% bootstrap interval over runs, each run thin behind it; the legend
sits outside the axes, and every axis label says its unit. Figures use
`matplotlib.figure.Figure` without pyplot (no GUI backend, no global figure state; PNG goes
through Agg) and are built and saved inside the package's style sheet (`paper.mplstyle`:
TrueType fonts, colour-blind-safe cycle). Saved files carry no date or version stamp, so the
same aggregate gives the same bytes. A figure without data still gets written, with a "no
data" note, so the pipeline's declared outputs always exist.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.style import context as style_context
from matplotlib.ticker import EngFormatter, NullFormatter, PercentFormatter

from repro.atomic import atomic_file
from repro.reporting.figures_budget import accuracy_vs_budget, difference_vs_budget
from repro.reporting.figures_data import Band, bands, per_run, pooled_runs
from repro.reporting.figures_style import (
    SAVE_METADATA,
    STYLE,
    Look,
    legend,
    looks,
    measure,
    no_data,
)
from repro.reporting.figures_style import title as _title
from repro.reporting.load import Aggregate, load_aggregate
from repro.reporting.scores import compare, estimate
from repro.reporting.study import Study

WIDE, WIDER = (7.5, 3.6), (10.5, 3.6)  # one panel / two or three, with the legend beside them
STEP = "training step (rollout batches)"


def arm_looks(study: Study) -> dict[str, Look]:
    """Run label -> colour, line style and marker, in the study's order: the same in every
    figure of the study, and no two of its first ten labels alike (figures_style.looks)."""
    return looks(_order(study))


def _order(study: Study) -> list[str]:
    return list(dict.fromkeys([*study.main_algos, *study.ablation_algos, *study.group_algos]))


BAND_NOTE = "mean over runs\n(every model, seed)\nband: 95% CI over runs\nthin: single runs"


def _legend(fig: Figure, heading: str = BAND_NOTE) -> None:
    legend(fig, heading)


def _draw_bands(ax: Axes, drawn: Sequence[Band], study: Study, *, log_y: bool = False) -> None:
    look = arm_looks(study)
    for band in drawn:
        colour = look[band.algo].colour
        ax.plot(band.x, band.runs.T, color=colour, alpha=0.25, linewidth=0.6)
        ax.fill_between(band.x, band.lo, band.hi, color=colour, alpha=0.2, linewidth=0)
        ax.plot(band.x, band.mean, look[band.algo].linestyle, color=colour,
                linewidth=1.8, label=band.algo)
    lows = np.concatenate([b.runs.ravel() for b in drawn] or [np.empty(0)])
    lows = lows[np.isfinite(lows)]
    if log_y and lows.size and lows.min() > 0:
        ax.set_yscale("log")
        ax.yaxis.set_minor_formatter(NullFormatter())


def _curves(agg: Aggregate, question: str, panels: Sequence[tuple[str, str]], *,
            x: str = "step", xlabel: str = STEP, window: int = 1,
            algos: Sequence[str] | None = None, log_y: bool = False
            ) -> tuple[Figure, list[Axes]] | None:
    """A panel per (column, ylabel) of the algorithms' bands; None when no panel has data."""
    algos = agg.study.main_algos if algos is None else algos
    drawn = [(column, ylabel, bands(agg, algos, column, x=x, window=window))
             for column, ylabel in panels]
    drawn = [(column, ylabel, b) for column, ylabel, b in drawn if b]
    if not drawn:
        return None
    fig = Figure(figsize=WIDE if len(drawn) == 1 else WIDER, layout="constrained")
    axes = list(np.atleast_1d(fig.subplots(1, len(drawn))))
    for ax, (column, ylabel, b) in zip(axes, drawn, strict=True):
        _draw_bands(ax, b, agg.study, log_y=log_y)
        ax.set(xlabel=xlabel, ylabel=ylabel, label=column)
    _title(fig, agg, question)
    return fig, axes


def reward_vs_compute(agg: Aggregate) -> Figure:
    s = agg.study
    made = _curves(agg, "Train reward over compute", [
        ("reward_mean", f"train reward (0-1, trailing mean of "
                                         f"{s.smooth_window} steps)")],
                   x="gen_tokens_cum", xlabel="generated tokens per run (cumulative, tokens)",
                   window=s.smooth_window)
    if made is None:
        return no_data("no training runs of the main algorithms")
    fig, (ax,) = made
    ax.axhline(s.threshold, color="0.4", linestyle=":", linewidth=1, label=f"κ = {s.threshold:g}")
    ax.xaxis.set_major_formatter(EngFormatter())
    _legend(fig)
    return fig


def _step_figure(agg: Aggregate, question: str, column: str, ylabel: str) -> Figure:
    made = _curves(agg, question, [(column, ylabel)])
    if made is None:
        return no_data(f"no {column} curves of the main algorithms")
    _legend(made[0])
    return made[0]


def entropy_vs_step(agg: Aggregate) -> Figure:
    return _step_figure(agg, "Entropy of the rollouts over training", "entropy",
                        "token entropy of rollouts (nats per token)")


def logodds_drift_vs_step(agg: Aggregate) -> Figure:
    return _step_figure(agg, "Drift between equally correct answers", "logodds_drift",
                        "log-odds drift between equal answers (nats)")


def kl_template_vs_step(agg: Aggregate) -> Figure:
    return _step_figure(agg, "Change at template contexts", "kl_template",
                        "KL at template contexts, step to step (nats)")


def mechanism_vs_step(agg: Aggregate) -> Figure:
    made = _curves(agg, "Mechanism metrics over training", [
        ("asym", "asym: coefficient spread per unit advantage (CV)"),
        ("freq_energy", "freq_energy: net push on frequent tokens (share)")], log_y=True)
    if made is None:
        return no_data("no asym / freq_energy curves of the main algorithms")
    _legend(made[0])
    return made[0]


def spread_of_s_vs_step(agg: Aggregate) -> Figure:
    """Does the off-policy regime give the transforms anything to act on? The within-group
    spread of the sequence ratio s, (max - min) / mean, under both readings of s."""
    made = _curves(agg, "Within-group spread of s over training", [
        ("s_spread", "spread of s, (max - min) / mean (%)"),
        ("s_spread_product", "spread of s, (max - min) / mean (%)")])
    if made is None:
        return no_data("no s_spread curves of the main algorithms")
    fig, axes = made
    for ax in axes:
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_title({"s_spread": "mean reading", "s_spread_product": "product reading"}[
            ax.get_label()])
    _legend(fig)
    return fig


MECHANISM_BY_ALGO = (
    ("asym", "asym: coefficient spread\nper unit advantage", "CV"),
    ("residual_full", "residual_full: net push\nleft on shared nodes", "share"),
    ("freq_energy", "freq_energy: net push\non frequent tokens", "share"),
)


def mechanism_by_algorithm(agg: Aggregate) -> Figure:
    """asym, residual_full and freq_energy per algorithm: each run's mean over steps, and the
    mean over runs with its 95% bootstrap interval (log scale where the values span more than
    a factor of 30, all > 0)."""
    s = agg.study
    algos = list(dict.fromkeys([*s.main_algos, *s.ablation_algos]))
    panels = [(title, unit, per_run(agg, algos, column))
              for column, title, unit in MECHANISM_BY_ALGO]
    panels = [(title, unit, rows) for title, unit, rows in panels if rows]
    if not panels:
        return no_data("no asym / residual_full / freq_energy curves")
    look = arm_looks(s)
    order = {a: i for i, a in enumerate(algos)}
    fig = Figure(figsize=(10.5, 1.2 + 0.3 * len(algos)), layout="constrained")
    axes = list(np.atleast_1d(fig.subplots(1, len(panels), sharey=True)))
    for ax, (title, unit, rows) in zip(axes, panels, strict=True):
        for r in rows:
            y, colour = order[r.algo], look[r.algo].colour
            ax.plot(r.values, np.full(r.values.size, y), "o", color=colour,
                    alpha=0.35, markersize=3)
            ax.errorbar([r.mean], [y], xerr=[[r.mean - r.lo], [r.hi - r.mean]], fmt="D",
                        color=colour, markersize=5, capsize=3)
        values = np.concatenate([r.values for r in rows])
        logged = values.min() > 0 and values.max() > 30 * values.min()
        if logged:
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set(title=title, xlabel=f"mean over steps ({unit}{', log scale' if logged else ''})")
    axes[0].set_yticks(range(len(algos)), labels=algos)
    axes[0].invert_yaxis()
    fig.legend([Line2D([], [], marker="o", linestyle="", color="0.3", alpha=0.35),
                Line2D([], [], marker="D", linestyle="", color="0.3")],
               ["one run", "mean over runs,\n95% CI over runs"], loc="outside right upper")
    _title(fig, agg, "Mechanism metrics by algorithm")
    return fig


@dataclass(frozen=True)
class Points:
    """One error-bar series: (G, value, lo, hi) by group size."""

    algo: str
    label: str
    rows: list[tuple[int, float, float, float]]


def group_size_points(agg: Aggregate) -> tuple[list[Points], list[Points]]:
    """avg@k (pooled over benchmarks, models and seeds; 95% CI) and Δ vs the baseline (paired
    per run; 95% CI) by G, at the final fraction."""
    s = agg.study
    gs = sorted({g for m in agg.models() for g in agg.group_sizes(m, s.group_algos)})
    pooled = {(a, g): pooled_runs(agg, a, g, s.final_frac) for a in s.group_algos for g in gs}
    scores, deltas = [], []
    for algo in s.group_algos:
        ests = [(g, estimate(pooled[algo, g])) for g in gs]
        scores.append(Points(algo, algo, [(g, e.mean, e.lo, e.hi) for g, e in ests if e]))
        if algo != s.baseline:
            tests = [(g, compare(pooled[algo, g], pooled[s.baseline, g])) for g in gs]
            deltas.append(Points(algo, f"{algo} - {s.baseline}",
                                 [(g, t.diff, t.lo, t.hi) for g, t in tests if t]))
    return [p for p in scores if p.rows], [p for p in deltas if p.rows]


def group_size_ablation(agg: Aggregate) -> Figure:
    s = agg.study
    scores, deltas = group_size_points(agg)
    if not scores:
        return no_data("no group-size ablation runs")
    look = arm_looks(s)
    gs = sorted({row[0] for points in scores for row in points.rows})
    fig = Figure(figsize=WIDER, layout="constrained")
    left, right = fig.subplots(1, 2)
    for ax, series, ylabel in ((left, scores, f"{measure(agg)} (%)"),
                               (right, deltas, f"Δ vs {s.baseline} (points, 95% CI)")):
        for points in series:
            g, mid, lo, hi = (np.array(v, dtype=float) for v in zip(*points.rows, strict=True))
            ax.errorbar(g, mid, yerr=[mid - lo, hi - mid], color=look[points.algo].colour,
                        marker=look[points.algo].marker, linestyle=look[points.algo].linestyle,
                        capsize=3, label=points.label)
        ax.set(xscale="log", xlabel="group size G (responses per prompt)", ylabel=ylabel)
        ax.set_xticks(gs, labels=[str(g) for g in gs])
        ax.minorticks_off()
    right.axhline(0, color="0.4", linewidth=1)
    fig.suptitle(f"Group size ablation at frac = {s.final_frac:g} ({s.experiment})", fontsize=9)
    _legend(fig, "mean over runs\nand problems,\n95% CI")
    return fig


FIGURES: dict[str, Callable[[Aggregate], Figure]] = {
    "reward_vs_compute": reward_vs_compute,
    "accuracy_vs_budget": accuracy_vs_budget,
    "difference_vs_budget": difference_vs_budget,
    "spread_of_s_vs_step": spread_of_s_vs_step,
    "mechanism_by_algorithm": mechanism_by_algorithm,
    "entropy_vs_step": entropy_vs_step,
    "logodds_drift_vs_step": logodds_drift_vs_step,
    "kl_template_vs_step": kl_template_vs_step,
    "mechanism_vs_step": mechanism_vs_step,
    "group_size_ablation": group_size_ablation,
}


# The figures docs/results.md shows, per study: folder under docs/figures -> (its committed
# aggregate, the figures). PNG only, at a lower resolution than the workflow's, so each stays
# small (< 200 KB); tests/test_doc_figures.py redraws each and compares the bytes.
DOC_FIGURES: dict[str, tuple[str, tuple[str, ...]]] = {
    "tiny-default": ("results/aggregate", ("difference_vs_budget", "accuracy_vs_budget")),
    "tiny-study": ("results/tiny-study/aggregate",
                   ("difference_vs_budget", "accuracy_vs_budget", "mechanism_by_algorithm")),
    "mechanism-study": ("results/mechanism-study/aggregate",
                        ("reward_vs_compute", "difference_vs_budget", "accuracy_vs_budget")),
    "offpolicy-study": ("results/offpolicy-study/aggregate",
                        ("difference_vs_budget", "accuracy_vs_budget")),
    "offpolicy4-study": ("results/offpolicy4-study/aggregate",
                         ("difference_vs_budget", "accuracy_vs_budget")),
}
DOC_DPI = 110
DRAWN_WITH = "drawn-with.json"  # the matplotlib and FreeType that drew them: bytes depend on both


def drawn_with() -> dict[str, str]:
    from matplotlib import ft2font

    return {"matplotlib": mpl.__version__, "freetype": ft2font.__freetype_version__}


def write_doc_figures(root: Path, out: Path) -> list[Path]:
    """Every DOC_FIGURES entry as out/STUDY/NAME.png, from the aggregates under `root`, and
    out/DRAWN_WITH naming the versions that drew them."""
    paths = []
    with style_context(STYLE):
        for study, (aggregate, names) in DOC_FIGURES.items():
            agg = load_aggregate(root / aggregate)
            for name in names:
                fig, path = FIGURES[name](agg), out / study / f"{name}.png"
                atomic_file(path, lambda tmp, fig=fig: fig.savefig(
                    tmp, format="png", dpi=DOC_DPI, metadata=SAVE_METADATA["png"]))
                paths.append(path)
    versions = json.dumps(drawn_with(), indent=1) + "\n"
    atomic_file(out / DRAWN_WITH, lambda tmp: tmp.write_text(versions))
    return [*paths, out / DRAWN_WITH]


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
