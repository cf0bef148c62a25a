"""Shared by the sandbox tests: the real bubblewrap sandbox, a grader on it, a per-case marker
carried by every process of a case (to find leftovers on the host), and host-side checks."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from repro.benchmarks.problem import CodeTests
from repro.graders.base import PASS
from repro.graders.code import CodeGrader
from repro.sandbox import Sandbox, SandboxResult

REQUIRES_BWRAP = pytest.mark.skipif(shutil.which("bwrap") is None,
                                reason="bubblewrap is not installed (apt-get install bubblewrap)")
SQUARE = CodeTests(("3\n", "4\n"), ("9\n", "16\n"))
HEALTHY = "print(int(input()) ** 2)"


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    box = Sandbox()
    box.check()
    return box


@pytest.fixture(scope="module")
def grader(sandbox: Sandbox) -> CodeGrader:
    return CodeGrader(sandbox, timeout_per_test=2)


@pytest.fixture
def marker() -> str:
    return f"hostile_{uuid.uuid4().hex}"


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A host directory outside /tmp (the sandbox's /tmp is private), world-writable on purpose."""
    path = Path(tempfile.mkdtemp(prefix="repro-hostile-", dir="/var/tmp"))
    path.chmod(0o777)
    (path / "keep.txt").write_text("precious")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run_py(box: Sandbox, code: str, marker: str, timeout: float = 5.0) -> SandboxResult:
    return box.run([box.config.python, "-I", "-S", "-c", f"# {marker}\n{code}"], timeout=timeout)


def leftovers(marker: str) -> list[int]:
    """Host pids whose command line carries the marker (sandbox processes of this case)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker.encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def assert_clean(marker: str) -> None:
    assert leftovers(marker) == []
    pids = Path("/sys/fs/cgroup/pids")
    if pids.is_dir():
        assert not list(pids.glob(f"repro-sbx-{os.getpid()}-*")), "a per-run cgroup was left"


def assert_healthy(grader: CodeGrader) -> None:
    assert grader.run(HEALTHY, SQUARE).grade.verdict == PASS


