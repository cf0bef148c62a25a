"""Atomic writes: build a file or folder under a temporary name beside it, then rename.

Readers (Snakemake, `--resume`, a user) never see a half-written result under its final name,
and a failed write leaves the previous version in place.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path


def atomic_file(path: Path, write: Callable[[Path], object]) -> None:
    """`write(tmp)` creates the file (with the usual umask permissions), then it replaces `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_dir(path: Path, write: Callable[[Path], object]) -> None:
    """`write(tmp)` fills an empty temp folder, which then replaces `path` (kept on failure)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        write(tmp)
        if path.exists():
            # os.replace cannot overwrite a non-empty folder: move the old one aside first.
            old = tmp.with_name(tmp.name + "-old")
            os.replace(path, old)
            try:
                os.replace(tmp, path)
            except BaseException:
                os.replace(old, path)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
