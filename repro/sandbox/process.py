"""Run one child process to completion: feed stdin, drain every output pipe, enforce a wall clock.

All pipes are serviced from one `selectors` loop, so an output flood can never block the child
or the supervisor: bytes past the cap are read and dropped (the child keeps running until it
ends or the wall clock kills it). When the main process ends, its process group is killed
before it is reaped (so the group id cannot have been reused) and its cgroups are emptied with
SIGKILL, so nothing it started outlives the run, even after an interrupt.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from repro.sandbox.limits import kill_cgroup

_POLL_S = 0.1  # how often to look for a child that exited while something still holds its pipes
_GRACE_S = 0.2  # after the child exits, how long to wait for pipe holders before killing them


@dataclass(frozen=True)
class SandboxResult:
    """What one sandboxed run produced. `returncode` < 0 means killed by that signal (in bwrap
    mode an exit status of 128 + n is read as signal n, which is how bwrap reports it)."""

    returncode: int
    stdout: bytes
    stderr: bytes
    timed_out: bool  # the wall clock ran out and the sandbox was killed
    killed: bool  # the supervisor had to SIGKILL the main process (timeout or lingering pipes)
    wall_s: float
    result: bytes = b""  # the side channel (see `Sandbox.RESULT_FD`), empty when unused
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    mode: str = ""  # the sandbox mode that produced it ("bwrap" / "unsafe")

    @property
    def signal_name(self) -> str | None:
        if self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"


@dataclass
class _Sink:
    cap: int
    data: bytearray
    truncated: bool = False

    def feed(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        if len(chunk) > room:
            self.truncated = True
            chunk = chunk[: max(room, 0)]
        self.data += chunk


def run_process(
    argv: Sequence[str],
    *,
    cwd: str | Path,
    env: dict[str, str],
    stdin: bytes | None,
    timeout: float,
    preexec: Callable[[], None],
    output_cap: int,
    result_channel: bool,
    result_placeholder: str,
    cgroups: tuple[Path, ...],
    mode: str,
    extra_fds: tuple[int, ...] = (),
) -> SandboxResult:
    """Spawn, supervise and fully clean up one process (also when interrupted). `extra_fds`
    are inherited by the child (e.g. bwrap's seccomp filter); the caller closes them."""
    pass_fds: tuple[int, ...] = extra_fds
    result_r = result_w = -1
    if result_channel:
        result_r, result_w = os.pipe()
        pass_fds = (*extra_fds, result_w)
        argv = [a.replace(result_placeholder, str(result_w)) for a in argv]
    start = time.monotonic()
    try:
        try:
            proc = subprocess.Popen(
                list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, cwd=cwd, env=env, start_new_session=True,
                preexec_fn=preexec, pass_fds=pass_fds,
            )
        finally:
            if result_w >= 0:
                os.close(result_w)
        with proc:  # closes the pipes at the end
            assert proc.stdout is not None and proc.stderr is not None
            sinks = {fd: _Sink(output_cap, bytearray())
                     for fd in (proc.stdout.fileno(), proc.stderr.fileno(), result_r) if fd >= 0}
            try:
                timed_out = _pump(proc, sinks, stdin or b"", start + timeout)
                while not timed_out and not _exited(proc.pid):  # pipes closed, still running
                    timed_out = time.monotonic() >= start + timeout
                    time.sleep(0.002)
            finally:
                killed = _terminate(proc, cgroups)
            out, err = sinks[proc.stdout.fileno()], sinks[proc.stderr.fileno()]
        wall = time.monotonic() - start
    finally:
        if result_r >= 0:
            os.close(result_r)
    returncode = proc.returncode
    if mode == "bwrap" and 128 < returncode <= 128 + 64:
        returncode = 128 - returncode  # bwrap reports "killed by signal n" as exit 128 + n
    return SandboxResult(
        returncode=returncode, stdout=bytes(out.data), stderr=bytes(err.data),
        timed_out=timed_out, killed=killed or timed_out, wall_s=wall,
        result=bytes(sinks[result_r].data) if result_r >= 0 else b"",
        stdout_truncated=out.truncated, stderr_truncated=err.truncated, mode=mode,
    )


def _pump(proc: subprocess.Popen[bytes], sinks: dict[int, _Sink], data: bytes,
          deadline: float) -> bool:
    """Service the pipes until they all close (or the child is gone); True if time ran out."""
    assert proc.stdin is not None
    sel = selectors.DefaultSelector()
    for fd in sinks:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    view, sent = memoryview(data), 0
    if data:
        os.set_blocking(proc.stdin.fileno(), False)
        sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    grace_end: float | None = None
    next_poll = time.monotonic() + _POLL_S
    try:
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                return True
            if grace_end is not None and now >= grace_end:
                return False
            if grace_end is None and now >= next_poll:
                next_poll = now + _POLL_S
                if _exited(proc.pid):  # something it left behind still holds the pipes
                    grace_end = now + _GRACE_S
            wake = min(deadline, next_poll if grace_end is None else grace_end)
            events = sel.select(max(wake - now, 0.0))
            for key, _ in events:
                fd = key.fd
                if fd in sinks:
                    try:
                        chunk = os.read(fd, 65536)
                    except BlockingIOError:
                        continue
                    if chunk:
                        sinks[fd].feed(chunk)
                    else:
                        sel.unregister(fd)
                    continue
                try:
                    sent += os.write(fd, view[sent:sent + 65536])
                except BlockingIOError:
                    continue
                except OSError:  # the child closed its stdin (BrokenPipe) or died
                    sent = len(data)
                if sent >= len(data):
                    sel.unregister(fd)
                    proc.stdin.close()
        return False
    finally:
        sel.close()


def _exited(pid: int) -> bool:
    """Whether the child has exited, without reaping it (its pid stays reserved for killpg)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _terminate(proc: subprocess.Popen[bytes], cgroups: tuple[Path, ...]) -> bool:
    """SIGKILL the process group (bwrap's: its pid namespace dies with it), reap the main
    process, then empty and remove the cgroup. True if the main process was still running."""
    alive = not _exited(proc.pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # the unreaped leader keeps its pid from reuse
    proc.wait()
    if cgroups:
        kill_cgroup(cgroups)
    return alive
