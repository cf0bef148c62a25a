"""`load_problems`: a `BenchmarkSpec` -> `Problem`s plus the provenance stored with results.

Where files come from, in order:

1. `data_dir` (offline mirror). Layout = the hub repo's own files under the dataset id, exactly
   what `hf download ID --repo-type dataset --local-dir DATA_DIR/ID` writes:
       DATA_DIR/MathArena/aime_2025/data/train-00000-of-00001.parquet
       DATA_DIR/MathArena/hmmt_feb_2025/data/train-00000-of-00001.parquet
       DATA_DIR/livecodebench/code_generation_lite/test.jsonl ... test6.jsonl
   The commit is read from the `.cache/huggingface/download/*.metadata` files `hf download`
   leaves there, when present.
2. Otherwise the hub client (`huggingface_hub.snapshot_download` at the spec's revision), which
   also serves the standard HF cache offline. Offline (HF_HUB_OFFLINE, checked at call time) and
   not cached: `DatasetUnavailable`, naming the dataset and the one command that fetches it.

Hub parquet files are read with pyarrow (no `datasets` cache side effects); LCB shards as JSONL.
"""

from __future__ import annotations

import datetime as dt
import importlib
import os
import re
import shlex
import warnings
from pathlib import Path
from typing import Any

import huggingface_hub
import huggingface_hub.constants
import pyarrow.parquet as pq
from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

from repro.benchmarks import lcb
from repro.benchmarks.mapping import row_to_problem
from repro.benchmarks.problem import Problem, revision_hash
from repro.benchmarks.spec import BenchmarkSpec
from repro.results.manifest import sha256_of

_TRUE = {"1", "ON", "YES", "TRUE"}


class DatasetUnavailable(RuntimeError):
    """The dataset's files cannot be found; the message says how to fetch them."""


def load_problems(
    spec: BenchmarkSpec,
    *,
    data_dir: Path | None = None,
    limit: int | None = None,
    release: str | None = None,
    start_date: str | dt.date | None = None,
    end_date: str | dt.date | None = None,
    sha256_pins: dict[str, str] | None = None,
) -> tuple[list[Problem], dict[str, Any]]:
    """Problems of one benchmark (first `limit` if given) and their provenance.

    `sha256_pins` (repo file -> sha256, e.g. from a `repro data pin` lock): a pinned file whose
    bytes differ is refused (ShardIntegrityError). For LCB they are merged over the spec's and
    gate decoding pickled private tests. LCB only: `release` tag (default the spec's) and
    contest-date window (default the spec's when the tag is the default one; bounds inclusive).
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    lcb_args = {"release": release, "start_date": start_date, "end_date": end_date}
    if spec.source != "lcb_jsonl":
        given = [key for key, value in lcb_args.items() if value is not None]
        if given:
            raise ValueError(f"{spec.name}: {given} apply to LiveCodeBench files only")
    if spec.source == "synthetic":
        problems, provenance = _load_synthetic(spec)
    elif spec.source == "hub":
        problems, provenance = _load_parquet(spec, data_dir, sha256_pins or {})
    else:
        problems, provenance = _load_lcb(spec, data_dir, sha256_pins=sha256_pins, **lcb_args)
    whole = provenance.pop("default_selection") and limit is None
    problems = problems[:limit]
    provenance.update(count=len(problems), revision_hash=revision_hash(problems))
    if whole and spec.expected_count is not None and len(problems) != spec.expected_count:
        warnings.warn(
            f"{spec.name}: loaded {len(problems)} problems, expected {spec.expected_count} "
            f"({provenance['dataset']}@{provenance['resolved_revision']})",
            stacklevel=2,
        )
    return problems, provenance


def _load_parquet(
    spec: BenchmarkSpec, data_dir: Path | None, pins: dict[str, str]
) -> tuple[list[Problem], dict]:
    files, provenance = locate(spec, spec.files, data_dir)
    digests = {name: sha256_of(path) for name, path in files.items()}
    for name, digest in digests.items():
        lcb.check_pin(name, digest, pins)
    problems = [
        row_to_problem(spec, row)
        for path in files.values()
        for row in pq.read_table(path).to_pylist()
    ]
    provenance["files"] = digests
    return problems, provenance | {"default_selection": True}


def _load_lcb(
    spec: BenchmarkSpec,
    data_dir: Path | None,
    *,
    release: str | None,
    start_date: str | dt.date | None,
    end_date: str | dt.date | None,
    sha256_pins: dict[str, str] | None,
) -> tuple[list[Problem], dict]:
    tag = release or spec.release
    default = tag == spec.release
    start = lcb.as_datetime(start_date if start_date is not None else
                            spec.start_date if default else None)
    end = lcb.as_datetime(end_date if end_date is not None else spec.end_date if default else None)
    names = lcb.shards_for_release(tag, spec.shards)
    files, provenance = locate(spec, names, data_dir)
    pins = {**spec.sha256, **(sha256_pins or {})}
    problems: list[Problem] = []
    digests: dict[str, str] = {}
    for name in names:
        rows, digests[name] = lcb.read_shard(
            files[name], keep=lambda row: lcb.in_window(row["contest_date"], start, end)
        )
        allow_pickle = lcb.check_pin(name, digests[name], pins)
        for row in rows:
            try:
                problems.append(row_to_problem(spec, row, allow_pickle=allow_pickle))
            except lcb.PickleRefused as exc:
                raise lcb.ShardIntegrityError(
                    f"{name}: problem {row.get('question_id')!r}: {exc}; refusing to unpickle "
                    f"from a file whose sha256 is not pinned. Its sha256 is {digests[name]}: "
                    f"verify it, then pin it (sha256_pins={{{name!r}: '{digests[name]}'}})"
                ) from None
    problems.sort(key=lambda problem: problem.problem_id)
    provenance.update(
        files=digests, release=tag, start_date=start and start.isoformat(),
        end_date=end and end.isoformat(), pinned=sorted(set(pins) & set(names)),
        default_selection=default and start_date is None and end_date is None,
    )
    return problems, provenance


def _load_synthetic(spec: BenchmarkSpec) -> tuple[list[Problem], dict]:
    """Rows in the twin's hub schema, generated in-process (so pickled tests are trusted)."""
    module, _, function = spec.generator.partition(":")
    rows = getattr(importlib.import_module(module), function)(spec.split, spec.n, spec.seed)
    problems = [row_to_problem(spec, row, allow_pickle=True) for row in rows]
    if spec.kind == "code":
        problems.sort(key=lambda problem: problem.problem_id)
    provenance = {
        "benchmark": spec.name, "dataset": f"synthetic:{spec.generator}",
        "revision": f"split={spec.split},n={spec.n},seed={spec.seed}",
        "resolved_revision": None, "source": "synthetic", "location": None, "files": {},
    }
    return problems, provenance | {"default_selection": True}


def locate(
    spec: BenchmarkSpec, patterns: tuple[str, ...], data_dir: Path | None
) -> tuple[dict[str, Path], dict[str, Any]]:
    """Files matching `patterns` (repo-relative name -> path), and where they came from."""
    if data_dir is not None:
        root = Path(data_dir) / spec.dataset
        files, missing = _match(root, patterns)
        if missing:
            raise DatasetUnavailable(
                f"{spec.dataset}: {missing} not found under {root}. Fetch with:\n  "
                + fetch_command(spec, patterns, data_dir)
            )
        resolved = local_commit(root, files)
        if re.fullmatch(r"[0-9a-f]{40}", spec.revision) and resolved not in (None, spec.revision):
            raise DatasetUnavailable(
                f"{spec.dataset}: {root} holds commit {resolved}, but the spec pins "
                f"{spec.revision}. Fetch the pinned one with:\n  "
                + fetch_command(spec, patterns, data_dir)
            )
        source = "data_dir"
    else:
        offline = _offline()
        try:
            folder = huggingface_hub.snapshot_download(
                spec.dataset, repo_type="dataset", revision=spec.revision,
                allow_patterns=list(patterns), local_files_only=offline,
            )
        except (LocalEntryNotFoundError, ConnectionError) as exc:
            why = "HF_HUB_OFFLINE is set" if offline else "the hub is unreachable"
            raise DatasetUnavailable(
                f"{spec.dataset}@{spec.revision} is not in the local HF cache and {why} "
                f"({type(exc).__name__}). Fetch it once with:\n  "
                + fetch_command(spec, patterns, None) + "\nthen pass --data-dir DATA_DIR"
            ) from None
        except HfHubHTTPError as exc:
            raise DatasetUnavailable(
                f"{spec.dataset}@{spec.revision}: {type(exc).__name__}: "
                f"{str(exc).splitlines()[0]}"
            ) from None
        root = Path(folder)
        files, missing = _match(root, patterns)
        if missing:
            raise DatasetUnavailable(
                f"{spec.dataset}@{spec.revision}: the cached snapshot {root} lacks {missing}. "
                f"Fetch them with:\n  " + fetch_command(spec, patterns, None)
            )
        resolved = root.name if root.parent.name == "snapshots" else None
        source = "hf_cache" if offline else "hub"
    return files, {
        "benchmark": spec.name, "dataset": spec.dataset, "revision": spec.revision,
        "resolved_revision": resolved, "source": source, "location": str(root),
    }


def download(spec: BenchmarkSpec, patterns: tuple[str, ...], data_dir: Path) -> None:
    """Put the files matching `patterns` under `data_dir/<dataset id>` (what `hf download
    --local-dir` writes, commit metadata included), unless they are already there."""
    root = Path(data_dir) / spec.dataset
    if not _match(root, patterns)[1]:
        return
    if _offline():
        raise DatasetUnavailable(
            f"{spec.dataset}: files {list(patterns)} are not under {root} and HF_HUB_OFFLINE is "
            "set; run this where the hub is reachable, or fetch with:\n  "
            + fetch_command(spec, patterns, data_dir)
        )
    try:
        huggingface_hub.snapshot_download(
            spec.dataset, repo_type="dataset", revision=spec.revision,
            allow_patterns=list(patterns), local_dir=root,
        )
    except (HfHubHTTPError, ConnectionError, LocalEntryNotFoundError) as exc:
        raise DatasetUnavailable(
            f"{spec.dataset}@{spec.revision}: download failed ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''})"
        ) from None


def fetch_command(spec: BenchmarkSpec, patterns: tuple[str, ...], data_dir: Path | None) -> str:
    """The one `hf download` that puts the needed files where `--data-dir` looks for them."""
    local_dir = Path(data_dir or "DATA_DIR") / spec.dataset
    includes = " ".join(f"--include {shlex.quote(pattern)}" for pattern in patterns)
    return (
        f"hf download {spec.dataset} --repo-type dataset --revision {spec.revision} "
        f"{includes} --local-dir {shlex.quote(str(local_dir))}"
    )


def _offline() -> bool:
    """Checked per call: huggingface_hub reads HF_HUB_OFFLINE only once, at import."""
    names = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
    env = any(os.environ.get(name, "").upper() in _TRUE for name in names)
    return env or huggingface_hub.constants.HF_HUB_OFFLINE


def _match(root: Path, patterns: tuple[str, ...]) -> tuple[dict[str, Path], list[str]]:
    files: dict[str, Path] = {}
    missing = []
    for pattern in patterns:
        found = sorted(path for path in root.glob(pattern) if path.is_file())
        if not found:
            missing.append(pattern)
        files.update((path.relative_to(root).as_posix(), path) for path in found)
    return files, missing


def local_commit(root: Path, files: dict[str, Path]) -> str | None:
    """The commit `hf download --local-dir` recorded for these files, if one and the same."""
    commits = set()
    for name in files:
        meta = root / ".cache" / "huggingface" / "download" / f"{name}.metadata"
        commits.add(meta.read_text().split("\n", 1)[0].strip() if meta.is_file() else None)
    return commits.pop() if len(commits) == 1 else None
