"""Graders under outside faults: a sandboxed program SIGKILLed from outside mid-grading is run
again (and graded on its merits); killed every time, it is recorded as killed, never as passed.
(Math-verify workers killed mid-grading: tests/test_math_grader.py.)"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from repro.benchmarks.problem import CodeTests
from repro.graders.base import PASS, RUNTIME_ERROR
from repro.graders.code import CodeGrader
from repro.sandbox import Sandbox

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None,
                                reason="bubblewrap is not installed (apt-get install bubblewrap)")
SQUARE = CodeTests(("3\n",), ("9\n",))
SLOW = "import time\ntime.sleep(1.0)\nprint(int(input()) ** 2)"


def our_harnesses() -> list[int]:
    """Host pids of harness processes that descend from this test process (never others')."""
    me, found = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if b"lcb_harness.py" not in argv or argv[0].endswith(b"bwrap"):
                continue
            pid = int(entry.name)
            while pid > 1:
                stat = (Path("/proc") / str(pid) / "stat").read_text()
                pid = int(stat.rsplit(")", 1)[1].split()[1])  # the parent's pid
                if pid == me:
                    found.append(int(entry.name))
                    break
        except (OSError, ValueError, IndexError):
            continue
    return found


def killer(times: int, stop: threading.Event) -> threading.Thread:
    """SIGKILL the harness `times` times, each once it has run for a moment."""
    def run() -> None:
        killed: set[int] = set()
        while len(killed) < times and not stop.is_set():
            for pid in our_harnesses():
                if pid not in killed:
                    time.sleep(0.3)
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        continue
                    killed.add(pid)
            time.sleep(0.02)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.fixture(scope="module")
def grader() -> CodeGrader:
    return CodeGrader(Sandbox(), timeout_per_test=3)


def test_program_killed_from_outside_is_graded_again(grader):
    stop = threading.Event()
    thread = killer(1, stop)
    grade = grader.run(SLOW, SQUARE).grade
    stop.set()
    thread.join()
    assert grade.verdict == PASS and "attempt 2: graded again" in grade.reason, grade


def test_program_killed_every_time_is_recorded_as_killed(grader):
    stop = threading.Event()
    thread = killer(2, stop)
    grade = grader.run(SLOW, SQUARE).grade
    stop.set()
    thread.join()
    assert grade.verdict == RUNTIME_ERROR and "SIGKILL on every attempt" in grade.reason, grade
    assert grader.run(SLOW, SQUARE).grade.verdict == PASS  # the grader carries on
