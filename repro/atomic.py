"""Atomic writes: build a file or folder under a temporary name beside it, then rename.

Readers (Snakemake, `--resume`, a user) never see a half-written result under its final name,
and a failed write leaves the previous version in place. A failing write (a full disk: ENOSPC,
a quota, an I/O error) is re-raised as `WriteFailed`, a one-line error naming the final path;
the temporary is removed, so a full disk does not get fuller.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

_STORAGE = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded", errno.EIO: "I/O error",
            errno.EFBIG: "file too large", errno.EROFS: "read-only file system"}


class WriteFailed(OSError):
    """Writing `path` failed for lack of storage; the previous version of `path` is untouched."""


def _storage_error(path: Path, exc: BaseException) -> WriteFailed | None:
    """A one-line error naming the final path when `exc` is a storage failure, else None."""
    if isinstance(exc, WriteFailed) or not isinstance(exc, OSError) or exc.errno not in _STORAGE:
        return None
    return WriteFailed(exc.errno, f"{path}: {_STORAGE[exc.errno]} while writing it; "
                                  "the previous version is intact")


def atomic_file(path: Path, write: Callable[[Path], object]) -> None:
    """`write(tmp)` creates the file (with the usual umask permissions), then it replaces `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        failed = _storage_error(path, exc)
        if failed is None:
            raise
        raise failed from exc
    finally:
        tmp.unlink(missing_ok=True)


def atomic_dir(path: Path, write: Callable[[Path], object]) -> None:
    """`write(tmp)` fills an empty temp folder, which then replaces `path` (kept on failure)."""
    path = Path(path)
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
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        failed = _storage_error(path, exc)
        if failed is None:
            raise
        raise failed from exc


def write_yaml(path: Path, data: dict) -> None:
    """Atomic YAML write, keys sorted (the resolved run and evaluation configs)."""
    import yaml

    text = yaml.safe_dump(data, sort_keys=True)
    atomic_file(Path(path), lambda tmp: tmp.write_text(text))
