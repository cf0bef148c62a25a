"""Committed results read from git, never from the working tree.

The pipeline writes into the folders that hold the committed results (`snakemake --cores all`
rewrites `results/aggregate/`), so after a user's first command the working tree holds their
run, not the committed one. Whatever compares with the committed results (the tests, the main
job's last step, `repro expectations`) reads them here: the blob or tree at HEAD, exported to a
folder of the caller's choice.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from pathlib import Path


class NotCommitted(ValueError):
    """No git checkout, no git, or the path is not in HEAD's tree: one line saying which."""


def _git(root: Path, *args: str) -> bytes:
    if shutil.which("git") is None:
        raise NotCommitted("git is not installed: the committed results are read from git")
    proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, check=False)
    if proc.returncode != 0:
        said = proc.stderr.decode(errors="replace").strip().splitlines() or ["no message"]
        raise NotCommitted(f"git {' '.join(args)} in {root}: {said[-1]}")
    return proc.stdout


def object_id(root: Path, rel: str) -> tuple[str, str]:
    """(git object id, "blob" or "tree") of `rel` (relative to the repository root) at HEAD."""
    if not (root / ".git").exists():
        raise NotCommitted(f"{root} is not a git checkout (a tarball?): the committed results "
                           "are read from git")
    _git(root, "rev-parse", "--verify", "HEAD")  # a repository git refuses says why, here
    spec = f"HEAD:{rel.strip('/')}"
    try:
        oid = _git(root, "rev-parse", "--verify", "--quiet", spec).decode().strip()
    except NotCommitted:
        raise NotCommitted(f"{rel} is not committed (not in HEAD's tree of {root})") from None
    return oid, _git(root, "cat-file", "-t", oid).decode().strip()


def committed_id(root: Path, rel: str) -> str:
    """`rel`'s object id at HEAD, or "" where git does not hold it (a rule's param: committing
    another aggregate reruns the comparison with it)."""
    try:
        return object_id(root, rel)[0]
    except NotCommitted:
        return ""


def changed(root: Path, rel: str) -> bool:
    """Whether the working tree's `rel` differs from HEAD's (modified, deleted or new files)."""
    return bool(_git(root, "status", "--porcelain", "--", rel).strip())


def export(root: Path, rel: str, dest: Path) -> Path:
    """Write HEAD's `rel` (a file or a folder) to `dest/rel` and return that path; `dest/rel`
    must not exist yet. Git LFS pointers would come out as pointers: the results are plain
    blobs (no .gitattributes)."""
    oid, kind = object_id(root, rel)
    target = dest / rel
    if target.exists():
        raise FileExistsError(f"{target} exists; export writes a fresh copy")
    target.parent.mkdir(parents=True, exist_ok=True)
    if kind == "blob":
        target.write_bytes(_git(root, "cat-file", "blob", oid))
        return target
    archive = _git(root, "archive", "--format=tar", oid)
    target.mkdir()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return target
