"""docs/pipeline.md's claim: pandas, polars and duckdb read the aggregate Parquet as it is.

Read the committed aggregate (results/aggregate/, the tiny default's) with each reader and
compare rows, columns and a numeric total with pyarrow's. All three come with the test install
(pandas through datasets, polars and duckdb in the `test` extra), so none of them may skip.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from committed import committed

AGGREGATE = committed("results/aggregate")
FILES = ["train_curves", "runs", "eval_problems", "eval_samples"]


def read_with(reader: str, path: Path) -> tuple[int, list[str], float]:
    """(rows, columns, sum of `run_seed`) as `reader` sees the file."""
    module = importlib.import_module(reader)
    if reader == "pandas":
        frame = module.read_parquet(path)
        return len(frame), list(frame.columns), float(frame["run_seed"].sum())
    if reader == "polars":
        frame = module.read_parquet(path)
        return frame.height, frame.columns, float(frame["run_seed"].sum())
    rel = module.sql(f"SELECT * FROM read_parquet('{path}')")
    total = module.sql(f"SELECT sum(run_seed) FROM read_parquet('{path}')").fetchall()[0][0]
    return len(rel.fetchall()), rel.columns, float(total)


@pytest.mark.parametrize("reader", ["pandas", "polars", "duckdb"])
@pytest.mark.parametrize("name", FILES)
def test_reader_sees_what_pyarrow_sees(reader, name):
    path = AGGREGATE / f"{name}.parquet"
    table = pq.read_table(path)
    assert table.num_rows > 0
    want = (table.num_rows, table.column_names, float(pc.sum(table["run_seed"]).as_py()))
    assert read_with(reader, path) == want
