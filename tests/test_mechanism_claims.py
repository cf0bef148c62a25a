"""The mechanism study's claims beyond its verdict table, recomputed from the committed
aggregate (issue 38's correction of the record): the exploratory comparisons, the t-intervals
over starts, the verdicts without the unit that the pilot overlapped, the evaluation sampling,
and the erratum appended below an unchanged pre-registration.

Each number is read from the page that shows it (docs/results.md, "Study 2"; the README's
findings table for its exploratory row) and compared with the one computed here, so a page that
drifts from the aggregate fails.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from committed import committed
from presets import resolved
from scipy import stats

from repro.reporting.load import load_aggregate
from repro.reporting.scores import compare
from repro.reporting.verdict_metrics import auc_units

ROOT = Path(__file__).resolve().parents[1]
AGG = committed("results/mechanism-study/aggregate")
README, RESULTS = ROOT / "README.md", ROOT / "docs" / "results.md"
PREREG = "docs/preregistration-2.md"
PREREG_COMMIT = "27bc508"  # the pre-registration as committed before the study's RL runs
PILOT_UNIT = "tiny-preamble-0/0"

# (A, B, the label docs/results.md's exploratory table gives the row)
EXPLORATORY = (
    ("dfpo_orth_prod", "dfpo_none_prod", "Orth-Proj - identity"),
    ("dfpo_orth_prod", "dfpo_min_prod", "Orth-Proj - Min-Replace"),
    ("dfpo_min", "dfpo_min_prod", "Min-Replace, mean - product reading"),
)
# (prediction, A, B) of the main family whose per-start and without-pilot numbers are shown
MAIN = (("P1", "dfpo_min_prod", "gspo"), ("P2", "dfpo_min_prod", "dfpo_none_prod"),
        ("P3", "dfpo_min_prod", "dfpo_global_prod"))


@pytest.fixture(scope="module")
def agg():
    return load_aggregate(AGG)


def prose(path: Path) -> str:
    """The page with its line breaks and indentation folded into single spaces."""
    return " ".join(path.read_text().split())


def ci(diff: float, lo: float, hi: float) -> str:
    return f"{diff:+.1f} [{lo:+.1f}, {hi:+.1f}]"


def test_the_exploratory_comparisons_are_the_aggregates(agg):
    results = RESULTS.read_text()
    for a, b, label in EXPLORATORY:
        c = compare(*auc_units(agg, a, b))
        row = next(ln.strip() for ln in results.splitlines()
                   if ln.strip().startswith(f"| {label} ("))
        assert row.split("|")[2].strip() == f"{ci(c.diff, c.lo, c.hi)}, {c.seeds}", row
        assert ci(c.diff, c.lo, c.hi) in prose(RESULTS), label


def test_the_readmes_exploratory_finding_is_the_aggregates(agg):
    """The findings table's one exploratory row: Orth-Proj, which also cancels, against the
    identity transform."""
    a, b, _ = EXPLORATORY[0]
    c = compare(*auc_units(agg, a, b))
    rows = [ln for ln in README.read_text().splitlines()
            if ln.startswith("| ") and "study 2, exploratory" in ln]
    assert len(rows) == 1, rows
    effect = rows[0].strip("|").split("|")[2].strip()
    assert effect.startswith(ci(c.diff, c.lo, c.hi) + " "), (effect, ci(c.diff, c.lo, c.hi))
    assert "Orth-Proj vs no transform" in rows[0]


def per_start_t_interval(agg, a: str, b: str) -> tuple[float, float]:
    """95% t-interval of the mean over starts of each start's paired AUC difference."""
    x, y = auc_units(agg, a, b)
    by_start: dict[str, list[float]] = {}
    for unit in sorted(set(x) & set(y)):
        problems = sorted(set(x[unit]) & set(y[unit]))
        d = np.mean([x[unit][p] - y[unit][p] for p in problems])
        by_start.setdefault(unit.split("/")[0], []).append(100 * d)
    means = np.array([np.mean(v) for v in by_start.values()])
    assert len(means) == 3, by_start
    half = stats.t.ppf(0.975, len(means) - 1) * means.std(ddof=1) / np.sqrt(len(means))
    return means.mean() - half, means.mean() + half


def test_the_t_intervals_over_starts_are_the_aggregates(agg):
    results = prose(RESULTS)
    for pid, a, b in MAIN:
        lo, hi = per_start_t_interval(agg, a, b)
        assert f"{pid} [{lo:+.1f}, {hi:+.1f}]" in results, (pid, lo, hi)


def test_dropping_the_pilots_unit_keeps_the_verdicts_shown(agg):
    results = prose(RESULTS)
    for pid, a, b in MAIN:
        x, y = auc_units(agg, a, b)
        assert PILOT_UNIT in x and PILOT_UNIT in y
        for side in (x, y):
            side.pop(PILOT_UNIT)
        c = compare(x, y)
        assert c.seeds == 5
        shown = f"{pid} {ci(c.diff, c.lo, c.hi)}"
        assert shown in results, shown
        assert (c.lo > 0) == (pid == "P1") and (c.hi < -1) == (pid != "P1")  # verdicts as before


def test_the_evaluation_sampling_is_what_the_erratum_says():
    t = pq.read_table(AGG / "eval_problems.parquet", columns=["temperature", "top_p", "top_k"])
    got = {c: pc.unique(t[c]).to_pylist() for c in t.column_names}
    assert got == {"temperature": [0.6], "top_p": [0.95], "top_k": [20]}
    assert "T 0.6, top-p 0.95, top-k 20" in (ROOT / PREREG).read_text()


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                    reason="needs the project's git history (a clone, not an unpacked copy)")
def test_the_preregistration_is_unchanged_above_its_dated_erratum():
    shown = subprocess.run(["git", "show", f"{PREREG_COMMIT}:{PREREG}"], cwd=ROOT,
                           capture_output=True, text=True)
    if shown.returncode:
        pytest.skip(f"commit {PREREG_COMMIT} not in this clone's history (shallow clone?)")
    now = (ROOT / PREREG).read_text()
    assert now.startswith(shown.stdout)
    assert re.match(r"\n## Erratum, \d{4}-\d{2}-\d{2} \(after the study ran",
                    now[len(shown.stdout):])


def test_the_task_mix_is_what_the_erratum_says():
    """The preset as committed with the aggregate resolves to both tasks at equal weight, which
    the erratum and docs/results.md disclose."""
    config = resolved("mechanism-study.yaml")
    assert config["train"]["tasks"] == {"synth-rule": 1.0, "synth-preamble": 1.0}
    for text in ((ROOT / PREREG).read_text(), (ROOT / "docs" / "results.md").read_text()):
        assert "probability 1/2" in text
