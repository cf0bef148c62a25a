"""The committed results as tests read them: from git (HEAD's tree), never from the working tree.

The README's first command rewrites `results/aggregate/` with this machine's run, whose digits
differ on another CPU model; a test that read the working tree would then test the user's run
as if it were the committed one (issue 46). So every test that reads a committed results path
(`results/aggregate`, a study's aggregate, a rerun's, `results/paper`) goes through
`committed(...)` or `copy_committed(...)`; tests about a fresh run read that run's own folder.
tests/test_committed_reads.py fails if a test file builds such a path itself.

The copies live in a cache under the temp folder, one folder per git object id: the id is git's
hash of the content, so a copy is never stale, and the pytest-xdist workers share it safely
(each extracts into a private folder and renames it into place; a worker that loses the race
drops its own). Files are made read-only, so a test that writes into a copy fails loudly.

Without git (a source tarball, no .git; or git not installed) the committed results cannot be
told from the working tree's: those tests **skip** with that reason, rather than test whatever
the working tree holds. Under CI (CI=true) they fail instead: CI runs on a clone.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from repro.results.committed import NotCommitted, export, object_id

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(tempfile.gettempdir()) / f"repro-committed-{os.getuid()}"


def _unavailable(err: NotCommitted) -> None:
    reason = f"committed results unavailable: {err}"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason}; CI runs on a git clone")
    pytest.skip(reason, allow_module_level=True)


def _read_only(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)


def committed(rel: str) -> Path:
    """A read-only copy of `rel` (e.g. "results/aggregate", "results/paper/reference.parquet")
    as HEAD has it; the path ends in `rel`, so code that reads names off it sees the same."""
    try:
        oid, _ = object_id(ROOT, rel)
    except NotCommitted as err:
        if (ROOT / ".git").exists() and shutil.which("git"):
            raise  # a git checkout that lacks the path: the test names a wrong path
        _unavailable(err)
    entry = CACHE / oid
    if not entry.is_dir():
        CACHE.mkdir(parents=True, exist_ok=True)
        private = Path(tempfile.mkdtemp(prefix=f".{oid}.", dir=CACHE))
        export(ROOT, rel, private)
        _read_only(private)
        try:
            private.rename(entry)  # atomic; fails if another worker got there first
        except OSError:
            if not entry.is_dir():
                raise
            shutil.rmtree(private)  # its folders stay writable, so its files go
    return entry / rel


def copy_committed(dest: Path, *rels: str) -> None:
    """Writable copies of the committed `rels` at `dest/rel` (a fresh clone's results in a
    temp copy of the workflow)."""
    for rel in rels:
        src, target = committed(rel), dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, target, copy_function=shutil.copyfile)
        else:
            shutil.copyfile(src, target)



def committed_root(dest: Path) -> Path:
    """`dest` made a stand-in repository root for code that takes one (`repro report`'s Store,
    `repro figures --docs`): its `results` is HEAD's (read-only, as `committed` gives it), its
    `config` and `docs` link to the working tree's, which hold no run outputs."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "results").symlink_to(committed("results"))
    for name in ("config", "docs"):
        (dest / name).symlink_to(ROOT / name)
    return dest
