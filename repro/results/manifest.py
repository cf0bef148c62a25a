"""Verifiable outputs: every job writes `manifest.json` last, recording each output file's
sha256, size and (Parquet) row count and schema name; anything that reads an output first
checks it against that record.

A file that fails (truncated, overwritten with garbage, a torn copy) is reported in one line
naming it. A Parquet file a manifest does not list (older outputs) still gets its footer
read, which catches truncation. The pipeline runs `quarantine` over the outputs at parse time:
a bad file is moved aside to `NAME.corrupt`, so Snakemake sees it missing and reruns exactly
the job that wrote it (and the jobs that read it).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from repro.atomic import atomic_file
from repro.results.environment import environment

MANIFEST = "manifest.json"
QUARANTINE_SUFFIX = ".corrupt"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def describe(path: Path) -> dict[str, Any]:
    """What the manifest records about one file."""
    path = Path(path)
    entry: dict[str, Any] = {"sha256": sha256_of(path), "bytes": path.stat().st_size}
    if path.suffix == ".parquet":
        meta = pq.read_metadata(path)
        entry["rows"] = meta.num_rows
        schema_meta = meta.schema.to_arrow_schema().metadata or {}
        entry["schema"] = schema_meta.get(b"schema_name", b"").decode()
    return entry


def write_manifest(folder: Path, files: Iterable[str], extra: Mapping[str, Any] | None = None,
                   name: str = MANIFEST) -> Path:
    """Record `files` (paths relative to `folder`) in `folder/name`, with the environment that
    made them (`repro.results.environment`); call after the last write."""
    folder = Path(folder)
    data = ({"environment": environment()} | dict(extra or {})
            | {"files": {f: describe(folder / f) for f in sorted(files)}})
    text = json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"
    atomic_file(folder / name, lambda tmp: tmp.write_text(text))
    return folder / name


def _listed(path: Path, levels: int = 3) -> tuple[Path, dict[str, Any]] | None:
    """The nearest manifest (this folder or up to `levels` above) that lists `path`."""
    folder = path.parent
    for _ in range(levels):
        manifest = folder / MANIFEST
        if manifest.is_file():
            try:
                files = json.loads(manifest.read_text()).get("files", {})
            except ValueError:
                files = {}
            entry = files.get(str(path.relative_to(folder)))
            if entry is not None:
                return manifest, entry
        folder = folder.parent
    return None


def environment_of(path: Path) -> dict[str, Any] | None:
    """The environment recorded by the manifest that lists `path` (None: unlisted, or a
    manifest written before environments were recorded)."""
    found = _listed(Path(path))
    return None if found is None else json.loads(found[0].read_text()).get("environment")


def verify_file(path: Path, *, known_good: Mapping[str, Any] | None = None) -> str | None:
    """None when `path` matches its manifest entry (or, unlisted Parquet, has a readable
    footer); else why not, in a few words. `known_good` maps a path to the (size, mtime_ns,
    sha256) it verified with before, to skip re-hashing an unchanged file."""
    path = Path(path)
    if not path.is_file():
        return "missing"
    found = _listed(path)
    if found is None and path.suffix == ".parquet":
        try:
            pq.read_metadata(path)
        except Exception as exc:  # pyarrow raises several types for a bad footer
            return f"unreadable Parquet ({str(exc).splitlines()[0][:120]})"
        return None
    if found is None:
        return None
    manifest, want = found
    stat = path.stat()
    if stat.st_size != want["bytes"]:
        return f"{stat.st_size} bytes, {want['bytes']} recorded in {manifest}"
    unchanged = (known_good or {}).get(str(path)) == [stat.st_size, stat.st_mtime_ns,
                                                      want["sha256"]]
    if not unchanged and sha256_of(path) != want["sha256"]:
        return f"sha256 differs from the one recorded in {manifest}"
    if "rows" in want:
        try:
            rows = pq.read_metadata(path).num_rows
        except Exception as exc:
            return f"unreadable Parquet ({str(exc).splitlines()[0][:120]})"
        if rows != want["rows"]:
            return f"{rows} rows, {want['rows']} recorded in {manifest}"
    return None


def check_inputs(paths: Iterable[Path]) -> None:
    """Raise a one-line ValueError naming the first input that fails verification."""
    for path in paths:
        problem = verify_file(Path(path))
        if problem is not None:
            raise ValueError(f"{path}: fails verification ({problem}); rerun the job that "
                             "wrote it (snakemake moves it aside and does so)")


def check_tree(folder: str | Path) -> None:
    """`check_inputs` over every file of a local folder (e.g. an exported policy, which the
    run's manifest two levels up lists); a hub id or a missing path is left to its loader."""
    folder = Path(folder)
    if folder.is_dir():
        check_inputs(sorted(p for p in folder.rglob("*") if p.is_file()))


def quarantine(paths: Iterable[str | Path], cache_file: Path | None = None) -> list[str]:
    """Move each existing output that fails verification to NAME.corrupt; one line per file
    (returned). `cache_file` keeps (size, mtime_ns, sha256) of files that verified, so an
    unchanged file is not hashed again on every Snakemake start."""
    cache: dict[str, Any] = {}
    if cache_file is not None and cache_file.is_file():
        try:
            cache = json.loads(cache_file.read_text())
        except ValueError:
            cache = {}
    said = []
    for path in map(Path, paths):
        if not path.is_file():
            continue
        problem = verify_file(path, known_good=cache)
        if problem is None:
            found = _listed(path)
            if found is not None:
                stat = path.stat()
                cache[str(path)] = [stat.st_size, stat.st_mtime_ns, found[1]["sha256"]]
            continue
        cache.pop(str(path), None)
        aside = path.with_name(path.name + QUARANTINE_SUFFIX)
        os.replace(path, aside)
        said.append(f"repro: {path} fails verification ({problem}); moved to {aside.name}, "
                    "so its job reruns")
    if cache_file is not None:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(cache, sort_keys=True)
        atomic_file(cache_file, lambda tmp: tmp.write_text(text))
    return said
