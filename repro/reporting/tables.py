"""`repro tables`: every table as NAME.md and NAME.tex, from the aggregate Parquet alone (plus
the paper's reference Parquet for the `paper` table). All tables are built before any file is
written, and each file is written atomically.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from repro.reporting.load import Aggregate, load_aggregate
from repro.reporting.render import Table, write_report
from repro.reporting.tables_eval import ablation_tables, main_table
from repro.reporting.tables_paper import paper_table
from repro.reporting.tables_train import compute_table, mechanism_table
from repro.reporting.verdict import verdict_table
from repro.results import PAPER_REFERENCE, read_table

TABLES: dict[str, Callable[[Aggregate], list[Table]]] = {
    "main": main_table,
    "compute": compute_table,
    "mechanism": mechanism_table,
    "ablations": ablation_tables,
    "verdict": verdict_table,
}


def write_tables(aggregate: Path, out: Path, paper: Path | None = None) -> list[Path]:
    """Write the tables under `out`; with `paper` (a PAPER_REFERENCE file) also paper.md/.tex."""
    agg = load_aggregate(aggregate)
    built = {name: build(agg) for name, build in TABLES.items()}
    if paper is not None:
        built["paper"] = paper_table(agg, read_table(paper, PAPER_REFERENCE))
    return [path for name, tables in built.items() for path in write_report(out, name, tables)]
