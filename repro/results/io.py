"""Write and read result tables: schema-checked, nulls refused, atomic (temp file + rename).

pyarrow does not enforce `nullable=False` (a missing key becomes a null silently), so the
writer checks it; a partial file is never left under the final name.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from repro import __version__
from repro.atomic import atomic_file


def git_revision() -> str:
    """The source tree's commit (with '+dirty' if modified), or 'unknown' outside git."""
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def write_table(
    rows: Sequence[Mapping[str, Any]],
    schema: pa.Schema,
    path: str | Path,
    *,
    config: Mapping[str, Any] | None = None,
) -> pa.Table:
    """Build a table from rows under `schema`, check nulls, write Parquet atomically."""
    path = Path(path)
    missing = [f.name for f in schema if rows and f.name not in rows[0]]
    if missing:
        raise ValueError(f"{path}: rows lack column(s) {missing} of schema {schema.metadata.get(b'schema_name')}")
    table = pa.Table.from_pylist(list(rows), schema=schema)
    for field in schema:
        if not field.nullable and table.column(field.name).null_count:
            raise ValueError(f"{path}: column {field.name!r} is not nullable but has nulls")
    meta = dict(schema.metadata or {})
    meta[b"repro_version"] = __version__.encode()
    meta[b"git_revision"] = git_revision().encode()
    meta[b"config"] = json.dumps(config or {}, sort_keys=True, default=str).encode()
    table = table.replace_schema_metadata(meta)
    atomic_file(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))
    return table


def read_table(path: str | Path, schema: pa.Schema) -> pa.Table:
    """Read a result file and check it has exactly the expected columns and types."""
    table = pq.read_table(path)
    if not table.schema.equals(schema, check_metadata=False):
        raise ValueError(f"{path}: schema differs from {schema.metadata.get(b'schema_name')!r}:\n"
                         f"{table.schema}\n!=\n{schema}")
    return table
