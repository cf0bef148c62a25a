"""docs/results.md's dated nested re-readings of studies 2 and 3 against the engine: each row's
registered and nested intervals and its nested verdict are the ones `repro tables` computes from
the committed aggregate (verdict.md and verdict_nested.md). A page that drifts fails."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from repro.reporting.load import load_aggregate
from repro.reporting.verdict import verdict_tables_of
from repro.reporting.verdict_spec import spec_for

ROOT = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?")
READINGS = {"mechanism-study": "### Study 2 re-read with nested intervals",
            "offpolicy-study": "### Study 3 re-read with nested intervals"}


def page_rows(heading: str) -> list[list[str]]:
    text = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    section = text.split(heading)[1].split("\n#")[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.startswith("|") and "---" not in line]
    return rows[1:]


@pytest.mark.parametrize("study", sorted(READINGS))
def test_the_nested_reading_on_the_page_is_the_engines(study):
    agg = load_aggregate(ROOT / "results" / study / "aggregate")
    spec = spec_for(agg.study.experiment)
    assert "nested" in spec.secondary and spec.estimator == "flat"
    flat, nested = (verdict_tables_of(agg, spec, e)[0] for e in ("flat", "nested"))
    assert "Secondary analysis of 2026-12-05" in nested.notes[-1]
    width = len(flat.header) - 3  # the block column(s) and id
    engine = {tuple(f[:width]): (f[-2], n[-2], n[-1])
              for f, n in zip(flat.rows, nested.rows, strict=True)}
    rows = page_rows(READINGS[study])
    assert rows, study
    for row in rows:
        key = tuple(row[:width])
        flat_numbers, nested_numbers, verdict = engine[key]
        assert set(NUMBER.findall(row[-3])) <= set(NUMBER.findall(flat_numbers)), (key, row)
        assert set(NUMBER.findall(row[-2])) <= set(NUMBER.findall(nested_numbers)), (key, row)
        assert row[-1] == verdict, (key, row[-1], verdict)


def test_the_engine_nests_study3s_units_in_their_start():
    """Study 3's reuse Q1 (final avg@k twin), recomputed outside the engine: the paired
    [units, problems] matrices, each unit's start taken from its key, the stats function with
    those clusters. The engine's nested numbers are these; the flat ones are not."""
    import numpy as np

    from repro.evaluation.stats import paired_seed_bootstrap
    from repro.reporting.verdict_metrics import Part, Scope, final_scores

    agg = load_aggregate(ROOT / "results" / "offpolicy-study" / "aggregate")
    scope = Scope((Part(tuple(agg.models()), "{arm}-reuse"),), by_seed=False)
    a, b = (final_scores(agg, scope, arm) for arm in ("dfpo_min_prod", "gspo_fair"))
    units = sorted(set(a) & set(b))
    problems = sorted(set.intersection(*(set(a[u]) & set(b[u]) for u in units)))
    x, y = (np.array([[side[u][p] for p in problems] for u in units]) for side in (a, b))
    test = paired_seed_bootstrap(x, y, clusters=[u.rsplit("/", 1)[0] for u in units])
    printed = f"{100 * test['diff']:+.1f} [{100 * test['lo']:+.1f}, {100 * test['hi']:+.1f}]"
    spec = spec_for(agg.study.experiment)
    rows = {(r[0], r[1]): r[-2] for r in verdict_tables_of(agg, spec, "nested")[0].rows}
    flat = {(r[0], r[1]): r[-2] for r in verdict_tables_of(agg, spec)[0].rows}
    assert f"final avg@k {printed} points" in rows["reuse", "Q1"], (printed, rows["reuse", "Q1"])
    assert f"final avg@k {printed} points" not in flat["reuse", "Q1"]
