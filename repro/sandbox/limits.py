"""Resource limits for sandboxed programs: rlimits set in the child, and cgroups per run.

rlimits are inherited through bwrap (they survive exec and namespace creation), so they bound
the program inside as well. But they are per process: RLIMIT_AS does not stop 64 forked
children from touching 8 GiB each, and RLIMIT_NPROC counts every process of the real uid (only
usable under a uid of our own). Cgroups bound the run as a whole: a pids cgroup caps its tasks
(the fork-bomb guard, and the list of what to kill) and a memory cgroup caps all its memory,
tmpfs pages included. Both are optional (v1 hierarchies, or a v2 cgroup that already delegates
the controllers); without them the pid namespace of bwrap still tears everything down on exit.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

_V1 = Path("/sys/fs/cgroup")
_NAME = re.compile(r"^repro-sbx-(\d+)-\d+$")


@dataclass(frozen=True)
class Rlimits:
    """Limits of the sandbox process: hard = soft, except CPU (+1 s: SIGKILL follows SIGXCPU)."""

    cpu_seconds: int
    fsize_bytes: int
    nofile: int
    address_space_bytes: int
    nproc: int | None = None  # only with a dedicated uid

    def pairs(self) -> list[tuple[int, tuple[int, int]]]:
        pairs = [
            (resource.RLIMIT_CPU, (self.cpu_seconds, self.cpu_seconds + 1)),
            (resource.RLIMIT_FSIZE, (self.fsize_bytes, self.fsize_bytes)),
            (resource.RLIMIT_NOFILE, (self.nofile, self.nofile)),
            (resource.RLIMIT_CORE, (0, 0)),
            (resource.RLIMIT_AS, (self.address_space_bytes, self.address_space_bytes)),
        ]
        if self.nproc is not None:
            pairs.append((resource.RLIMIT_NPROC, (self.nproc, self.nproc)))
        return pairs


def make_preexec(
    limits: Rlimits, cgroups: tuple[Path, ...], uid_gid: tuple[int, int] | None
) -> Callable[[], None]:
    """The function run in the forked child before exec: join the cgroup, set limits, drop root.

    Everything is precomputed here so the child only makes plain system calls (no imports, no
    locks), which keeps preexec_fn safe in the supervisor's worker threads.
    """
    pairs = limits.pairs()
    procs = [str(path / "cgroup.procs").encode() for path in cgroups]

    def preexec() -> None:
        for path in procs:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")  # "0" = the writing process itself
            finally:
                os.close(fd)
        for which, value in pairs:
            resource.setrlimit(which, value)
        if uid_gid is not None:
            uid, gid = uid_gid
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)

    return preexec


@dataclass(frozen=True)
class CgroupRoot:
    """Where per-run cgroups can be created: the parents for pids and memory (the same directory
    in v2, two hierarchies in v1). Children are made under our own cgroups, so whatever limits
    the host put on this process still bound the sandboxes."""

    version: str  # "v1" or "v2"
    pids: Path
    memory: Path | None

    def create(self, name: str, pids_max: int, memory_bytes: int | None) -> tuple[Path, ...]:
        """Make the run's cgroup(s); the pids one (whose member list is authoritative) first."""
        made: list[Path] = []
        try:
            made.append(self.pids / name)
            made[-1].mkdir()
            (made[-1] / "pids.max").write_text(str(pids_max))
            if self.memory is not None and memory_bytes is not None:
                if self.memory != self.pids:
                    made.append(self.memory / name)
                    made[-1].mkdir()
                limit = "memory.max" if self.version == "v2" else "memory.limit_in_bytes"
                (made[-1] / limit).write_text(str(memory_bytes))
        except OSError:
            for path in reversed(made):
                with contextlib.suppress(OSError):
                    path.rmdir()
            raise
        return tuple(made)


def detect_cgroup_root() -> CgroupRoot | None:
    """Writable cgroup parents for pids (required) and memory (optional), or None.

    Probes by creating and removing a child, so a read-only or undelegated hierarchy is skipped.
    """
    own = _own_cgroups()
    candidates: list[CgroupRoot] = []
    if (_V1 / "pids" / "cgroup.procs").exists() and "pids" in own:
        memory = _V1 / "memory" / own["memory"].lstrip("/") if "memory" in own else None
        candidates.append(CgroupRoot("v1", _V1 / "pids" / own["pids"].lstrip("/"), memory))
    v2 = _v2_parent(own.get(""))
    if v2 is not None:
        candidates.append(CgroupRoot("v2", v2, v2 if _delegates(v2, "memory") else None))
    for root in candidates:
        _remove_stale(root)
        probe = f"repro-sbx-{os.getpid()}-probe"
        try:
            made = root.create(probe, 1, 2**30)
        except OSError:
            if root.memory is None:
                continue
            root = CgroupRoot(root.version, root.pids, None)  # pids alone is still worth it
            try:
                made = root.create(probe, 1, None)
            except OSError:
                continue
        for path in reversed(made):
            path.rmdir()
        return root
    return None


def _own_cgroups() -> dict[str, str]:
    """controller -> our cgroup path ("" is the v2 unified hierarchy)."""
    own: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                own[controller] = path
    return own


def _v2_parent(rel: str | None) -> Path | None:
    """Our own v2 cgroup if it already delegates `pids` to children (no internal-process clash)."""
    if rel is None:
        return None
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            parts = line.split()
            if parts[2:3] == ["cgroup2"]:
                path = Path(parts[1]) / rel.lstrip("/")
                return path if _delegates(path, "pids") and os.access(path, os.W_OK) else None
    return None


def _delegates(path: Path, controller: str) -> bool:
    try:
        return controller in (path / "cgroup.subtree_control").read_text().split()
    except OSError:
        return False


def _remove_stale(root: CgroupRoot) -> None:
    """Remove empty per-run cgroups left by supervisors that died (their pid is gone)."""
    for parent in {root.pids, root.memory} - {None}:
        with contextlib.suppress(OSError):
            for child in parent.iterdir():
                match = _NAME.match(child.name)
                if match and not Path(f"/proc/{match.group(1)}").exists():
                    with contextlib.suppress(OSError):
                        child.rmdir()


def kill_cgroup(paths: tuple[Path, ...], deadline_s: float = 5.0) -> bool:
    """SIGKILL every task of the run's cgroups until they are empty, then remove them.

    The first path (pids) lists the members; True when every directory is gone.
    """
    end = time.monotonic() + deadline_s
    members, kill_file = paths[0] / "cgroup.procs", paths[0] / "cgroup.kill"  # kill: v2, >= 5.14
    while time.monotonic() < end:
        try:
            pids = [int(p) for p in members.read_text().split()]
        except OSError:
            pids = []
        if not pids:
            try:
                for path in reversed(paths):
                    if path.exists():
                        path.rmdir()
                return True
            except OSError:  # tasks still exiting
                time.sleep(0.005)
                continue
        if kill_file.exists():
            with contextlib.suppress(OSError):
                kill_file.write_text("1")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.002)
    return False
