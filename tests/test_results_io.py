"""Result tables: schema round trip, nulls refused, atomic writes, provenance metadata."""

from __future__ import annotations

import json
import subprocess

import pyarrow.parquet as pq
import pytest

from repro.results import EVAL_PROBLEMS, read_table, write_table


def row(**changes):
    base = {
        "model": "m", "checkpoint": "final", "benchmark": "synth-aime", "revision_hash": "abc",
        "k": 4, "temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.0,
        "max_new_tokens": 64, "seed": 0, "engine": "hf", "grader_version": "1",
        "grader_compat": "default", "sandbox_mode": "none", "problem_id": "1", "problem_hash": "h",
        "n": 4, "c": 1,
        "avg": 0.25, "pass_at_k": 1.0, "truncated_frac": 0.0, "no_answer_frac": 0.0,
        "grader_errors": 0,
    }
    return base | changes


def test_round_trip_with_metadata(tmp_path):
    path = tmp_path / "p.parquet"
    write_table([row(), row(problem_id="2")], EVAL_PROBLEMS, path, config={"k": 4})
    table = read_table(path, EVAL_PROBLEMS)
    assert table.num_rows == 2
    meta = pq.read_schema(path).metadata
    assert json.loads(meta[b"config"]) == {"k": 4}
    assert meta[b"schema_name"] == b"eval_problems" and b"git_revision" in meta
    assert list(tmp_path.iterdir()) == [path]  # no temp file left behind


def test_a_process_asks_git_for_its_revision_once(tmp_path, monkeypatch):
    """Every table records the revision; git is asked once per process, not per table (in a
    fresh clone a `git status` costs ~0.17 s, and a job or test writes hundreds of tables)."""
    from repro.results import io

    io.git_revision.cache_clear()  # a fresh process, as it were
    calls = []
    run = subprocess.run
    monkeypatch.setattr(io.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or run(cmd, **kw))
    for i in range(3):
        write_table([row()], EVAL_PROBLEMS, tmp_path / f"{i}.parquet")
    revisions = {pq.read_schema(tmp_path / f"{i}.parquet").metadata[b"git_revision"]
                 for i in range(3)}
    assert len(revisions) == 1 and len([c for c in calls if c[0] == "git"]) <= 2, calls


def test_nulls_and_missing_columns_are_refused(tmp_path):
    with pytest.raises(ValueError, match="'model' is not nullable"):
        write_table([row(model=None)], EVAL_PROBLEMS, tmp_path / "x.parquet")
    bad = row()
    del bad["avg"]
    with pytest.raises(ValueError, match=r"lack column\(s\) \['avg'\]"):
        write_table([bad], EVAL_PROBLEMS, tmp_path / "x.parquet")
    assert not any(tmp_path.iterdir())


def test_read_refuses_another_schema(tmp_path):
    import pyarrow as pa

    pq.write_table(pa.table({"model": ["m"]}), tmp_path / "other.parquet")
    with pytest.raises(ValueError, match="schema differs"):
        read_table(tmp_path / "other.parquet", EVAL_PROBLEMS)


def test_a_train_log_from_before_the_added_columns_reads_them_as_nan(tmp_path):
    """Committed results (results/tiny-study/aggregate) predate the mechanism columns: they
    read back with NaN there; a file missing any other column is still refused."""
    import math

    import pyarrow as pa

    from repro.results import TRAIN_LOG
    from repro.results.schemas import TRAIN_LOG_ADDED, TRAIN_LOG_PREAMBLE

    values = {f.name: ("a" if f.type == pa.string() else 1) for f in TRAIN_LOG}
    table = pa.Table.from_pylist([values], schema=TRAIN_LOG)
    old = table.drop_columns(list(TRAIN_LOG_ADDED))
    pq.write_table(old, tmp_path / "old.parquet")
    read = read_table(tmp_path / "old.parquet", TRAIN_LOG)
    assert read.column_names == TRAIN_LOG.names
    assert all(math.isnan(read[name][0].as_py()) for name in TRAIN_LOG_ADDED)
    assert read.drop_columns(list(TRAIN_LOG_ADDED)).equals(old)
    v3 = table.drop_columns(list(TRAIN_LOG_PREAMBLE))  # written before the preamble probes
    pq.write_table(v3, tmp_path / "v3.parquet")
    read = read_table(tmp_path / "v3.parquet", TRAIN_LOG)
    assert all(math.isnan(read[name][0].as_py()) for name in TRAIN_LOG_PREAMBLE)
    assert read.drop_columns(list(TRAIN_LOG_PREAMBLE)).equals(v3)
    pq.write_table(old.drop_columns(["entropy"]), tmp_path / "worse.parquet")
    with pytest.raises(ValueError, match="schema differs"):
        read_table(tmp_path / "worse.parquet", TRAIN_LOG)
