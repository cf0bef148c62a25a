"""`repro aggregate`: the pipeline's per-job result files -> one Parquet table per kind.

Run keys come only from hive-style `key=value` folder names (whatever sits above them is
ignored), so a file's place is its identity. Files are written in key order, each sorted by
step / problem / sample, so the same inputs give the same bytes of data. Every input is checked
(name, keys, duplicates, the samples sibling, and its bytes against the manifest its job wrote)
before anything is written. The tables are built in a staging folder and moved into `out`
together, then `manifest.json` is written last; a failure leaves the previous aggregate as it
was.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from repro.reporting.study import Study
from repro.results import (
    AGG_EVAL_PROBLEMS,
    AGG_EVAL_SAMPLES,
    AGG_RUNS,
    AGG_TRAIN_CURVES,
    EVAL_PROBLEMS,
    EVAL_SAMPLES,
    TRAIN_LOG,
    read_table,
    write_arrow,
    write_table,
)
from repro.results.manifest import check_inputs, environment_of, write_manifest

TRAIN_FILE = "train_log.parquet"  # per-job inputs
PROBLEMS_FILE = "problems.parquet"
SAMPLES_FILE = "samples.parquet"
CURVES_OUT = "train_curves.parquet"  # aggregate outputs
RUNS_OUT = "runs.parquet"
PROBLEMS_OUT = "eval_problems.parquet"
SAMPLES_OUT = "eval_samples.parquet"
EVAL_OUTS = (  # aggregate file, per-job file, its schema, aggregate schema, row order
    (PROBLEMS_OUT, PROBLEMS_FILE, EVAL_PROBLEMS, AGG_EVAL_PROBLEMS, ["problem_id"]),
    (SAMPLES_OUT, SAMPLES_FILE, EVAL_SAMPLES, AGG_EVAL_SAMPLES, ["problem_id", "sample_idx"]),
)
_KEY_TYPES = {
    "algo": str, "model": str, "group_size": int, "seed": int, "frac": float, "benchmark": str,
}
_NEEDED = {
    TRAIN_FILE: ("algo", "model", "group_size", "seed"),
    PROBLEMS_FILE: ("algo", "model", "seed", "frac", "benchmark"),  # group_size: not for init
}


@dataclass(frozen=True)
class Job:
    """One per-job result file and the keys of its path."""

    path: Path
    keys: Mapping[str, Any]

    def order(self) -> tuple[Any, ...]:
        k = self.keys
        g = k.get("group_size")
        return (k["algo"], k["model"], -1 if g is None else g, k["seed"], k.get("frac", 0.0),
                k.get("benchmark", ""))


def path_keys(path: Path) -> dict[str, Any]:
    """The typed `key=value` segments of the folders above `path` (others are ignored)."""
    keys: dict[str, Any] = {}
    for part in path.parent.parts:
        name, sep, raw = part.partition("=")
        if not sep:
            continue
        if name in keys:
            raise ValueError(f"{path}: key {name!r} appears twice in the path")
        try:
            keys[name] = _KEY_TYPES.get(name, str)(raw)
        except ValueError:
            raise ValueError(f"{path}: key {name}={raw!r} is not a valid "
                             f"{_KEY_TYPES[name].__name__}") from None
    return keys


def collect(files: Sequence[Path]) -> tuple[list[Job], list[Job]]:
    """(train logs, problem files), each sorted by key; refuse anything ambiguous or missing."""
    found: dict[str, dict[tuple[Any, ...], Job]] = {TRAIN_FILE: {}, PROBLEMS_FILE: {}}
    for path in map(Path, files):
        if path.name not in found:
            raise ValueError(f"{path}: not a {TRAIN_FILE} or {PROBLEMS_FILE} "
                             f"({SAMPLES_FILE} is read as the sibling of {PROBLEMS_FILE})")
        job = Job(path, path_keys(path))
        missing = [key for key in _NEEDED[path.name] if key not in job.keys]
        if missing:
            raise ValueError(f"{path}: the path lacks key(s) {missing} (folders named key=value)")
        if path.name == PROBLEMS_FILE and not path.with_name(SAMPLES_FILE).is_file():
            raise ValueError(f"{path}: its sibling {path.with_name(SAMPLES_FILE)} does not exist")
        other = found[path.name].setdefault(job.order(), job)
        if other is not job:
            raise ValueError(f"{path}: same keys as {other.path}")
    return (sorted(found[TRAIN_FILE].values(), key=Job.order),
            sorted(found[PROBLEMS_FILE].values(), key=Job.order))


def aggregate(files: Sequence[Path], out: Path, study: Study) -> dict[str, int]:
    """Write the aggregate tables under `out`; returns each file's row count."""
    train, evals = collect(files)
    check_inputs([job.path for job in train]
                 + [job.path.with_name(name) for job in evals
                    for name in (PROBLEMS_FILE, SAMPLES_FILE)])
    config = study.to_config()
    env = job_environments([job.path for job in (*train, *evals)])
    curves = [_train_curve(job) for job in train]
    names = (CURVES_OUT, RUNS_OUT, PROBLEMS_OUT, SAMPLES_OUT)
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=out))
    try:
        write_arrow(curves, AGG_TRAIN_CURVES, staging / CURVES_OUT, config=config,
                    environment=env)
        write_table([_run_row(c, study.smooth_window) for c in curves], AGG_RUNS,
                    staging / RUNS_OUT, config=config, environment=env)
        for name, source, base, schema, order in EVAL_OUTS:
            tables = (_eval_table(job, source, base, schema, order) for job in evals)
            write_arrow(tables, schema, staging / name, config=config, environment=env)
        # the old manifest stays until the new one replaces it: a crash between the moves
        # leaves files that do not match it, which the next read (or Snakemake) detects
        for name in names:
            os.replace(staging / name, out / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    write_manifest(out, names, {"study": config})
    return {name: pq.read_metadata(out / name).num_rows for name in names}


def job_environments(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """The distinct environments the jobs' manifests record, each with how many of `paths` it
    made (`environment` None: manifests older than the record), most jobs first."""
    counts: dict[str, int] = {}
    for path in paths:
        key = json.dumps(environment_of(path), sort_keys=True)
        counts[key] = counts.get(key, 0) + 1
    return [{"jobs": n, "environment": json.loads(key)}
            for key, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def _train_curve(job: Job) -> pa.Table:
    log = read_table(job.path, TRAIN_LOG).sort_by("step")
    if log.num_rows == 0:
        raise ValueError(f"{job.path}: the training log has no steps")
    for column, key in (("algorithm", "algo"), ("seed", "seed")):
        held = sorted(set(log[column].to_pylist()))
        if held != [job.keys[key]]:
            raise ValueError(f"{job.path}: column {column!r} holds {held}, "
                             f"but the path says {key}={job.keys[key]}")
    return _with_keys(log, job.keys, AGG_TRAIN_CURVES)


def _eval_table(job: Job, source: str, base: pa.Schema, schema: pa.Schema,
                order: list[str]) -> pa.Table:
    """The job's problems (or samples, its sibling) with the run keys, in `order`."""
    path = job.path.with_name(source)
    table = read_table(path, base).sort_by([(column, "ascending") for column in order])
    held = sorted(set(table["benchmark"].to_pylist()))
    if held not in ([], [job.keys["benchmark"]]):
        raise ValueError(f"{path}: column 'benchmark' holds {held}, "
                         f"but the path says benchmark={job.keys['benchmark']}")
    return _with_keys(table, job.keys, schema)


def _with_keys(table: pa.Table, keys: Mapping[str, Any], schema: pa.Schema) -> pa.Table:
    """`table` with the run key columns of `schema` (run_algo <- algo, ...) in front."""
    key_fields = list(schema)[: len(schema) - table.num_columns]
    arrays = [pa.array([keys.get(f.name.removeprefix("run_"))] * table.num_rows, f.type)
              for f in key_fields]
    return pa.Table.from_arrays(arrays + table.columns, schema=schema)


def _run_row(curve: pa.Table, window: int) -> dict[str, Any]:
    """The runs.parquet row of one training curve (sorted by step)."""
    last = {name: curve[name][-1].as_py() for name in curve.column_names}
    kept = ("run_algo", "run_model", "run_group_size", "run_seed", "objective", "gen_tokens_cum",
            "flops_cum")
    times = curve["time_rollout"].to_numpy() + curve["time_update"].to_numpy()
    return {key: last[key] for key in kept} | {
        "steps": last["step"],
        "time_total": float(times.sum()),
        "reward_final": float(np.mean(curve["reward_mean"].to_numpy()[-window:])),
        "entropy_final": last["entropy"],
    }
