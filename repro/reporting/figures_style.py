"""What every repro figure shares: the style sheet, the save settings that make a PNG's bytes a
function of its data alone, each arm's look (colour, line style, marker: unique within a
figure of up to ten arms), the title and the one legend outside the axes."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from matplotlib.figure import Figure

if TYPE_CHECKING:
    from repro.reporting.load import Aggregate

STYLE = Path(__file__).with_name("paper.mplstyle")
# no date, no version stamp: the same aggregate gives the same bytes
SAVE_METADATA = {"pdf": {"CreationDate": None}, "png": {"Software": None}}
# Okabe-Ito without its yellow (weak on white), then wine, grey and brown: ten colours
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000",
           "#882255", "#999999", "#8C564B")
LINESTYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Look:
    colour: str
    linestyle: str
    marker: str


def looks(arms: Sequence[str]) -> dict[str, Look]:
    """Arm -> its look, by position in `arms`: colour, line style and marker each step with
    the position, so no two of the first ten arms share a colour and neighbours differ in
    line style and marker as well (readable in grey print)."""
    order = list(dict.fromkeys(arms))
    return {a: Look(PALETTE[i % len(PALETTE)], LINESTYLES[i % len(LINESTYLES)],
                    MARKERS[i % len(MARKERS)]) for i, a in enumerate(order)}


def measure(agg: Aggregate) -> str:
    """What an accuracy axis measures: avg@k and the benchmark, or "pooled over benchmarks"
    where there are several."""
    ks = sorted({k for by in agg.k.values() for k in by})
    benches = agg.benchmarks()
    where = benches[0] if len(benches) == 1 else "pooled over benchmarks"
    return f"held-out avg@{'/'.join(map(str, ks))}, {where}"


def no_data(what: str) -> Figure:
    log.warning("figure without data: %s", what)
    fig = Figure(figsize=(5.5, 2.0))
    fig.text(0.5, 0.5, f"no data: {what}", ha="center", va="center")
    return fig


def title(fig: Figure, agg: Aggregate, question: str) -> None:
    fig.suptitle(f"{question} ({agg.study.experiment}, G = {agg.study.main_group_size})",
                 fontsize=9)


def legend(fig: Figure, heading: str) -> None:
    """One legend for the figure, right of the axes: each label once, in drawing order; its
    heading says what the marks and intervals are."""
    found: dict[str, object] = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if not label.startswith("_"):
                found.setdefault(label, handle)
    if found:
        fig.legend(list(found.values()), list(found), loc="outside right center", title=heading,
                   title_fontsize=8, alignment="left")
