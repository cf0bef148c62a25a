"""Every figure, rendered from each committed aggregate, reads: its legend lies outside every
axes' data area and inside the figure, each axis label states its unit, and each curve is one
algorithm pooled over models and seeds (one legend entry per algorithm, none per model)."""

from __future__ import annotations

import re

import pytest
from committed import committed
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.style import context as style_context

from repro.reporting.figures import FIGURES, STYLE
from repro.reporting.load import load_aggregate

AGGREGATES = {"aggregate": committed("results/aggregate"),
              "tiny-study": committed("results/tiny-study/aggregate"),
              "mechanism-study": committed("results/mechanism-study/aggregate"),
              "offpolicy-study": committed("results/offpolicy-study/aggregate")}
UNIT = re.compile(r"\(.+\)\s*$")  # "... (nats per token)": the unit in parentheses, last


@pytest.fixture(scope="module", params=list(AGGREGATES.values()),
                ids=list(AGGREGATES))
def rendered(request) -> dict[str, Figure]:
    agg = load_aggregate(request.param)
    figures = {}
    with style_context(STYLE):
        for name, build in FIGURES.items():
            fig = build(agg)
            FigureCanvasAgg(fig).draw()
            figures[name] = fig
    return {"agg": agg, "figures": figures}


def legend_problems(fig: Figure) -> list[str]:
    """Where a legend box overlaps an axes' data area or leaves the figure."""
    fig_box = fig.get_window_extent()
    problems = [f"a legend inside axes {ax.get_label() or i}" for i, ax in enumerate(fig.axes)
                if ax.get_legend() is not None]
    for legend in fig.legends:
        box = legend.get_window_extent()
        problems += [f"legend over axes {i}" for i, ax in enumerate(fig.axes)
                     if box.overlaps(ax.get_window_extent())]
        if not (fig_box.x0 <= box.x0 and box.x1 <= fig_box.x1 + 1 and fig_box.y0 <= box.y0
                and box.y1 <= fig_box.y1 + 1):
            problems.append("legend outside the figure")
    return problems


@pytest.mark.parametrize("name", list(FIGURES))
def test_each_figure_reads(rendered, name):
    fig, agg = rendered["figures"][name], rendered["agg"]
    if not fig.axes:  # a "no data" figure (an aggregate without those runs) has no axes
        assert fig.texts and fig.texts[0].get_text().startswith("no data"), name
        return
    assert fig.legends and not legend_problems(fig), legend_problems(fig)
    for ax in fig.axes:
        assert UNIT.search(ax.get_xlabel()), (name, ax.get_xlabel())
    first = fig.axes[0]
    assert UNIT.search(first.get_ylabel()) or first.get_yticklabels()[0].get_text(), name
    labels = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert len(labels) == len(set(labels)), labels
    assert not [label for label in labels for m in agg.models() if m in label], labels


def test_the_legend_check_can_fail():
    """A legend drawn over the data is caught."""
    with style_context(STYLE):
        fig = Figure(layout="constrained")
        ax = fig.add_subplot()
        ax.plot([0, 1], [0, 1], label="a")
        fig.legend(loc="center")
        FigureCanvasAgg(fig).draw()
    assert legend_problems(fig) == ["legend over axes 0"]
