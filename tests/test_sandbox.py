"""The hostile suite: every program here tries to escape or exhaust the real bubblewrap sandbox.

Each case must be contained within its time limit, its outcome recorded, the host left
untouched (checked from outside), and grading must carry on afterwards. Leftover processes are
found by a unique marker that every process of the case carries in its command line.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from repro.graders.base import PASS, RUNTIME_ERROR, TIME_LIMIT
from repro.graders.code import CodeGrader
from repro.sandbox import HOWTO, Sandbox, SandboxConfig, SandboxUnavailable

pytest.register_assert_rewrite("sandbox_fixtures")  # its checks are asserts too
from sandbox_fixtures import (  # noqa: E402
    HEALTHY,
    REQUIRES_BWRAP,
    SQUARE,
    assert_clean,
    assert_healthy,
    run_py,
)

pytest_plugins = ["sandbox_fixtures"]  # the fixtures: sandbox, grader, marker, host_dir
pytestmark = REQUIRES_BWRAP


@pytest.mark.hostile
def test_fork_bomb_is_contained(sandbox: Sandbox, grader: CodeGrader, marker: str) -> None:
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    start = time.monotonic()
    result = run_py(sandbox, code, marker, timeout=3)
    assert result.timed_out and result.killed
    assert time.monotonic() - start < 10
    assert_clean(marker)
    assert_healthy(grader)


@pytest.mark.hostile
def test_process_count_is_capped(sandbox: Sandbox, marker: str) -> None:
    code = ("import os, time\nn = 0\nwhile n < 1000:\n    try:\n        pid = os.fork()\n"
            "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(60)\n"
            "        os._exit(0)\n    n += 1\nprint(n)")
    result = run_py(sandbox, code, marker, timeout=10)
    forks = int(result.stdout)
    cap = sandbox.config.pids_max if sandbox.info()["cgroup"] else 4 * sandbox.config.pids_max
    assert 0 < forks < cap, forks
    assert_clean(marker)  # the sleepers died with the pid namespace


@pytest.mark.hostile
def test_memory_of_all_processes_together_is_capped(marker: str) -> None:
    """RLIMIT_AS is per process; the memory cgroup bounds the forks together."""
    box = Sandbox(SandboxConfig(memory_bytes=256 * 2**20))
    if not box.info()["memory_cgroup"]:
        pytest.skip("no writable memory cgroup on this host")
    # each child holds its 100 MiB for 3 s, so all four are alive together (4 x 100 > 256)
    code = ("import os, time\npids = []\nfor _ in range(4):\n"
            "    pid = os.fork()\n    if pid == 0:\n"
            "        block = bytearray(100 * 2**20)\n        time.sleep(3)\n        os._exit(0)\n"
            "    pids.append(pid)\nprint([os.waitpid(p, 0)[1] for p in pids])")
    result = run_py(box, code, marker, timeout=20)
    statuses = [int(s) for s in result.stdout.decode().strip("[]\n").split(",")]
    assert 9 in statuses, statuses  # at least one child was OOM-killed (SIGKILL) in its cgroup
    assert_clean(marker)


@pytest.mark.hostile
def test_setsid_children_die_with_the_sandbox(
    sandbox: Sandbox, grader: CodeGrader, marker: str
) -> None:
    code = ("import os\nfor _ in range(10):\n    if os.fork() == 0:\n        os.setsid()\n"
            "        if os.fork() == 0:\n            while True:\n                pass\n"
            "        os._exit(0)\nprint('parent leaves')")
    result = run_py(sandbox, code, marker, timeout=5)
    assert b"parent leaves" in result.stdout and not result.timed_out
    assert_clean(marker)
    assert_healthy(grader)


@pytest.mark.hostile
def test_setsid_children_are_swept_by_the_cgroup_in_unsafe_mode(marker: str) -> None:
    box = Sandbox(SandboxConfig(mode="unsafe"))
    if box.info()["cgroup"] is None:
        pytest.skip("no writable pids cgroup: unsafe mode cannot sweep setsid children here")
    code = ("import os\nif os.fork() == 0:\n    os.setsid()\n    os.close(1)\n    os.close(2)\n"
            "    while True:\n        pass\nprint('parent leaves')")
    result = run_py(box, code, marker, timeout=5)
    assert result.mode == "unsafe" and b"parent leaves" in result.stdout
    assert_clean(marker)


@pytest.mark.hostile
def test_busy_loop_is_a_time_limit(sandbox: Sandbox, grader: CodeGrader, marker: str) -> None:
    result = run_py(sandbox, "while True:\n    pass", marker, timeout=2)
    assert result.timed_out and 2 <= result.wall_s < 5
    grade = grader.run("while True:\n    pass", SQUARE).grade
    assert grade.verdict == TIME_LIMIT and grade.reason.startswith("test 1/2")
    assert_clean(marker)
    assert_healthy(grader)


@pytest.mark.hostile
def test_memory_hog_is_contained(sandbox: Sandbox, grader: CodeGrader, marker: str) -> None:
    result = run_py(sandbox, "x = bytearray(16 * 2**30)", marker)  # over the 8 GiB RLIMIT_AS
    assert result.returncode == 1 and b"MemoryError" in result.stderr
    small = Sandbox(SandboxConfig(address_space_bytes=2**30))
    grows = "chunks = []\nwhile True:\n    chunks.append(bytearray(64 * 2**20))"
    result = run_py(small, grows, marker, timeout=20)
    assert not result.timed_out and b"MemoryError" in result.stderr
    grade = grader.run("cells = [0] * 2**40", SQUARE).grade
    assert grade.verdict == RUNTIME_ERROR and "MemoryError" in grade.reason
    assert_clean(marker)
    assert_healthy(grader)


@pytest.mark.hostile
def test_output_flood_is_capped(sandbox: Sandbox, grader: CodeGrader, marker: str) -> None:
    flood = "import os\nwhile True:\n    os.write(1, b'x' * 65536)"
    result = run_py(sandbox, flood, marker, timeout=2)
    cap = sandbox.config.max_output_bytes
    assert result.timed_out and result.stdout_truncated and len(result.stdout) == cap
    grade = grader.run(f"{flood}\n", SQUARE).grade  # inside a test: the per-test alarm ends it
    assert grade.verdict == TIME_LIMIT
    assert_clean(marker)
    assert_healthy(grader)


@pytest.mark.hostile
def test_outbound_network_fails(sandbox: Sandbox, marker: str) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    code = (f"import socket\nfor addr in [('127.0.0.1', {port}), ('1.1.1.1', 80)]:\n"
            "    try:\n        socket.create_connection(addr, timeout=2)\n"
            "        print('CONNECTED', addr)\n    except OSError as e:\n"
            "        print('blocked', type(e).__name__)\n"
            "try:\n    socket.getaddrinfo('example.com', 80)\n    print('RESOLVED')\n"
            "except OSError:\n    print('no dns')")
    result = run_py(sandbox, code, marker)
    with listener, pytest.raises(TimeoutError):
        listener.accept()
    out = result.stdout.decode()
    assert result.returncode == 0 and out.count("blocked") == 2 and "no dns" in out, out
    assert "CONNECTED" not in out and "RESOLVED" not in out


@pytest.mark.hostile
def test_cannot_write_outside_tmp(sandbox: Sandbox, host_dir: Path, marker: str) -> None:
    targets = [host_dir / marker, Path.cwd() / marker, Path("/root") / marker,
               Path("/var/tmp") / marker, Path("/etc") / marker, Path("/dev") / marker]
    code = (f"import os\nfor p in {[str(t) for t in targets]!r} + ['job/x', '/tmp/job/x']:\n"
            "    try:\n        open(p, 'w').write('pwned')\n        print('WROTE', p)\n"
            "    except OSError as e:\n        print('denied', p, e.errno)\n"
            "open('/tmp/scratch', 'w').write('fine')\nprint(open('/tmp/scratch').read())")
    result = run_py(sandbox, code, marker)
    out = result.stdout.decode()
    assert "WROTE" not in out and out.count("denied") == len(targets) + 2, out
    assert out.rstrip().endswith("fine")  # the private /tmp is writable (and size-capped)
    fill = ("import os\nfor d in ('/tmp', '/dev/shm'):\n    try:\n        for i in range(64):\n"
            "            open(f'{d}/{i}', 'wb').write(bytes(2**20))\n    except OSError as e:\n"
            "        print(d, e.errno)")
    small = Sandbox(SandboxConfig(tmpfs_bytes=8 * 2**20))
    assert run_py(small, fill, marker).stdout.decode().split() == ["/tmp", "28", "/dev/shm", "28"]
    for target in targets:
        assert not target.exists(), target
    assert not Path("/tmp/scratch").exists()


@pytest.mark.hostile
def test_host_secrets_are_out_of_reach(
    sandbox: Sandbox, host_dir: Path, marker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    monkeypatch.setenv("REPRO_TEST_SECRET", secret)
    private = host_dir / "private"
    private.mkdir()
    (private / "token").write_text(secret)
    private.chmod(0o700)  # root-only, like ~/.cache/huggingface/token
    in_tmp = Path(tempfile.mkdtemp())  # host /tmp is replaced by the sandbox's own
    (in_tmp / "token").write_text(secret)
    code = (f"import os\nprint(dict(os.environ))\nfor p in ['/proc/1/environ', "
            f"'/proc/self/environ', '{private}/token', '{in_tmp}/token', '/root/.bashrc']:\n"
            "    try:\n        print(p, open(p).read())\n"
            "    except OSError as e:\n        print('denied', p, type(e).__name__)\n"
            "print(os.listdir('/root'), os.listdir('/run'))")
    try:
        result = run_py(sandbox, code, marker)
    finally:
        shutil.rmtree(in_tmp)
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr
    assert secret not in out and "REPRO_TEST_SECRET" not in out
    assert out.count("denied") == 3 and "[] []" in out, out


@pytest.mark.hostile
def test_killing_the_parent_hurts_nobody_outside(
    sandbox: Sandbox, grader: CodeGrader, marker: str
) -> None:
    # a host process of the very uid the sandbox runs as: kill(-1) inside must not reach it
    bystander = subprocess.Popen(["sleep", "60"], user=65534, group=65534, extra_groups=[])
    try:
        code = ("import os, signal\nfor pid in (os.getppid(), 1, -1):\n    try:\n"
                "        os.kill(pid, signal.SIGKILL)\n    except OSError as e:\n"
                "        print('failed', pid, e)\nprint('survived')")
        result = run_py(sandbox, code, marker)
        assert bystander.poll() is None, "a host process was killed from inside the sandbox"
        assert not result.timed_out
        assert b"survived" in result.stdout  # pid 1 of the namespace ignores it, kill(-1)
        # spares the caller; through the harness (os.kill is None there) posix.kill is graded.
        harness_kill = ("import posix, signal\nposix.kill(posix.getppid(), signal.SIGKILL)\n"
                        "posix.kill(-1, signal.SIGKILL)")
        grade = grader.run(harness_kill, SQUARE).grade  # kill(-1) finds nobody: ESRCH
        assert grade.verdict == RUNTIME_ERROR and "ProcessLookupError" in grade.reason
    finally:
        bystander.kill()
        bystander.wait()
    assert_clean(marker)
    assert_healthy(grader)


@pytest.mark.hostile
def test_deleting_files_fails(sandbox: Sandbox, host_dir: Path, marker: str) -> None:
    code = (f"import shutil, subprocess\nsubprocess.run(['rm', '-rf', '{host_dir}'])\n"
            f"shutil.rmtree('{host_dir}', ignore_errors=True)\n"
            "subprocess.run(['rm', '-rf', '/usr/bin/env', '/tmp/job'])\nprint('tried')")
    result = run_py(sandbox, code, marker)
    assert b"tried" in result.stdout
    assert (host_dir / "keep.txt").read_text() == "precious"
    assert Path("/usr/bin/env").exists()


@pytest.mark.hostile
def test_huge_recursion_is_contained(grader: CodeGrader) -> None:
    python_level = "def f(n):\n    return f(n + 1) + 1\nprint(f(0))"
    grade = grader.run(python_level, SQUARE).grade
    assert grade.verdict == RUNTIME_ERROR and "RecursionError" in grade.reason
    # C-level recursion past a raised limit overflows the C stack: the harness dies by signal
    c_level = ("import json, sys\nsys.setrecursionlimit(10**8)\n"
               "print(json.loads('[' * 10**6 + ']' * 10**6))")
    grade = grader.run(c_level, SQUARE).grade
    assert grade.verdict == RUNTIME_ERROR and "test 1/2" in grade.reason
    assert "killed by SIGSEGV" in grade.reason
    assert_healthy(grader)


def test_unsafe_mode_runs_and_says_so() -> None:
    box = Sandbox(SandboxConfig(mode="unsafe"))
    result = box.run([box.config.python, "-I", "-S", "-c", "import os; print(os.getuid())"],
                     files={"data.txt": "hello"}, timeout=10)
    assert box.mode == "unsafe" and result.mode == "unsafe" and result.returncode == 0
    assert int(result.stdout) == (65534 if os.geteuid() == 0 else os.geteuid())  # never root
    grader = CodeGrader(box)
    assert grader.sandbox_mode == "unsafe" and grader.run(HEALTHY, SQUARE).grade.verdict == PASS


def test_missing_bubblewrap_is_refused_with_the_fix() -> None:
    box = Sandbox(SandboxConfig(bwrap_path="/nonexistent/bwrap"))
    with pytest.raises(SandboxUnavailable) as err:
        box.check()
    message = str(err.value)
    assert "bubblewrap" in message and "--unsafe-no-sandbox" in message and HOWTO in message
    with pytest.raises(SandboxUnavailable):
        CodeGrader(box)


def test_files_and_stdin_reach_the_program_read_only(sandbox: Sandbox) -> None:
    code = ("import os, sys\nprint(os.getcwd(), open('data.txt').read(), sys.stdin.read())\n"
            "try:\n    open('data.txt', 'w')\nexcept OSError:\n    print('read-only')")
    result = sandbox.run([sandbox.config.python, "-I", "-S", "-c", code],
                         files={"data.txt": "hello"}, stdin=b"from stdin", timeout=10)
    assert result.stdout.decode().split() == ["/tmp/job", "hello", "from", "stdin", "read-only"]
    assert result.mode == "bwrap" and not result.timed_out


@pytest.mark.parametrize(("field", "value"), [
    ("mode", "docker"), ("pids_max", 0), ("uid", 0), ("timeout_s", -1.0), ("cpu_seconds", 0),
    ("hide_paths", ("/tmp",)),
])
def test_config_errors_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"SandboxConfig.{field}"):
        SandboxConfig(**{field: value})
