"""`repro report`: every data table of docs/results.md, and the README's findings table, sits
between `<!-- repro report -->` fences and is what the verdict engine computes from the
committed aggregates. A page that
drifts from its aggregates fails here with the diff a rerun would make; a number deleted
inside a fence comes back on a rerun; the prose outside the fences stays as written; an
aggregate that lacks a table stops the run with one line naming the table and the study, and
the page is left as it was."""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest
from committed import committed, committed_root, copy_committed
from typer.testing import CliRunner

from repro.cli import app
from repro.reporting import report
from repro.reporting.report_sections import Store

ROOT = Path(__file__).resolve().parents[1]
PAGE = "docs/results.md"


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, dict[str, str]]:
    store = Store(committed_root(tmp_path_factory.mktemp("root")))
    return {page: report.build(store, sections, page)
            for page, sections in report.SECTIONS.items()}


@pytest.fixture(scope="module")
def built(pages) -> dict[str, str]:
    return pages[PAGE]


@pytest.mark.parametrize("page", list(report.SECTIONS))
def test_the_committed_pages_are_what_repro_report_writes(pages, page):
    committed = (ROOT / page).read_text()
    regenerated = report.fill(committed, pages[page], page)
    if regenerated != committed:
        diff = "".join(difflib.unified_diff(
            committed.splitlines(keepends=True), regenerated.splitlines(keepends=True),
            f"{page} (committed)", f"{page} (repro report)"))
        pytest.fail(f"{page} differs from its aggregates; run `repro report`:\n{diff}")


def test_a_deleted_number_comes_back_and_the_prose_stays(built):
    committed = (ROOT / PAGE).read_text()
    number = "+22.3 [+19.3, +25.5]"  # study 1's V row, inside its fence
    assert committed.count(number) == 1
    prose = "What this says, bad news first:"
    edited = committed.replace(number, "").replace(prose, prose + " EDITED")
    restored = report.fill(edited, built, PAGE)
    assert number in restored and prose + " EDITED" in restored
    assert restored == committed.replace(prose, prose + " EDITED")


@pytest.mark.parametrize("change,message", [
    (lambda t: t.replace("<!-- repro report: study-2-regime -->\n", "", 1),
     "not closed"),
    (lambda t: t.replace("repro report: study-2-regime", "repro report: study-9", 1)
     .replace("<!-- repro report: study-2-regime -->", "", 1),
     "unknown section 'study-9'; no fence for section 'study-2-regime'"),
])
def test_a_broken_fence_is_named(built, change, message):
    with pytest.raises(report.ReportError, match=message):
        report.fill(change((ROOT / PAGE).read_text()), built, PAGE)


def workspace(tmp_path: Path) -> Path:
    """A copy of the page beside links to the committed results and config."""
    (tmp_path / "docs").mkdir()
    for page in report.SECTIONS:
        shutil.copy(ROOT / page, tmp_path / page)
    (tmp_path / "results").symlink_to(committed("results"))
    (tmp_path / "config").symlink_to(ROOT / "config")
    return tmp_path


def test_an_aggregate_without_a_table_names_it_and_leaves_the_page(tmp_path, monkeypatch):
    root = workspace(tmp_path)
    (root / "results").unlink()
    copy_committed(root, "results/mechanism-study")
    for other in ("aggregate", "tiny-study", "offpolicy-study", "offpolicy-pilot"):
        (root / "results" / other).symlink_to(committed(f"results/{other}"))
    (root / "results" / "mechanism-study" / "aggregate" / "eval_problems.parquet").unlink()
    before = {page: (root / page).read_bytes() for page in report.SECTIONS}
    monkeypatch.chdir(root)
    result = CliRunner().invoke(app, ["report"])
    assert result.exit_code == 2
    assert result.output.strip() == (
        "repro report: docs/results.md, section study-2-verdicts: study 2's aggregate "
        "results/mechanism-study/aggregate lacks its eval_problems table "
        "(eval_problems.parquet); the page is unchanged")
    assert {page: (root / page).read_bytes() for page in report.SECTIONS} == before


@pytest.mark.slow
def test_check_prints_a_readable_diff_and_a_rerun_restores_the_page(tmp_path, monkeypatch):
    """End to end through the CLI on a copy: a changed verdict number is a diff naming the
    page, `repro report` puts it back."""
    root = workspace(tmp_path)
    page = root / PAGE
    committed = page.read_text()
    page.write_text(committed.replace("+9.4 [+7.0, +11.8]", "+9.9 [+7.0, +11.8]", 1))
    monkeypatch.chdir(root)
    checked = CliRunner().invoke(app, ["report", "--check"])
    assert checked.exit_code == 1
    assert "--- docs/results.md (committed)" in checked.output
    assert "-| P1 |" in checked.output and "+9.9 [+7.0" in checked.output
    assert CliRunner().invoke(app, ["report"]).exit_code == 0
    assert page.read_text() == committed
