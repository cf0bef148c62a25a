"""LiveCodeBench grading harness; runs INSIDE the sandbox, one process per generation.

    python3 -I -S lcb_harness.py TESTS_JSON SOLUTION_PY RESULT_FD    (a nonce line on stdin)

Standard library only. Reproduces `lcb_runner/evaluation/testing_util.py`: LCB's import block
is prepended, `reliability_guard` applied, stdin programs unwrapped from a final
`if __name__ == '__main__':` with their non-import statements moved into `wrapped_function()`,
functional programs called as `Solution().fn(*json_args)` (or the module-level function), an
integer SIGALRM of `timeout` s per test, and grading stops at the first failure.

compat="lcb" (parity with LCB main; older releases used a bare StringIO, which iterates but has
no `.buffer`): per test `sys.stdin` is LCB's MockStdinWithBuffer: `read()` returns the whole
input on every call, `readline()`/`input()` advance, `readlines()` is `split("\\n")`, iteration
raises TypeError; `sys.stdin.buffer.read()` returns all bytes on every call and
`.buffer.readline()` the FIRST line on every call. `builtins.open` is mock_open of the input,
but the import block already bound the real `open` (and `from sys import *` the real `stdin`) as
module globals, so a bare `open(0)` reads fd 0 (/dev/null), as in LCB's worker. stdout is a
StringIO: `sys.stdout.buffer` and `os.write(1, ...)` escape the capture.
compat="fixed": a judge's real streams: the input is a file on fd 0 and fd 1 is a file, so
`.buffer`, iteration, `open(0)`, `os.read(0)` and `os.write(1)` all work. Report it separately.
With `-S` site's `exit` is missing: it is recreated (closes stdin, raises SystemExit); `quit` is
None, as reliability_guard leaves it.

Protocol: the nonce is read from stdin before generated code runs, then fd 0 becomes /dev/null.
Records are JSON lines with the nonce on RESULT_FD, a pipe apart from stdout: "load", "test" i
before each test, then one with "verdict". Program output is never parsed, so it cannot forge a
verdict by accident; code in this process can still inspect the harness (as in LCB itself): the
sandbox protects the host, not the grade, from deliberately adversarial programs.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import faulthandler
import io
import json
import os
import signal
import sys
import tempfile
import types
from collections.abc import Callable
from decimal import Decimal

_STAR = ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random",
         "statistics", "itertools", "functools", "operator", "io", "sys", "json", "builtins",
         "typing")
IMPORT_BLOCK = ("".join(f"from {m} import *\n" for m in _STAR)
                + "".join(f"import {m}\n" for m in _STAR[:-2])  # all but builtins, typing
                + "sys.setrecursionlimit(50000)\n")
# bound before generated code runs, which may rebind or null module attributes
_open, _dumps, _write, _dup2, _exit_now = open, json.dumps, os.write, os.dup2, os._exit


_StdioRunner = Callable[[Callable[[], object], str, int], str]  # (method, input, timeout) -> stdout


class TimeoutException(Exception):
    """Raised by the per-test alarm; LCB recognises it by name in repr()."""


class _Fail(Exception):
    def __init__(self, verdict: str, test: int | None, reason: str) -> None:
        super().__init__(reason)
        self.verdict, self.test, self.reason = verdict, test, reason


def _on_alarm(signum: int, frame: object) -> None:
    raise TimeoutException("time limit per test exceeded (SIGALRM)")


def _short(value: object, limit: int = 300) -> str:
    """LCB's truncatefn: keep both ends of long values."""
    try:
        text = value if isinstance(value, str) else repr(value)
    except Exception as exc:
        text = f"<unprintable {type(value).__name__}: {type(exc).__name__}>"
    if len(text) <= limit:
        return text
    return text[: limit // 2] + "...(truncated) ..." + text[-limit // 2:]


def _describe(exc: BaseException) -> str:
    return _short(f"{type(exc).__name__}: {exc}")


def _error_verdict(exc: BaseException) -> str:
    return "time_limit" if "timeoutexception" in repr(exc).lower() else "runtime_error"


def _exit(code: object = None) -> None:
    """site.Quitter's behaviour, for interpreters started with -S."""
    with contextlib.suppress(Exception):
        sys.stdin.close()
    raise SystemExit(code)


def _reliability_guard() -> None:
    """LCB's reliability_guard (without a memory limit, as LCB calls it). Not a sandbox."""
    import shutil
    import subprocess

    faulthandler.disable()
    builtins.quit = None
    os.environ["OMP_NUM_THREADS"] = "1"
    for name in ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid",
                 "fork", "forkpty", "killpg", "rename", "renames", "truncate", "replace",
                 "unlink", "fchmod", "fchown", "chmod", "chown", "chroot", "lchflags", "lchmod",
                 "lchown", "getcwd", "chdir"):
        setattr(os, name, None)
    shutil.rmtree = shutil.move = shutil.chown = None
    subprocess.Popen = None
    builtins.help = None
    for name in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
        sys.modules[name] = None


def _unwrap_main(code: str) -> str:
    """LCB's clean_if_name: unwrap a final `if __name__ == '__main__':` block."""
    try:
        tree = ast.parse(code)
        last = tree.body[-1]
        if isinstance(last, ast.If) and ast.unparse(last.test).strip() == "__name__ == '__main__'":
            code = ast.unparse(tree.body[:-1]) + "\n" + ast.unparse(last.body)
    except Exception:
        pass
    return code


def _wrap_in_function(code: str) -> str:
    """LCB's make_function: imports stay at module level, the rest becomes wrapped_function()."""
    try:
        tree = ast.parse(code)
        imports = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
        others = [s for s in tree.body if not isinstance(s, (ast.Import, ast.ImportFrom))]
        function = ast.FunctionDef(
            name="wrapped_function",
            args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
            body=others, decorator_list=[], lineno=-1)
        return IMPORT_BLOCK + "\n" + ast.unparse(imports) + "\n" + ast.unparse(function)
    except Exception:
        return code


def _load(code: str, timeout: int, report: _Reporter) -> object:
    """LCB's compile_code: exec as module `tmp_sol`; instantiate Solution if the text names it."""
    report.emit(event="load")
    signal.alarm(timeout)
    try:
        try:
            compiled = compile(code, "<string>", "exec")
        except (SyntaxError, ValueError, RecursionError) as exc:
            raise _Fail("compile_error", None, _describe(exc)) from None
        module = types.ModuleType("tmp_sol", "")
        exec(compiled, module.__dict__)
        return module.Solution() if "class Solution" in code else module
    except _Fail:
        raise
    except BaseException as exc:
        raise _Fail(_error_verdict(exc), None, _describe(exc)) from None
    finally:
        signal.alarm(0)


def _attr(obj: object, name: str) -> object:
    try:
        return getattr(obj, name)
    except Exception:
        return None


class _LcbBuffer:
    """LCB's MockBuffer: whole input on read(), its first line on EVERY readline()."""

    def __init__(self, text: str) -> None:
        self._data = text.encode("utf-8")

    def read(self, *args: object) -> bytes:
        return self._data

    def readline(self, *args: object) -> bytes:
        return self._data.split(b"\n")[0] + b"\n"


class _LcbStdin:
    """LCB's MockStdinWithBuffer (see the module docstring for what each call returns)."""

    def __init__(self, text: str) -> None:
        self._text, self._stream, self.buffer = text, io.StringIO(text), _LcbBuffer(text)

    def read(self, *args: object) -> str:
        return self._text

    def readline(self, *args: object) -> str:
        return self._stream.readline(*args)

    def readlines(self, *args: object) -> list[str]:
        return self._text.split("\n")

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def _lcb_open(text: str) -> Callable[..., object]:
    """mock_open(read_data=input), built on first use (importing unittest.mock costs ~60 ms)."""
    handle = None

    def fake_open(*args: object, **kwargs: object) -> object:
        nonlocal handle
        if handle is None:
            from unittest.mock import mock_open
            handle = mock_open(read_data=text)
        return handle(*args, **kwargs)

    return fake_open


def _run_lcb(method: Callable[[], object], text: str, timeout: int) -> str:
    out = io.StringIO()
    out.close = lambda x: 1  # LCB's Capturing: sys.stdout.close() raises TypeError
    saved = sys.stdin, sys.stdout, builtins.open
    sys.stdin, sys.stdout, builtins.open = _LcbStdin(text), out, _lcb_open(text)
    signal.alarm(timeout)
    try:
        with contextlib.suppress(SystemExit):
            method()
    finally:
        signal.alarm(0)
        sys.stdin, sys.stdout, builtins.open = saved
    return out.getvalue()


class _RealStdio:
    """compat="fixed": fd 0 reads the input from a file, fd 1 writes to a file. Built before
    reliability_guard, which nulls os functions that tempfile needs."""

    def __init__(self) -> None:
        self._in = tempfile.TemporaryFile()  # noqa: SIM115 - kept open for the process
        self._out = tempfile.TemporaryFile()  # noqa: SIM115
        self._saved_out, self._null = os.dup(1), os.open(os.devnull, os.O_RDONLY)

    def __call__(self, method: Callable[[], object], text: str, timeout: int) -> str:
        fin, fout = self._in.fileno(), self._out.fileno()
        for fd in (fin, fout):
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
        data = text.encode("utf-8")
        while data:
            data = data[os.write(fin, data):]
        os.lseek(fin, 0, os.SEEK_SET)
        _dup2(fin, 0)
        _dup2(fout, 1)
        saved = sys.stdin, sys.stdout
        sys.stdin = _open(0, encoding="utf-8", closefd=False)
        sys.stdout = stdout = _open(1, "w", encoding="utf-8", closefd=False)
        signal.alarm(timeout)
        try:
            with contextlib.suppress(SystemExit):
                method()
            if not stdout.closed:
                stdout.flush()
        finally:
            signal.alarm(0)
            sys.stdin, sys.stdout = saved
            _dup2(self._null, 0)
            _dup2(self._saved_out, 1)
        os.lseek(fout, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fout, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", errors="replace")


def _stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(token) for token in line.split()]
    except Exception:
        return None


def _compare(got: str, expected: str) -> str | None:
    """LCB's stdout rule; None when the output is accepted, else why not."""
    got_lines, exp_lines = _stripped_lines(got), _stripped_lines(expected)
    if len(got_lines) != len(exp_lines):
        return (f"wrong answer: {len(got_lines)} output lines, expected {len(exp_lines)}; "
                f"got {_short(got)!r}, expected {_short(expected)!r}")
    for k, (g, e) in enumerate(zip(got_lines, exp_lines, strict=True)):
        if g == e:
            continue
        got_dec, exp_dec = _decimals(g), _decimals(e)
        if got_dec is not None and exp_dec is not None and got_dec == exp_dec:
            continue
        return f"wrong answer at line {k + 1}: got {_short(g)!r}, expected {_short(e)!r}"
    return None


def _grade_stdio(code: str, job: dict, report: _Reporter, run: _StdioRunner) -> int:
    timeout = job["timeout"]
    method = _attr(_load(_wrap_in_function(_unwrap_main(code)), timeout, report),
                   "wrapped_function")
    if method is None:
        raise _Fail("runtime_error", None, "no wrapped_function after LCB's stdin transform")
    for i, (text, expected) in enumerate(zip(job["inputs"], job["outputs"], strict=True)):
        report.emit(event="test", test=i)
        try:
            got = run(method, text, timeout)
        except BaseException as exc:
            raise _Fail(_error_verdict(exc), i,
                        f"{_describe(exc)} on input {_short(text)!r}") from None
        problem = _compare(got, expected)
        if problem is not None:
            raise _Fail("wrong_answer", i, f"{problem}; input {_short(text)!r}")
    return len(job["inputs"])


def _grade_call(code: str, job: dict, report: _Reporter) -> int:
    timeout, fn_name = job["timeout"], job["fn_name"]
    method = _attr(_load(IMPORT_BLOCK + "\n\n" + code, timeout, report), fn_name)
    if method is None:
        raise _Fail("runtime_error", None, f"the program defines no {fn_name!r}")
    try:
        all_args = [[json.loads(line) for line in text.split("\n")] for text in job["inputs"]]
        all_expected = [json.loads(text) for text in job["outputs"]]
    except ValueError as exc:
        raise _Fail("runtime_error", None, "test data is not JSON: " + _describe(exc)) from None
    for i, (args, expected) in enumerate(zip(all_args, all_expected, strict=True)):
        report.emit(event="test", test=i)
        signal.alarm(timeout)
        try:
            got = method(*args)
            signal.alarm(0)
            if isinstance(got, tuple):
                got = list(got)
            ok = bool(got == expected)
        except BaseException as exc:
            raise _Fail(_error_verdict(exc), i,
                        f"{_describe(exc)} on input {_short(args)}") from None
        finally:
            signal.alarm(0)
        if not ok:
            raise _Fail("wrong_answer", i, f"wrong answer on input {_short(args)}: "
                                           f"got {_short(got)}, expected {_short(expected)}")
    return len(all_args)


class _Reporter:
    def __init__(self, fd: int, nonce: str) -> None:
        self.fd, self.nonce = fd, nonce

    def emit(self, **record: object) -> None:
        data = (_dumps({"nonce": self.nonce, **record}) + "\n").encode()
        while data:
            data = data[_write(self.fd, data):]


def _read_nonce() -> str:
    """The first stdin line; then fd 0 becomes /dev/null, as in LCB's worker process."""
    data = b""
    while not data.endswith(b"\n") and (chunk := os.read(0, 256)):
        data += chunk
    null = os.open(os.devnull, os.O_RDONLY)
    _dup2(null, 0)
    os.close(null)
    return data.decode().strip()


def main(argv: list[str]) -> None:
    tests_path, code_path, fd = argv[1], argv[2], int(argv[3])
    os.set_inheritable(fd, False)
    report = _Reporter(fd, _read_nonce())
    with _open(tests_path, encoding="utf-8") as f:
        job = json.load(f)
    with _open(code_path, encoding="utf-8") as f:
        code = f.read()
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(50000)
    signal.signal(signal.SIGALRM, _on_alarm)
    builtins.exit = _exit
    stdin_mode = not job["fn_name"]
    if stdin_mode:
        run = _run_lcb if job["compat"] == "lcb" else _RealStdio()
    _reliability_guard()
    faulthandler.enable()  # a crash (e.g. C stack overflow) leaves a traceback on stderr
    try:
        passed = (_grade_stdio(code, job, report, run) if stdin_mode
                  else _grade_call(code, job, report))
        report.emit(verdict="pass", test=None, passed=passed, reason="")
    except _Fail as fail:
        report.emit(verdict=fail.verdict, test=fail.test, passed=fail.test or 0,
                    reason=fail.reason)
    _exit_now(0)  # never wait for threads the program left running


if __name__ == "__main__":
    main(sys.argv)
