"""Study 3's page against its committed aggregate (docs/results.md, "Study 3"): the verdict
table's numbers are the verdict engine's, and the regime table (the dose each source gave, how
far Min-Replace moved the weights, how much the fair GSPO clipped) is recomputed from the train
curves. A page that drifts from the aggregate fails."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from committed import committed

ROOT = Path(__file__).resolve().parents[1]
AGG = committed("results/offpolicy-study/aggregate")
HEADING = "## Study 3: realistic off-policy sources"
NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?")


def section() -> str:
    text = (ROOT / "docs" / "results.md").read_text()
    return text.split(HEADING)[1].split("\n## ")[0]


def tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table of `text`: its rows (header first, the --- line dropped) as cells."""
    found, current = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            if "---" not in line:
                current.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif current:
            found.append(current)
            current = []
    return found


def table_with(*header_start: str) -> list[list[str]]:
    """The section's first table whose header starts with these cells."""
    return next(t for t in tables(section()) if tuple(t[0][:len(header_start)]) == header_start)


def sources() -> list[str]:
    """Study 3's sources: its predictions file's subsets (the registry holds more)."""
    from repro.reporting.verdict_spec import load_spec

    spec = load_spec(ROOT / "repro" / "reporting" / "predictions" / "preregistration-3.yaml")
    return [subset.name for subset in spec.subsets]


def regime() -> dict[str, list[str]]:
    """source -> the regime table's cells, computed from the aggregate's train curves: means
    over every step of every unit."""
    curves = pq.read_table(AGG / "train_curves.parquet").to_pandas()
    mean = curves.groupby("run_algo")[["s_spread_product", "s_spread", "w_shift", "clip_frac",
                                       "log_ratio_mean", "reward_mean"]].mean()
    rows = {}
    for s in sources():
        dfpo, gspo = mean.loc[f"dfpo_min_prod-{s}"], mean.loc[f"gspo_fair-{s}"]
        rows[s] = [s, f"{dfpo.s_spread_product:.1%}", f"{dfpo.s_spread:.2%}",
                   f"{dfpo.w_shift:.1%}", f"{gspo.clip_frac:.1%}", f"{gspo.log_ratio_mean:.1e}"]
    return rows


def test_the_regime_table_is_the_aggregates():
    table = table_with("source (dose)")
    assert {row[0]: row for row in table[1:]} == regime()


@pytest.fixture(scope="module")
def engine() -> dict[tuple[str, str], tuple[str, str]]:
    from repro.reporting.load import load_aggregate
    from repro.reporting.verdict import verdict_tables

    table = verdict_tables(load_aggregate(AGG))[0]
    return {(row[0], row[1]): (row[-2], row[-1]) for row in table.rows}


def test_the_verdict_table_shows_the_engines_numbers_and_words(engine):
    table = table_with("source", "id")
    shown = {(row[0], row[1]): row for row in table[1:]}
    assert set(shown) == set(engine)
    for key, row in shown.items():
        numbers, verdict = engine[key]
        assert row[-1].replace("*", "") == verdict.split(" (")[0] or row[-1].replace(
            "*", "") == verdict, (key, row[-1], verdict)
        assert set(NUMBER.findall(row[-2])) <= set(NUMBER.findall(numbers)), (key, row, numbers)


def test_the_starts_are_three_independent_stage1_models():
    runs = pq.read_table(AGG / "runs.parquet").to_pandas()
    assert sorted(runs.run_model.unique()) == ["tiny-preamble-s1", "tiny-preamble-s2",
                                                "tiny-preamble-s3"]
    main = runs[runs.run_algo.str.startswith(("gspo_fair", "dfpo_min_prod", "dfpo_groupmean"))]
    assert main.groupby("run_algo").size().eq(6).all()  # 3 starts x RL seeds 0 and 1
