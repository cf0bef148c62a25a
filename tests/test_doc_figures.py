"""The figures docs/results.md shows: each committed PNG is what `repro figures --docs` draws
from its study's committed aggregate, small, and shown on the page. Byte for byte under the
matplotlib and FreeType that drew them (docs/figures/drawn-with.json; the PNG carries no date or
version, the font is matplotlib's bundled DejaVu Sans); under other versions, which rasterise
text differently, the same size and an RMS pixel difference below PIXEL_TOLERANCE (of 255).
The budget figures give every arm of a panel its own colour and line style, draw an arm
evaluated at one fraction as a point, and keep one panel per source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from committed import committed, committed_root
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.style import context as style_context
from matplotlib.testing.compare import compare_images

from repro.reporting.figures import (
    DOC_FIGURES,
    DRAWN_WITH,
    FIGURES,
    STYLE,
    drawn_with,
    write_doc_figures,
)
from repro.reporting.load import load_aggregate

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "figures"
MAX_BYTES = 200_000
PIXEL_TOLERANCE = 6.0  # RMS over pixels and channels, 0-255 (matplotlib.testing.compare)


@pytest.fixture(scope="module")
def redrawn(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("figures")
    write_doc_figures(committed_root(tmp_path_factory.mktemp("root")), out)
    return out


@pytest.mark.parametrize("path", [f"{study}/{name}.png" for study, (_, names)
                                  in DOC_FIGURES.items() for name in names])
def test_each_committed_figure_is_what_its_aggregate_draws(redrawn, path):
    committed = DOCS / path
    assert committed.exists(), f"{committed} missing: run `repro figures --docs`"
    assert committed.stat().st_size < MAX_BYTES, (path, committed.stat().st_size)
    same_versions = json.loads((DOCS / DRAWN_WITH).read_text()) == drawn_with()
    if same_versions:
        assert committed.read_bytes() == (redrawn / path).read_bytes(), (
            f"{path} differs from what `repro figures --docs` draws from its aggregate")
    else:
        differs = compare_images(str(committed), str(redrawn / path), tol=PIXEL_TOLERANCE)
        assert differs is None, differs
    assert f"figures/{path}" in (ROOT / "docs" / "results.md").read_text(), path


def test_no_stray_figure_is_committed():
    shown = {f"{study}/{name}.png" for study, (_, names) in DOC_FIGURES.items()
             for name in names}
    assert {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.png")} == shown
    assert {p.name for p in DOCS.iterdir() if p.is_file()} == {DRAWN_WITH}


@pytest.mark.parametrize("study", ["tiny-study", "offpolicy-study"])
@pytest.mark.parametrize("name", ["difference_vs_budget", "accuracy_vs_budget"])
def test_budget_panels_tell_their_arms_apart(study, name):
    agg = load_aggregate(committed(DOC_FIGURES[study][0]))
    with style_context(STYLE):
        fig = FIGURES[name](agg)
        FigureCanvasAgg(fig).draw()
    titles = [ax.get_title() for ax in fig.axes]
    if study == "offpolicy-study":  # one panel per source
        assert [t.split(":")[0] for t in titles] == [f"source {s}" for s in
                                                     ("reuse", "stale", "bf16")], titles
    for ax in fig.axes:
        arms = [c for c in ax.containers if c.get_label() and not c.get_label().startswith("_")]
        looks = [(line.get_color(), line.get_linestyle()) for c in arms
                 for line in [c.lines[0]] if line.get_xdata().size > 1]
        assert len(looks) == len(set(looks)), (ax.get_title(), looks)
        for c in arms:  # one fraction: a point, no line
            if c.lines[0].get_xdata().size == 1:
                assert c.lines[0].get_linestyle() == "None", (ax.get_title(), c.get_label())
    if (study, name) == ("tiny-study", "difference_vs_budget"):
        # the ablations were evaluated at 100% only: points side by side
        assert "arm (evaluated at 100% of the budget)" in [ax.get_xlabel() for ax in fig.axes]
    assert "pooled over benchmarks" not in fig.axes[0].get_ylabel()  # one benchmark


@pytest.mark.parametrize("study,name", [(study, name) for study, (_, names)
                                        in DOC_FIGURES.items() for name in names])
def test_the_legend_clears_the_title_and_stays_on_the_canvas(study, name):
    """A one-panel figure once put its legend's heading over the figure title: the legend is
    drawn beside the axes, below the title, and inside the canvas."""
    agg = load_aggregate(committed(DOC_FIGURES[study][0]))
    with style_context(STYLE):
        fig = FIGURES[name](agg)
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
    renderer = canvas.get_renderer()
    page = fig.bbox
    for legend in fig.legends:
        box = legend.get_window_extent(renderer)
        assert page.x0 <= box.x0 and box.x1 <= page.x1 + 1 and page.y0 <= box.y0, (study, name)
        if fig._suptitle is not None:
            assert not box.overlaps(fig._suptitle.get_window_extent(renderer)), (study, name)
