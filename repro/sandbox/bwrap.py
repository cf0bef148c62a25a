"""The security boundary for generated code: one bubblewrap sandbox per run.

Inside: every namespace unshared (no network, own pids, no nested user namespaces where bwrap
supports it), uid/gid 65534 with no capabilities, an empty environment (bwrap itself gets only
PATH, so /proc/1/environ is empty too), `/` read-only, size-capped tmpfs on /tmp and /dev/shm
(the only writable places), private read-only /dev and /proc, the run's files bound read-only
at `/tmp/job` (the working directory), and home directories and /run covered by empty read-only
tmpfs mounts. A seccomp filter (see `seccomp`) refuses Unix sockets, which reach the host by
path whatever the network namespace, and ptrace.
When the supervisor is root, bwrap itself is started as host uid/gid 65534 (not just mapped to
it), so root-only files stay unreadable and the program owns nothing on the host. rlimits and
optional pids + memory cgroups bound what it can consume (see `limits`); the wall clock, the
process group kill and the pid namespace teardown make sure nothing outlives the run (see
`process`).

`mode="unsafe"` runs the program as a plain subprocess with the same rlimits, cgroups and a new
session (and, under root, the same uid drop) but no isolation: it sees the host's files, /tmp
and network. It exists only for hosts without user namespaces and must be asked for
explicitly; every result records which mode produced it.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

from repro.sandbox.limits import CgroupRoot, Rlimits, detect_cgroup_root, make_preexec
from repro.sandbox.process import SandboxResult, run_process
from repro.sandbox.seccomp import filter_program

MODES = ("bwrap", "unsafe")
JOB_DIR = "/tmp/job"  # where the run's files appear inside the sandbox (and its cwd)
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
SANDBOX_ENV = {
    "PATH": SAFE_PATH, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1",
    "LANG": "C.UTF-8", "HOME": "/tmp",
}
HOWTO = (
    "Install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`, Fedora: `dnf install "
    "bubblewrap`) and make sure unprivileged user namespaces are enabled "
    "(`sysctl user.max_user_namespaces` > 0; on Ubuntu also "
    "`kernel.apparmor_restrict_unprivileged_userns=0`). Or pass `--unsafe-no-sandbox` to run "
    "generated code WITHOUT isolation; the results then record sandbox mode 'unsafe'."
)
_FILE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


class SandboxError(RuntimeError):
    """A run could not be carried out (the program is not to blame)."""


class SandboxUnavailable(SandboxError):
    """No sandbox can be set up on this host; the message says how to fix it."""


def default_python() -> str:
    """The system interpreter when there is one: readable by uid 65534 and free of our venv."""
    return "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


@dataclass
class SandboxConfig:
    """How generated programs are isolated and limited."""

    mode: str = field(default="bwrap", metadata={
        "help": "'bwrap' (bubblewrap, the default) or 'unsafe' (no isolation: explicit opt-in)."})
    bwrap_path: str = field(default="bwrap", metadata={
        "help": "bubblewrap executable (name on PATH or absolute path)."})
    python: str = field(default_factory=default_python, metadata={
        "help": "Interpreter for Python programs; must be readable by the sandbox uid."})
    cpu_seconds: int | None = field(default=None, metadata={
        "help": "RLIMIT_CPU per process; None = the run's wall timeout + 1 s."})
    fsize_bytes: int = field(default=64 * 2**20, metadata={
        "help": "RLIMIT_FSIZE: largest file the program may write."})
    nofile: int = field(default=256, metadata={"help": "RLIMIT_NOFILE: open file descriptors."})
    address_space_bytes: int = field(default=8 * 2**30, metadata={
        "help": "RLIMIT_AS: a generous safety cap (LCB itself sets no memory limit)."})
    pids_max: int = field(default=64, metadata={
        "help": "Most tasks (processes + threads) per run, via a pids cgroup when writable."})
    memory_bytes: int | None = field(default=8 * 2**30, metadata={
        "help": "Memory of the whole run (all its processes, tmpfs included), via a memory "
                "cgroup when writable; RLIMIT_AS alone is per process. None: no cgroup cap."})
    use_cgroup: bool = field(default=True, metadata={
        "help": "Create pids/memory cgroups per run when the host allows it (v1 or delegated "
                "v2); without them the pid namespace still cleans up."})
    uid: int = field(default=65534, metadata={"help": "uid inside (and host uid when root)."})
    gid: int = field(default=65534, metadata={"help": "gid inside (and host gid when root)."})
    drop_privileges: bool = field(default=True, metadata={
        "help": "When the supervisor is root, start the sandbox (either mode) as host uid/gid "
                "instead of root."})
    tmpfs_bytes: int = field(default=256 * 2**20, metadata={
        "help": "Size of the private /tmp, and of /dev/shm (bwrap mode)."})
    hide_paths: tuple[str, ...] = field(default=("/root", "/home", "/run"), metadata={
        "help": "Host directories replaced by an empty tmpfs inside the sandbox."})
    timeout_s: float = field(default=60.0, metadata={
        "help": "Wall-clock limit of a run when the caller gives none."})
    max_output_bytes: int = field(default=4 * 2**20, metadata={
        "help": "Bytes kept of stdout, stderr and the result channel each; the rest is dropped."})

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"SandboxConfig.mode must be one of {MODES}, got {self.mode!r}")
        positive = ("fsize_bytes", "nofile", "address_space_bytes", "pids_max", "tmpfs_bytes",
                    "timeout_s", "max_output_bytes")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in positive and not value > 0:
                raise ValueError(f"SandboxConfig.{f.name} must be > 0, got {value!r}")
        if self.memory_bytes is not None and self.memory_bytes < 2**24:
            raise ValueError(f"SandboxConfig.memory_bytes must be >= 16 MiB or None, "
                             f"got {self.memory_bytes}")
        if self.cpu_seconds is not None and self.cpu_seconds < 1:
            raise ValueError(f"SandboxConfig.cpu_seconds must be >= 1 or None, "
                             f"got {self.cpu_seconds}")
        for name in ("uid", "gid"):
            if getattr(self, name) < 1:
                raise ValueError(f"SandboxConfig.{name} must be a non-root id, "
                                 f"got {getattr(self, name)}")
        for path in self.hide_paths:
            if not path.startswith("/") or path.rstrip("/") in ("", "/tmp", "/proc", "/dev"):
                raise ValueError(f"SandboxConfig.hide_paths: cannot hide {path!r}")


class Sandbox:
    """Runs argv in a fresh sandbox per call. Thread-safe: each `run` is independent."""

    RESULT_FD = "{result_fd}"  # in argv: replaced by the fd of the result channel

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self._lock = threading.Lock()
        self._ready = False
        self._cgroup: CgroupRoot | None = None
        self._bwrap: str | None = None
        self._prefix: list[str] = []
        self._ids = itertools.count()

    @property
    def mode(self) -> str:
        """The string stored with every result: "bwrap" or "unsafe"."""
        return self.config.mode

    @property
    def _drop_to(self) -> tuple[int, int] | None:
        if self.config.drop_privileges and os.geteuid() == 0:
            return self.config.uid, self.config.gid
        return None

    def info(self) -> dict[str, object]:
        """What isolation is in force, for logs and result metadata."""
        self.check()
        cg = self._cgroup
        return {"mode": self.mode, "cgroup": cg.version if cg else None,
                "memory_cgroup": bool(cg and cg.memory and self.config.memory_bytes),
                "host_uid": self._drop_to[0] if self._drop_to else os.geteuid(),
                "seccomp": self.mode == "bwrap" and filter_program() is not None,
                "python": self.config.python}

    def check(self) -> None:
        """Prove that a sandbox can start here (once); raise `SandboxUnavailable` if not."""
        with self._lock:
            if self._ready:
                return
            cfg = self.config
            if not os.access(cfg.python, os.X_OK):
                raise SandboxUnavailable(f"interpreter {cfg.python!r} not found or not executable "
                                         "(set SandboxConfig.python)")
            if cfg.mode == "bwrap":
                self._bwrap = shutil.which(cfg.bwrap_path)
                if self._bwrap is None:
                    raise SandboxUnavailable(f"bubblewrap ({cfg.bwrap_path!r}) not found. {HOWTO}")
                self._prefix = self._bwrap_prefix(self._bwrap)
            self._cgroup = detect_cgroup_root() if cfg.use_cgroup else None
            hint = f"Check that {cfg.python} is readable by uid {cfg.uid}. {HOWTO}"
            try:
                probe = self._run([cfg.python, "-I", "-S", "-c", "import os; print(os.getuid())"],
                                  files={}, stdin=None, timeout=30.0, result_channel=False)
            except SandboxError as exc:
                raise SandboxUnavailable(f"{exc}. {hint}") from exc
            expected = str(cfg.uid if cfg.mode == "bwrap" or self._drop_to else os.getuid())
            if probe.returncode != 0 or probe.stdout.decode(errors="replace").strip() != expected:
                detail = (probe.stderr or probe.stdout).decode(errors="replace").strip()[-800:]
                raise SandboxUnavailable(
                    f"a trivial program failed inside the {cfg.mode} sandbox "
                    f"(exit {probe.returncode}): {detail or 'no output'}. {hint}")
            self._ready = True

    def run(
        self,
        argv: Sequence[str],
        *,
        files: Mapping[str, bytes | str] | None = None,
        stdin: bytes | None = None,
        timeout: float | None = None,
        result_channel: bool = False,
    ) -> SandboxResult:
        """Run argv with `files` in its (read-only) working directory; never leaves processes.

        With `result_channel`, a pipe is passed to the program and every `Sandbox.RESULT_FD` in
        argv is replaced by its fd number; what the program writes there is `result.result`.
        """
        self.check()
        return self._run(argv, files=files or {}, stdin=stdin,
                         timeout=self.config.timeout_s if timeout is None else timeout,
                         result_channel=result_channel)

    def _run(self, argv: Sequence[str], *, files: Mapping[str, bytes | str],
             stdin: bytes | None, timeout: float, result_channel: bool) -> SandboxResult:
        cfg = self.config
        if not timeout > 0:
            raise ValueError(f"Sandbox.run: timeout must be > 0, got {timeout}")
        job = Path(tempfile.mkdtemp(prefix="repro-sbx-"))
        cgroups: tuple[Path, ...] = ()
        try:
            job.chmod(0o755)  # the sandbox uid must be able to read it
            for name, data in files.items():
                if not _FILE_NAME.match(name) or name in (".", ".."):
                    raise ValueError(f"Sandbox.run: file name must be a plain name, got {name!r}")
                path = job / name
                path.write_bytes(data.encode() if isinstance(data, str) else data)
                path.chmod(0o644)
            if self._cgroup is not None:
                name = f"repro-sbx-{os.getpid()}-{next(self._ids)}"
                try:
                    cgroups = self._cgroup.create(name, cfg.pids_max, cfg.memory_bytes)
                except OSError as exc:
                    raise SandboxError(f"could not create cgroup {name}: {exc}") from exc
            limits = Rlimits(
                cpu_seconds=cfg.cpu_seconds or math.ceil(timeout) + 1,
                fsize_bytes=cfg.fsize_bytes, nofile=cfg.nofile,
                address_space_bytes=cfg.address_space_bytes,
                # RLIMIT_NPROC counts the whole uid: only safe under our own uid, without cgroup
                nproc=4 * cfg.pids_max if self._drop_to and not cgroups else None,
            )
            preexec = make_preexec(limits, cgroups, self._drop_to)
            if cfg.mode == "bwrap":
                seccomp = _filter_fd()
                fds = () if seccomp is None else (seccomp,)
                full = [*self._prefix, *(["--seccomp", str(seccomp)] if fds else []),
                        "--ro-bind", str(job), JOB_DIR, "--chdir", JOB_DIR, "--", *argv]
                env, cwd = {"PATH": SAFE_PATH}, "/"
            else:
                full, env, cwd, fds = list(argv), dict(SANDBOX_ENV), str(job), ()
            try:
                return run_process(
                    full, cwd=cwd, env=env, stdin=stdin, timeout=timeout, preexec=preexec,
                    output_cap=cfg.max_output_bytes, result_channel=result_channel,
                    result_placeholder=self.RESULT_FD, cgroups=cgroups, mode=cfg.mode,
                    extra_fds=fds)
            except (OSError, subprocess.SubprocessError) as exc:
                raise SandboxError(f"could not start the {cfg.mode} sandbox: {exc}") from exc
            finally:
                for fd in fds:
                    os.close(fd)
        finally:
            for path in reversed(cgroups):  # only left when the run never started
                if path.exists():
                    with contextlib.suppress(OSError):
                        path.rmdir()
            shutil.rmtree(job, ignore_errors=True)

    def _bwrap_prefix(self, bwrap: str) -> list[str]:
        """The bwrap command line up to the job bind (the part that is the same for every run)."""
        cfg = self.config
        version = subprocess.run([bwrap, "--version"], capture_output=True, text=True, check=False)
        match = re.search(r"(\d+)\.(\d+)", version.stdout)
        prefix = [bwrap, "--unshare-all", "--unshare-user"]
        if match and (int(match.group(1)), int(match.group(2))) >= (0, 8):
            prefix.append("--disable-userns")  # no nested user namespaces (kernel attack surface)
        prefix += ["--uid", str(cfg.uid), "--gid", str(cfg.gid), "--die-with-parent",
                   "--new-session", "--cap-drop", "ALL", "--clearenv"]
        for key, value in SANDBOX_ENV.items():
            prefix += ["--setenv", key, value]
        prefix += ["--ro-bind", "/", "/"]
        python_home = Path(cfg.python).resolve().parents[1]
        for hidden in cfg.hide_paths:
            if Path(hidden).is_dir() and not Path(hidden).is_symlink():
                prefix += ["--tmpfs", hidden]
                if python_home.is_relative_to(hidden):  # keep the interpreter reachable
                    prefix += ["--ro-bind", str(python_home), str(python_home)]
                prefix += ["--remount-ro", hidden]
        size = ["--size", str(cfg.tmpfs_bytes)]
        prefix += [*size, "--tmpfs", "/tmp", "--dev", "/dev", *size, "--tmpfs", "/dev/shm",
                   "--remount-ro", "/dev", "--proc", "/proc"]
        return prefix


def _filter_fd() -> int | None:
    """A pipe holding the seccomp filter, for bwrap's `--seccomp FD` (None: no filter here)."""
    program = filter_program()
    if program is None:
        return None
    read, write = os.pipe()
    try:
        os.write(write, program)  # a few hundred bytes: far below the pipe's buffer
    finally:
        os.close(write)
    return read
