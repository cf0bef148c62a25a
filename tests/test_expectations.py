"""The main job's last step (repro/reporting/expectations.py, issue 46): this run's aggregate
against the committed one, read from git; and the README's "What to expect on your machine",
whose ranges are that module's data.

Each summary runs in a temporary git repository whose HEAD holds the committed aggregate (as a
clone's does) and whose working tree holds the run to judge: the committed aggregate itself
(exact), the Intel Xeon's committed rerun (every number moved), or bad input.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from committed import committed, copy_committed
from typer.testing import CliRunner

from repro.cli import app
from repro.pipeline.layout import Layout
from repro.reporting import expectations as ex
from repro.reporting.load import load_aggregate

ROOT = Path(__file__).resolve().parents[1]
AGG = Layout("results").agg_dir  # results/aggregate
RESTORE = f"`git checkout -- {AGG}` restores them."


def section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:end]


def test_the_readme_states_the_ranges_the_summary_checks():
    expect = section((ROOT / "README.md").read_text(), "## What to expect on your machine")
    for line in ex.readme_lines():
        assert line in expect, line
    s, g = ex.RANGES["start"], ex.RANGES["grpo_gain"]
    results = " ".join((ROOT / "docs" / "results.md").read_text().split())
    assert f"~{s.lo:g}-{s.hi:g}% held out, a GRPO gain of {g.lo:+g} to {g.hi:+g} points" in results


def test_a_range_is_read_at_the_precision_the_readme_states_it():
    r = ex.Range(29, 33)
    assert [r.holds(x) for x in (28.4, 28.5, 28.9, 33.49, 33.5)] == [False, True, True, True,
                                                                     False]
    assert not ex.Range(42, 51, digits=1).holds(41.94) and ex.Range(42, 51, 1).holds(41.95)


def test_the_committed_numbers_are_the_verdict_tables():
    """The summary's committed GRPO gain and DFPO - GSPO are the committed verdict table's V and
    P1 (tests/fixtures/verdicts, written by the verdict engine), to the digit."""
    numbers = ex.headline_numbers(load_aggregate(committed(AGG)))
    table = (ROOT / "tests" / "fixtures" / "verdicts" / "aggregate" / "verdict.md").read_text()
    for key, pid in (("grpo_gain", "V"), ("paired", "P1")):
        n = numbers[key]
        text = f"Δ = {n.value:+.1f} [{n.lo:+.1f}, {n.hi:+.1f}]"
        assert re.search(rf"^\| {pid} \|.*{re.escape(text)}", table, re.M), (pid, text)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                   check=True, capture_output=True)


@pytest.fixture
def clone(tmp_path) -> Path:
    """A repository whose HEAD holds the committed aggregate, as a fresh clone's does."""
    repo = tmp_path / "clone"
    copy_committed(repo, AGG)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "committed aggregate")
    return repo


def _run_over(repo: Path, other: Path) -> None:
    """The working tree's aggregate replaced by `other`, as a run would replace it."""
    shutil.rmtree(repo / AGG)
    shutil.copytree(other, repo / AGG, copy_function=shutil.copyfile)


def test_the_committed_aggregate_is_exact(clone):
    lines, readable = ex.summary(clone, AGG)
    assert readable and lines[-1].startswith("Exact: every value equals the committed one")
    manifest = clone / AGG / "manifest.json"  # a rerun rewrites the files: exact, not the bytes
    manifest.write_text(manifest.read_text() + "\n")
    lines, readable = ex.summary(clone, AGG)
    assert lines[2].startswith("Exact: ") and lines[-1].endswith(RESTORE), lines


def test_another_cpus_run_lists_each_headline_against_its_range(clone):
    """The Xeon rerun: docs/results.md ("What reproduces exactly") reported its numbers from
    its own tables: start 43.75%, GRPO - start +29.3, DFPO-Min - GSPO -1.3; each inside the
    README's range (the start, 0.1 below the committed interval, is inside 42-51%)."""
    _run_over(clone, committed("results/rerun-intel-xeon/aggregate"))
    lines, readable = ex.summary(clone, AGG)
    text = "\n".join(lines)
    assert readable and "Not exact:" in text and "Intel(R) Xeon(R)" in text, text
    bullets = [ln for ln in lines if ln.startswith("- ")]
    assert len(bullets) == 3, text
    assert bullets[0].startswith("- SFT start accuracy (held out): 43.8%")
    assert bullets[0].endswith("inside the README's 42-51%")
    assert bullets[1].startswith("- GRPO gain over the start: +29.3 points")
    assert bullets[1].endswith("inside the README's +29 to +33 points")
    assert bullets[2].startswith("- DFPO vs GSPO, paired (dfpo_min - gspo): -1.3 points "
                                 "(committed -0.6 [-2.4, +1.5])")
    assert bullets[2].endswith("inside the committed interval")
    assert lines[-1].endswith(RESTORE)


def test_a_number_outside_its_range_is_said(clone, monkeypatch):
    _run_over(clone, committed("results/rerun-intel-xeon/aggregate"))
    narrow = {**ex.HEADLINES, "start": ex.Headline("SFT start accuracy (held out)", ex.START,
                                                   None, ex.Range(45, 51))}
    monkeypatch.setattr(ex, "HEADLINES", narrow)
    bullets = [ln for ln in ex.summary(clone, AGG)[0] if ln.startswith("- ")]
    assert bullets[0].endswith("OUTSIDE the README's 45-51%"), bullets


def _problem(lines: list[str], prefix: str) -> str:
    found = [ln for ln in lines if ln.startswith(prefix)]
    assert len(found) == 1, lines
    return found[0]


def test_a_missing_aggregate_file_is_one_line_naming_it(clone):
    (clone / AGG / "runs.parquet").unlink()
    lines, readable = ex.summary(clone, AGG)
    line = _problem(lines, "Cannot compare: ")
    assert not readable and f"{AGG}/runs.parquet: fails verification (missing)" in line
    assert lines[-1].endswith(RESTORE)


def test_a_truncated_aggregate_file_is_one_line_naming_it(clone):
    path = clone / AGG / "eval_problems.parquet"
    path.write_bytes(path.read_bytes()[:-1000])
    lines, readable = ex.summary(clone, AGG)
    line = _problem(lines, "Cannot compare: ")
    assert not readable and f"{AGG}/eval_problems.parquet: fails verification" in line


def test_another_studys_aggregate_is_not_comparable_in_one_line(clone):
    _run_over(clone, committed("results/tiny-study/aggregate"))
    lines, readable = ex.summary(clone, AGG)
    line = _problem(lines, "Not comparable: ")
    assert readable and f"{AGG}/runs.parquet is from another study" in line
    assert not [ln for ln in lines if ln.startswith("- ")]  # no headline numbers
    assert RESTORE in lines[-1]  # the committed files were replaced: never silently


def test_a_folder_git_does_not_hold_and_a_tarball_are_not_comparable(clone):
    shutil.copytree(clone / AGG, clone / "results" / "ci-smoke" / "aggregate")
    lines, readable = ex.summary(clone, "results/ci-smoke/aggregate")
    assert readable and "results/ci-smoke/aggregate is not committed" in _problem(
        lines, "Not comparable: ")
    assert "git checkout" not in "\n".join(lines)  # nothing committed there to restore
    shutil.rmtree(clone / ".git")
    lines, readable = ex.summary(clone, AGG)
    assert readable and "is not a git checkout" in _problem(lines, "Not comparable: ")


def test_the_command_writes_the_summary_and_fails_only_on_a_damaged_run(clone, monkeypatch):
    monkeypatch.chdir(clone)
    out = clone / "results" / "tables" / "expectations.md"
    result = CliRunner().invoke(app, ["expectations", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text() == result.output and "Exact:" in result.output
    (clone / AGG / "runs.parquet").write_bytes(b"not parquet")
    result = CliRunner().invoke(app, ["expectations", "--out", str(out)])
    assert result.exit_code == 1 and "Cannot compare: " in out.read_text()


def test_another_experiments_rerun_gets_no_ranges(clone, monkeypatch):
    """The README's ranges are the tiny default's: a rerun of another committed study (here the
    Xeon's, with the ranges said to be another experiment's) is told exact or not, no more."""
    _run_over(clone, committed("results/rerun-intel-xeon/aggregate"))
    monkeypatch.setattr(ex, "EXPERIMENT", "tiny-study")
    lines, readable = ex.summary(clone, AGG)
    assert readable and not [ln for ln in lines if ln.startswith("- ")], lines
    assert "ranges for the tiny default (experiment 'tiny-study') alone, not 'tiny'" in lines[2]
