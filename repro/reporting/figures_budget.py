"""The budget figures, one panel per source or condition (figures_data.budget_panels): what
held-out accuracy each arm reached over the training budget, and the quantity the verdicts are
about, each arm's paired difference from the panel's reference arm with the verdict engine's
interval. An arm evaluated at several fractions is a line through its points; an arm evaluated
at one fraction is a point, and a panel whose arms all have one fraction lists them side by
side. Arms at the same fraction sit slightly apart, so equal results stay visible."""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

from repro.reporting.figures_data import (
    BudgetPanel,
    Point,
    arm_order,
    budget_panels,
    differences,
    levels,
)
from repro.reporting.figures_style import Look, legend, looks, measure, no_data, title
from repro.reporting.load import Aggregate
from repro.reporting.study import INIT_FRAC
from repro.reporting.verdict_spec import START

DODGE = 0.018  # share of the budget between neighbouring arms at one fraction
PANEL_WIDTH, LEGEND_WIDTH, HEIGHT = 3.3, 2.3, 3.6
UNITS_NOTE = "bars: 95% CI, bootstrap\nover units ({unit})\nand problems"
NESTED_NOTE = ("bars: 95% CI, bootstrap\nover starts, units\n(start x RL seed) in\n"
               "them, and problems")


def _interval_note(panel: BudgetPanel) -> str:
    if panel.scope.clusters:
        return NESTED_NOTE
    return UNITS_NOTE.format(unit="seeds" if panel.scope.by_seed else "start x RL seed")


def _draw(ax: Axes, series: list[tuple[str, list[Point]]], look: dict[str, Look],
          start: float | None = None) -> bool:
    """Each arm's points with their intervals; lines only through arms with several
    fractions. On a budget axis (from `start`, else the first fraction) unless every arm has
    one fraction: then one slot per arm. Returns whether the axis is the budget."""
    on_budget = any(len(points) > 1 for _, points in series)
    n = len(series)
    for i, (arm, points) in enumerate(series):
        st = look[arm]
        x = (np.array([p.frac for p in points]) + DODGE * (i - (n - 1) / 2) if on_budget
             else np.full(len(points), float(i)))
        mean = np.array([p.mean for p in points])
        err = [mean - [p.lo for p in points], [p.hi for p in points] - mean]
        ax.errorbar(x, mean, yerr=err, color=st.colour, marker=st.marker, markersize=4,
                    linestyle=st.linestyle if len(points) > 1 else "none", linewidth=1.4,
                    capsize=2, elinewidth=1, label=arm)
    if on_budget:
        ax.set_xlabel("share of the training budget (%)")
        fracs = sorted({p.frac for _, points in series for p in points})
        ax.set_xticks([*([start] if start is not None else []), *fracs])
        ax.xaxis.set_major_formatter(PercentFormatter(1.0))
        left = fracs[0] if start is None else start
        ax.set_xlim(left - 0.08, 1.06)
    else:
        fracs = sorted({p.frac for _, points in series for p in points})
        ax.set_xticks(range(n), labels=[arm for arm, _ in series], rotation=30, ha="right",
                      fontsize=7)
        ax.set_xlim(-0.6, n - 0.4)
        ax.set_xlabel(f"arm (evaluated at {', '.join(f'{f:.0%}' for f in fracs)} "
                      "of the budget)")
    return on_budget


def _figure(panels: list[BudgetPanel]) -> tuple[Figure, list[Axes]]:
    """One panel per entry; each its own y scale (a source's effects can be ten times
    another's), so each has its tick labels."""
    fig = Figure(figsize=(PANEL_WIDTH * len(panels) + LEGEND_WIDTH, HEIGHT),
                 layout="constrained")
    return fig, list(np.atleast_1d(fig.subplots(1, len(panels))))


def difference_vs_budget(agg: Aggregate) -> Figure:
    """Does each arm beat its reference? arm - reference, paired per unit, at each fraction."""
    panels = budget_panels(agg)
    drawn = [(p, [(a, pts) for a in p.arms if (pts := differences(agg, p, a))]) for p in panels]
    drawn = [(p, series) for p, series in drawn if series]
    if not drawn:
        return no_data("no paired held-out evaluations")
    look = looks(arm_order(agg))
    fig, axes = _figure([p for p, _ in drawn])
    for ax, (panel, series) in zip(axes, drawn, strict=True):
        ax.axhline(0, color="0.3", linewidth=1, zorder=0)
        _draw(ax, series, look)
        ax.set_title(panel.title, fontsize=9)
    axes[0].set_ylabel(f"paired Δ, {measure(agg)} (points)")
    title(fig, agg, "Paired difference from the reference arm")
    legend(fig, "arm A: mean paired Δ\n" + _interval_note(drawn[0][0]))
    return fig


def accuracy_vs_budget(agg: Aggregate) -> Figure:
    """Held-out accuracy over the budget: the start at 0, each arm where it was evaluated."""
    panels = budget_panels(agg)
    drawn = []
    for p in panels:
        series = [(a, pts) for a in (p.reference, *p.arms) if (pts := levels(agg, p, a))]
        if series:
            drawn.append((p, series, levels(agg, p, START)))
    if not drawn:
        return no_data("no held-out evaluations of RL checkpoints")
    look = looks(arm_order(agg))
    fig, axes = _figure([p for p, _, _ in drawn])
    for ax, (panel, series, start) in zip(axes, drawn, strict=True):
        on_budget = any(len(points) > 1 for _, points in series)
        for s in start:
            if on_budget:
                ax.errorbar([0.0], [s.mean], yerr=[[s.mean - s.lo], [s.hi - s.mean]], fmt="s",
                            color="0.5", markerfacecolor="white", capsize=2,
                            markersize=4, label="start (SFT), at 0%")
            else:
                ax.axhspan(s.lo, s.hi, color="0.85", zorder=0, label="start (SFT): 95% CI")
        _draw(ax, series, look, INIT_FRAC if start and on_budget else None)
        ax.set_title(panel.title.split(":")[0], fontsize=9)
    axes[0].set_ylabel(f"{measure(agg)} (%)")
    title(fig, agg, "Held-out accuracy over the training budget")
    legend(fig, "mean over units\nand problems\n" + _interval_note(drawn[0][0]))
    return fig
