"""`repro tables`: every table as NAME.md and NAME.tex, from the aggregate Parquet alone (plus
the paper's reference Parquet for the `paper` table). All tables are built before any file is
written, and each file is written atomically. Each file's last table ends with the environment
its jobs ran on (packages, CPU kernels, threads, CPU), since exact numbers depend on it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq

from repro.reporting.aggregate import RUNS_OUT
from repro.reporting.load import Aggregate, load_aggregate
from repro.reporting.render import Table, write_report
from repro.reporting.tables_budget import budget_table
from repro.reporting.tables_eval import ablation_tables, main_table
from repro.reporting.tables_paper import paper_table
from repro.reporting.tables_train import compute_table, mechanism_table
from repro.reporting.verdict import secondary_tables, verdict_tables
from repro.reporting.verdict_spec import spec_for
from repro.results import PAPER_REFERENCE, read_table
from repro.results.environment import summary

TABLES: dict[str, Callable[[Aggregate], list[Table]]] = {
    "main": main_table,
    "compute": compute_table,
    "mechanism": mechanism_table,
    "ablations": ablation_tables,
    "verdict": verdict_tables,  # the rules of the experiment's predictions file
    # the same rules read with a nested bootstrap, where the file dates that secondary reading
    "verdict_nested": lambda agg: secondary_tables(agg, "nested"),
    "budget": budget_table,
}
OPTIONAL = {"verdict_nested"}  # written only when not empty (not a declared workflow output)


def write_tables(aggregate: Path, out: Path, paper: Path | None = None) -> list[Path]:
    """Write the tables under `out`; with `paper` (a PAPER_REFERENCE file) also paper.md/.tex."""
    agg = load_aggregate(aggregate)
    spec_for(agg.study.experiment)  # a predictions file that cannot be tested stops us first
    built = {name: build(agg) for name, build in TABLES.items()}
    if paper is not None:
        built["paper"] = paper_table(agg, read_table(paper, PAPER_REFERENCE))
    footer = environment_notes(aggregate)
    return [path for name, tables in built.items() if tables or name not in OPTIONAL
            for path in write_report(out, name, with_footer(tables, footer))]


def with_footer(tables: list[Table], footer: list[str]) -> list[Table]:
    """`tables` with `footer` added to the last one's notes."""
    if not tables:
        return tables
    return [*tables[:-1], dataclasses.replace(tables[-1], notes=[*tables[-1].notes, *footer])]


def environment_notes(aggregate: Path) -> list[str]:
    """Footer lines: each distinct environment the aggregate's jobs recorded, with job counts."""
    meta = pq.read_schema(aggregate / RUNS_OUT).metadata or {}
    if b"environment" not in meta:
        return ["Environment: not recorded (aggregated before jobs recorded it)."]
    counts: dict[str, int] = {}
    for entry in json.loads(meta[b"environment"]):
        line = summary(entry["environment"]) if entry["environment"] else "not recorded"
        counts[line] = counts.get(line, 0) + entry["jobs"]
    return [f"Environment ({n} job{'s' if n != 1 else ''}): {line}."
            for line, n in sorted(counts.items(), key=lambda kv: -kv[1])]
