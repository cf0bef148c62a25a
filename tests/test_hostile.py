"""More hostile programs (issue 13), one per test, each against the real bubblewrap sandbox.

Every case checks three things: the program is contained (the attack fails or is cut off by a
limit, within its time), the sample fails on its own (through the grader where that is the
path a generated program takes), and the host and the grader are unharmed (no process or
cgroup left, host files and processes untouched, the next healthy program still passes).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from repro.graders.base import PASS, RUNTIME_ERROR, TIME_LIMIT, WRONG_ANSWER
from repro.sandbox import Sandbox, SandboxConfig

pytest.register_assert_rewrite("sandbox_fixtures")
from sandbox_fixtures import (  # noqa: E402
    REQUIRES_BWRAP,
    SQUARE,
    assert_clean,
    assert_healthy,
    run_py,
)

pytest_plugins = ["sandbox_fixtures"]  # the fixtures: sandbox, grader, marker, host_dir
pytestmark = [REQUIRES_BWRAP, pytest.mark.hostile]
LIBC = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"


def lines(result) -> list[str]:
    return result.stdout.decode(errors="replace").split("\n")


def test_ptrace_of_another_process_is_refused(sandbox, grader, marker):
    bystander = subprocess.Popen(["sleep", "60"], user=65534, group=65534, extra_groups=[])
    try:
        code = (LIBC + f"import os\nfor pid in (1, os.getppid(), {bystander.pid}):\n"
                "    print(pid, libc.ptrace(16, pid, 0, 0), ctypes.get_errno())")  # ATTACH
        result = run_py(sandbox, code, marker)
        assert result.returncode == 0 and not result.timed_out, result.stderr
        outcomes = [line.split()[1:] for line in lines(result) if line]
        assert outcomes == [["-1", "1"]] * 3, outcomes  # EPERM for all, even the sandbox's init
        with open(f"/proc/{bystander.pid}/status") as status:
            assert "TracerPid:\t0" in status.read()
    finally:
        bystander.kill()
        bystander.wait()
    assert_clean(marker)
    assert_healthy(grader)


def test_writes_to_proc_self_mem_hurt_only_the_program(sandbox, grader, marker):
    # overwrite the interpreter's own code with int3 traps: the program kills itself, nothing else
    code = ("import ctypes\nf = open('/proc/self/mem', 'r+b', buffering=0)\n"
            "addr = ctypes.cast(ctypes.pythonapi.PyObject_Repr, ctypes.c_void_p).value\n"
            "f.seek(addr)\nf.write(b'\\xcc' * 64)\nprint(repr(1))")
    result = run_py(sandbox, code, marker)
    assert result.returncode < 0 and result.signal_name == "SIGTRAP", result
    grade = grader.run(code.replace("print(repr(1))", "print(repr(int(input()) ** 2))"),
                       SQUARE).grade
    assert grade.verdict == RUNTIME_ERROR and "SIGTRAP" in grade.reason, grade
    assert_clean(marker)
    assert_healthy(grader)


def test_host_environment_is_not_readable_through_proc(sandbox, marker, monkeypatch):
    secret = f"proc-secret-{marker}"
    monkeypatch.setenv("REPRO_PROC_SECRET", secret)
    holder = subprocess.Popen(["sleep", "60"], env={"REPRO_PROC_SECRET": secret})
    try:
        code = ("import os\nseen = []\nfor p in os.listdir('/proc'):\n    if p.isdigit():\n"
                "        for f in ('environ', 'cmdline'):\n            try:\n"
                "                seen.append(open(f'/proc/{p}/{f}', 'rb').read())\n"
                "            except OSError:\n                pass\n"
                "print(len([p for p in os.listdir('/proc') if p.isdigit()]))\n"
                "print(b'|'.join(seen))")
        result = run_py(sandbox, code, marker)
    finally:
        holder.kill()
        holder.wait()
    out = result.stdout
    assert result.returncode == 0 and int(out.split(b"\n")[0]) <= 3, out[:200]  # bwrap + python
    assert secret.encode() not in out.replace(marker.encode(), b"") and b"REPRO_PROC" not in out
    assert str(holder.pid).encode() + b"\n" not in out


def test_symlink_escape_from_the_work_dir(sandbox, host_dir, marker):
    code = (f"import os\nos.symlink('{host_dir}', '/tmp/out')\n"
            "os.symlink('/tmp/job/../../{host_dir.name}', '/tmp/up')\n"
            "for p in ('/tmp/out/keep.txt', '/tmp/out/new.txt', '/tmp/job/link'):\n"
            "    try:\n        open(p, 'w').write('pwned')\n        print('WROTE', p)\n"
            "    except OSError as e:\n        print('denied', e.errno)\n"
            "try:\n    os.symlink('/etc', '/tmp/job/etc')\n    print('LINKED')\n"
            "except OSError as e:\n    print('denied', e.errno)")
    result = run_py(sandbox, code, marker)
    out = result.stdout.decode()
    assert result.returncode == 0 and out.count("denied") == 4 and "WROTE" not in out, out
    assert "LINKED" not in out
    assert (host_dir / "keep.txt").read_text() == "precious"
    assert sorted(p.name for p in host_dir.iterdir()) == ["keep.txt"]


def test_hard_link_escape_from_the_work_dir(sandbox, host_dir, marker):
    code = (f"import os\nfor src, dst in [('{host_dir}/keep.txt', '/tmp/k'), "
            "('/etc/passwd', '/tmp/p'), ('/tmp/job/x', '/tmp/j'), "
            f"('/etc/hostname', '{host_dir}/h')]:\n"
            "    try:\n        os.link(src, dst)\n        print('LINKED', dst)\n"
            "    except OSError as e:\n        print('denied', e.errno)")
    result = run_py(sandbox, code, marker)
    out = result.stdout.decode()
    assert result.returncode == 0 and out.count("denied") == 4, out
    assert (host_dir / "keep.txt").stat().st_nlink == 1
    assert sorted(p.name for p in host_dir.iterdir()) == ["keep.txt"]


def test_file_larger_than_the_size_limit(grader, marker):
    box = Sandbox(SandboxConfig(fsize_bytes=2**20))
    code = ("f = open('/tmp/big', 'wb')\ntry:\n    for _ in range(64):\n"
            "        f.write(bytes(2**18))\n        f.flush()\nexcept OSError as e:\n"
            "    print('stopped', e.errno)\nimport os\nprint(os.path.getsize('/tmp/big'))")
    result = run_py(box, code, marker)
    assert lines(result)[:2] == ["stopped 27", str(2**20)], result  # EFBIG at exactly the cap
    grade = grader.run("open('/tmp/big', 'wb').write(bytes(200 * 2**20))", SQUARE).grade
    assert grade.verdict == RUNTIME_ERROR and "File too large" in grade.reason, grade
    assert_clean(marker)
    assert_healthy(grader)


def test_thread_bomb(sandbox, grader, marker):
    code = ("import threading, time\nn = 0\ntry:\n    while n < 100000:\n"
            "        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
            "        n += 1\nexcept RuntimeError as e:\n    print('stopped', e)\nprint(n)")
    result = run_py(sandbox, code, marker)
    assert b"stopped" in result.stdout and not result.timed_out, result
    assert 0 < int(lines(result)[-2]) < 4 * sandbox.config.pids_max
    grade = grader.run(code.replace("print(n)", "os._exit(3)"), SQUARE).grade
    assert grade.verdict == RUNTIME_ERROR, grade
    assert_clean(marker)
    assert_healthy(grader)


def test_mmap_bomb(sandbox, grader, marker):
    code = ("import mmap\nmaps = []\ntry:\n    while True:\n"
            "        maps.append(mmap.mmap(-1, 2**30))\n        maps[-1][::2**20] = b'x' * 2**10\n"
            "except (OSError, MemoryError) as e:\n    print('stopped', type(e).__name__)\n"
            "print(len(maps))")
    result = run_py(sandbox, code, marker, timeout=5)
    assert b"stopped" in result.stdout and not result.timed_out, result
    assert int(lines(result)[-2]) < sandbox.config.address_space_bytes // 2**30
    assert_clean(marker)
    assert_healthy(grader)


def test_cpu_time_hidden_in_sleep_meets_the_wall_clock(sandbox, grader, marker):
    result = run_py(sandbox, "import time\ntime.sleep(3600)", marker, timeout=1.5)
    assert result.timed_out and result.killed and result.wall_s < 4
    grade = grader.run("import time\ntime.sleep(3600)", SQUARE).grade  # per-test alarm
    assert grade.verdict == TIME_LIMIT, grade
    assert_clean(marker)
    assert_healthy(grader)


def test_cpu_time_hidden_in_children_meets_the_wall_clock(sandbox, grader, marker):
    # each child has its own RLIMIT_CPU; together they would burn n times it without a wall clock
    code = ("import os\nfor _ in range(4):\n    if os.fork() == 0:\n        while True:\n"
            "            pass\nos.wait()")
    start = time.monotonic()
    result = run_py(sandbox, code, marker, timeout=2)
    assert result.timed_out and time.monotonic() - start < 6
    harness = code.replace("os.fork()", "__import__('posix').fork()").replace(
        "os.wait()", "__import__('posix').wait()")  # reliability_guard removes os.fork
    assert grader.run(harness, SQUARE).grade.verdict == TIME_LIMIT
    assert_clean(marker)
    assert_healthy(grader)


def test_signals_to_the_parent_do_not_stop_the_run(sandbox, grader, marker):
    code = ("import os, signal\nfor sig in (signal.SIGSTOP, signal.SIGTERM, signal.SIGHUP, "
            "signal.SIGINT, signal.SIGSEGV):\n    for pid in (os.getppid(), 1, 0):\n"
            "        if pid == 0 and sig in (signal.SIGSTOP, signal.SIGSEGV):\n"
            "            continue\n        try:\n            os.kill(pid, sig)\n"
            "        except OSError as e:\n            print('failed', e)\nprint('still here')")
    result = run_py(sandbox, code, marker, timeout=5)
    assert not result.timed_out and result.wall_s < 4, result
    assert result.returncode != 0 or b"still here" in result.stdout  # its own group: its choice
    stop = "import posix, signal\nposix.kill(posix.getppid(), signal.SIGSTOP)\nprint(9)\nprint(16)"
    grade = grader.run(stop, SQUARE).grade  # the harness (its parent) cannot be frozen...
    assert grade.verdict == WRONG_ANSWER, grade  # ...and the answers are still its own (wrong)
    assert_clean(marker)
    assert_healthy(grader)


@pytest.mark.parametrize("call", [
    "libc.unshare(0x10000000)",  # CLONE_NEWUSER
    "libc.unshare(0x20000 | 0x40000000)",  # CLONE_NEWNS | CLONE_NEWNET
])
def test_ctypes_unshare_is_refused(sandbox, marker, call):
    result = run_py(sandbox, LIBC + f"print({call}, ctypes.get_errno())", marker)
    ret, err = lines(result)[0].split()
    assert ret == "-1" and int(err) in (1, 28), result  # EPERM; ENOSPC when userns max is 0


def test_ctypes_mount_is_refused(sandbox, host_dir, marker):
    code = (LIBC + "import os\nfor src, dst, fs in [(b'none', b'/tmp', b'tmpfs'), "
            f"(b'/', b'/tmp', None), (b'{host_dir}', b'/tmp', None)]:\n"
            "    flags = 4096 if fs is None else 0  # MS_BIND\n"
            "    print(libc.mount(src, dst, fs, flags, None), ctypes.get_errno())\n"
            "print(libc.umount2(b'/proc', 2), ctypes.get_errno())\nprint(os.listdir('/tmp'))")
    result = run_py(sandbox, code, marker)
    assert lines(result)[:5] == ["-1 1"] * 4 + ["['job']"], result  # /tmp as it was
    assert (host_dir / "keep.txt").read_text() == "precious"


def test_ctypes_setns_is_refused(sandbox, marker):
    code = (LIBC + "import os\nfor ns in ('net', 'mnt', 'pid', 'user'):\n"
            "    fd = os.open(f'/proc/1/ns/{ns}', os.O_RDONLY)\n"
            "    print(ns, libc.setns(fd, 0), ctypes.get_errno())")
    result = run_py(sandbox, code, marker)
    outcomes = [line.split()[1:] for line in lines(result) if line]
    assert len(outcomes) == 4 and all(ret == "-1" and err in ("1", "22") for ret, err in outcomes)


def test_dev_shm_exhaustion_stays_inside(grader, marker):
    box = Sandbox(SandboxConfig(tmpfs_bytes=4 * 2**20))
    host_free = os.statvfs("/dev/shm").f_bfree if Path("/dev/shm").is_dir() else None
    code = ("import os\nn = 0\ntry:\n    while True:\n"
            "        open(f'/dev/shm/{n}', 'wb').write(bytes(2**19))\n        n += 1\n"
            "except OSError as e:\n    print(e.errno, n)")
    result = run_py(box, code, marker)
    errno_, files = lines(result)[0].split()
    assert errno_ == "28" and int(files) <= 8, result  # ENOSPC at the 4 MiB cap
    if host_free is not None:
        assert not list(Path("/dev/shm").glob("[0-9]*"))
        assert os.statvfs("/dev/shm").f_bfree >= host_free - 256  # host /dev/shm untouched
    assert_clean(marker)
    assert_healthy(grader)


def test_zombie_flood_leaves_nothing(sandbox, grader, marker):
    # children exit at once and are never reaped: each zombie holds its pid until the end
    code = ("import os, time\nn = 0\nwhile n < 5000:\n    try:\n        if os.fork() == 0:\n"
            "            os._exit(0)\n    except OSError:\n        break\n    n += 1\n"
            "print(n)\ntime.sleep(0.5)")
    result = run_py(sandbox, code, marker, timeout=10)
    assert not result.timed_out and 0 < int(lines(result)[0]) < 4 * sandbox.config.pids_max
    assert_clean(marker)
    zombies = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _is_zombie(p)]
    assert len(zombies) < 50, len(zombies)  # the pid namespace's teardown reaped them
    assert_healthy(grader)


def _is_zombie(proc: Path) -> bool:
    try:
        return ") Z " in (proc / "stat").read_text()
    except OSError:
        return False


def test_invalid_utf8_on_stdout(sandbox, grader, marker):
    code = "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe\\xc3(\\x80 9\\n')"
    result = run_py(sandbox, code, marker)
    assert result.stdout == b"\xff\xfe\xc3(\x80 9\n"  # kept as bytes
    grade = grader.run("import sys\nprint('\\udcff' + str(int(input()) ** 2))", SQUARE).grade
    assert grade.verdict in (RUNTIME_ERROR, WRONG_ANSWER), grade
    surrogate = "import os\nos.write(1, b'\\xff\\xfe' * 1000)\nprint(int(input()) ** 2)"
    assert grader.run(surrogate, SQUARE).grade.verdict == PASS  # os.write bypasses capture
    assert_clean(marker)
    assert_healthy(grader)


def test_huge_single_line_on_stdout(sandbox, grader, marker):
    code = "import os\nos.write(1, b'9' * (64 * 2**20))"
    result = run_py(sandbox, code, marker, timeout=10)
    assert result.stdout_truncated and len(result.stdout) == sandbox.config.max_output_bytes
    assert b"\n" not in result.stdout
    grade = grader.run("print('9' * (32 * 2**20))", SQUARE).grade
    assert grade.verdict == WRONG_ANSWER, grade
    assert_clean(marker)
    assert_healthy(grader)


def test_stdin_that_never_ends(sandbox, grader, marker):
    # the supervisor must not block feeding 64 MiB to a program that never reads it...
    result = sandbox.run([sandbox.config.python, "-I", "-S", "-c",
                          f"# {marker}\nimport time\ntime.sleep(3600)"],
                         stdin=b"1\n" * (32 * 2**20), timeout=2)
    assert result.timed_out and result.wall_s < 5
    # ...and a program that keeps reading past the end of its input meets the per-test alarm
    grade = grader.run("import sys\nwhile True:\n    sys.stdin.readline()", SQUARE).grade
    assert grade.verdict == TIME_LIMIT, grade
    assert_clean(marker)
    assert_healthy(grader)


def test_ipv6_network_attempts_fail(sandbox, marker):
    listener = socket.create_server(("::1", 0), family=socket.AF_INET6)
    listener.settimeout(0.3)
    port = listener.getsockname()[1]
    code = (f"import socket\nfor addr in [('::1', {port}), ('2606:4700:4700::1111', 53)]:\n"
            "    try:\n        socket.create_connection(addr, timeout=2)\n"
            "        print('CONNECTED')\n    except OSError as e:\n"
            "        print('blocked', e.errno)")
    result = run_py(sandbox, code, marker)
    with listener, pytest.raises(TimeoutError):
        listener.accept()
    out = result.stdout.decode()
    assert out.count("blocked") == 2 and "CONNECTED" not in out, out


def test_unix_socket_attempts_fail(sandbox, host_dir, marker):
    path = host_dir / "daemon.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    path.chmod(0o777)  # a world-writable daemon socket that the read-only / still shows
    server.listen()
    server.settimeout(0.3)
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(f"\0{marker}")
    abstract.listen()
    abstract.settimeout(0.3)
    code = (f"import socket\nfor addr in ['{path}', '\\0{marker}']:\n    try:\n"
            "        s = socket.socket(socket.AF_UNIX)\n        s.connect(addr)\n"
            "        print('CONNECTED')\n    except OSError as e:\n"
            "        print('blocked', e.errno)\n"
            "a, b = socket.socketpair()\na.send(b'ok')\nprint(b.recv(2))")
    result = run_py(sandbox, code, marker)
    for listener in (server, abstract):
        with listener, pytest.raises(TimeoutError):
            listener.accept()
    out = result.stdout.decode()
    assert out.count("blocked 13") == 2 and "CONNECTED" not in out, out  # EACCES (seccomp)
    assert "b'ok'" in out  # an anonymous pair stays usable: it reaches nobody
