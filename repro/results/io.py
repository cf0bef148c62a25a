"""Write and read result tables: schema-checked, nulls refused, atomic (temp file + rename).

pyarrow does not enforce `nullable=False` (a missing key becomes a null silently), so the
writer checks it; a partial file is never left under the final name.
"""

from __future__ import annotations

import functools
import json
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from repro import __version__
from repro.atomic import atomic_file
from repro.results.schemas import ADDED_COLUMNS, REDEFINED_COLUMNS


@functools.cache
def git_revision() -> str:
    """The source tree's commit (with '+dirty' if modified), or 'unknown' outside git.

    Once per process: the code a process runs is what it imported, and every table it writes
    carries this. Uncached, each table paid two git calls, and in a fresh clone `git status`
    re-reads every racily clean file (it may not refresh the index: no lock, below), 0.15-0.19 s
    a call: a test writing ~420 tables took 89 s instead of 9 in `.ci/run`."""
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        # --no-optional-locks: status must not take .git/index.lock to refresh the index; jobs
        # run it side by side, and one killed meanwhile (timeout, SIGKILL) left a stale lock.
        dirty = subprocess.run(["git", "--no-optional-locks", "-C", str(root), "status",
                                "--porcelain", "--untracked-files=no"],
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
    environment: Any = None,
) -> pa.Table:
    """Build a table from rows under `schema`, check nulls, write Parquet atomically."""
    path = Path(path)
    missing = [f.name for f in schema if rows and f.name not in rows[0]]
    if missing:
        raise ValueError(f"{path}: rows lack column(s) {missing} of schema "
                         f"{schema.metadata.get(b'schema_name')}")
    table = pa.Table.from_pylist(list(rows), schema=schema)
    written = write_arrow(table, schema, path, config=config, environment=environment)
    return table.replace_schema_metadata(written.metadata)


def write_arrow(
    tables: pa.Table | Iterable[pa.Table],
    schema: pa.Schema,
    path: str | Path,
    *,
    config: Mapping[str, Any] | None = None,
    environment: Any = None,
) -> pa.Schema:
    """Write one table, or chunks in order, under `schema`: nulls checked, provenance metadata,
    atomic. Chunks are streamed (an aggregate of many files never sits in memory at once); a
    failing chunk leaves no file. `environment` (JSON), when given, is stored under that key
    (the aggregate: what its jobs ran on). Returns the written schema (with its metadata)."""
    path = Path(path)
    meta = dict(schema.metadata or {})
    meta[b"repro_version"] = __version__.encode()
    meta[b"git_revision"] = git_revision().encode()
    meta[b"config"] = json.dumps(config or {}, sort_keys=True, default=str).encode()
    if environment is not None:
        meta[b"environment"] = json.dumps(environment, sort_keys=True).encode()
    written = schema.with_metadata(meta)
    chunks = [tables] if isinstance(tables, pa.Table) else tables

    def write(tmp: Path) -> None:
        with pq.ParquetWriter(tmp, written, compression="zstd") as writer:
            for chunk in chunks:
                writer.write_table(_checked(chunk, written, path))

    atomic_file(path, write)
    return written


def _checked(table: pa.Table, schema: pa.Schema, path: Path) -> pa.Table:
    """`table` under `schema` (metadata included), refusing other columns or nulls in
    non-nullable ones (pyarrow does not enforce `nullable=False` itself)."""
    if not table.schema.equals(schema, check_metadata=False):
        name = schema.metadata.get(b"schema_name")
        raise ValueError(f"{path}: table differs from schema {name!r}:\n"
                         f"{table.schema}\n!=\n{schema}")
    for field in schema:
        if not field.nullable and table.column(field.name).null_count:
            raise ValueError(f"{path}: column {field.name!r} is not nullable but has nulls")
    return table.replace_schema_metadata(schema.metadata)


def read_table(path: str | Path, schema: pa.Schema) -> pa.Table:
    """Read a result file and check it has exactly the expected columns and types (a file
    written before the schema gained its ADDED_COLUMNS gets them as NaN)."""
    table = _without_redefined_columns(_with_added_columns(pq.read_table(path), schema), schema)
    if not table.schema.equals(schema, check_metadata=False):
        raise ValueError(f"{path}: schema differs from {schema.metadata.get(b'schema_name')!r}:\n"
                         f"{table.schema}\n!=\n{schema}")
    return table


def _without_redefined_columns(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with the columns whose meaning changed after its file's schema version
    (REDEFINED_COLUMNS) replaced by NaN, so an old file never passes for the new quantity."""
    meta = table.schema.metadata or {}
    redefined = REDEFINED_COLUMNS.get((schema.metadata or {}).get(b"schema_name", b"").decode(), {})
    version = meta.get(b"schema_version", b"")
    for name, since in redefined.items():
        if name in table.column_names and version.isdigit() and int(version) < since:
            nan = pa.array([float("nan")] * table.num_rows, pa.float64())
            table = table.set_column(table.column_names.index(name),
                                     table.schema.field(name), nan)
    return table


def _with_added_columns(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with the schema's later-added float columns filled with NaN, in schema order,
    when exactly those are missing; otherwise unchanged (the caller's check then decides)."""
    added = ADDED_COLUMNS.get((schema.metadata or {}).get(b"schema_name", b"").decode(), ())
    missing = [name for name in added if name not in table.column_names]
    if not missing or sorted(table.column_names + missing) != sorted(schema.names):
        return table
    nan = pa.array([float("nan")] * table.num_rows, pa.float64())
    for name in missing:
        table = table.append_column(pa.field(name, pa.float64(), nullable=False), nan)
    return table.select(schema.names)
