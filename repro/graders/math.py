"""Math grader: last `\\boxed{}` after the reasoning, compared with the gold answer.

Pipeline per completion (all cheap string work happens in the caller's process):
1. `strip_reasoning`: keep the text after the last `</think>`; an unclosed `<think>` means the
   reasoning was truncated, so there is no answer (lighteval/LCB strip reasoning the same way).
2. `last_boxed`: the last `\\boxed{...}`/`\\fbox{...}`, braces balanced. When the gold is a list
   and the last line with boxes holds several (`\\boxed{a}, \\boxed{b}`), they are joined with
   commas, as MathArena does.
3. Both sides plain integers (AIME) -> exact comparison of the digits, no math-verify: `068` ==
   `68`, `1,000` == `1000`, and 35-digit near misses differ. Decimals (`0.444444` for 4/9)
   stay with math-verify, which rounds to 6 digits.
4. Otherwise math-verify in a worker process: gold parsed as `$gold$`, the prediction as
   `\\boxed{pred}`. If both evaluate to exact rationals (integers, fractions, products such as
   `2^{25} \\cdot 26!`), they are compared exactly, because math-verify's 6-digit rounding equates
   e.g. `1/10^{20}` and `1/10^{21}`; else `verify(gold, pred)`, gold first. math-verify parses a
   comma list as a set, so two-element answers match in either order and a one-element answer
   to a two-element gold fails.

`compat="matharena"` reproduces MathArena's verdicts (its AIME/HMMT configurations, non-strict
parsing) where the project's own choices differ: MathArena grades the final message only (an
unclosed `<think>` leaves it empty: no answer, even by fallback), deletes `\\text{...}` content,
drops a trailing period, keeps the right side of `=` and the left of `\\approx`, and without a
box falls back to the last integer of the text (it flags that for review; here the reason says
so). The default keeps the project's rules above: `\\text{293}` is 293, no box is no answer; it
drops a trailing period too (`\\boxed{1037.}` is 1037). The comparison after normalisation is
the same engine in both modes (integers exactly, else math-verify).

math-verify can hang, so grading runs in persistent worker processes: a soft timer inside the
worker (SIGALRM, in its main thread, with math-verify's own alarms switched off so they cannot
clobber it) ends slow Python-level work and keeps the worker; a worker still silent
`_HARD_GRACE` seconds after the deadline is killed and replaced. Both give GRADER_TIMEOUT.
A worker that dies while grading (SIGKILL from outside, the OOM killer) is replaced and the
sample graded again by the new worker; a sample whose worker dies `_ATTEMPTS` times is a
GRADER_ERROR (counted like any verdict, never taken as a wrong answer).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from repro.benchmarks.problem import COMPAT_MODES, Problem
from repro.graders.base import (
    GRADER_ERROR,
    GRADER_TIMEOUT,
    NO_ANSWER,
    PASS,
    WRONG_ANSWER,
    Grade,
)

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
# A plain integer; a comma only as a thousands separator between 3-digit groups.
_INTEGER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)")
_HARD_GRACE = 1.0  # seconds past the soft deadline before the worker is killed
_STARTUP_TIMEOUT = 120.0  # a fresh worker must import math-verify within this
_ATTEMPTS = 2  # workers that may die on one sample before it is a grader error
_WORKER_CODE = "import repro.graders.math as m; m._worker_main({fd}, {timeout!r})"
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the directory that holds `repro`
_TRAILING_PERIOD = re.compile(r"\.\s*$")
_TEXT = re.compile(r"\\text\{.*?\}")  # MathArena: non-greedy, content deleted
_LAST_INTEGER = re.compile(r"\b\d+\b")


def strip_reasoning(text: str) -> str | None:
    """The answer part of a completion, or None when the reasoning never closed.

    A template that opens `<think>` in the prompt leaves a truncated completion with no tag at
    all; that is indistinguishable from a tag-free answer here, so callers should also look
    at the finish reason.
    """
    _, closed, tail = text.rpartition("</think>")
    answer = tail if closed else text
    return None if "<think>" in answer else answer


def _box_at(text: str, match: re.Match[str]) -> tuple[str, int] | None:
    """(content, end) of the box opened by `match`; None if its braces never balance."""
    depth, i = 1, match.end()
    while i < len(text):
        ch = text[i]
        if ch == "\\":  # `\{` and `\}` are literal braces, not grouping
            i += 2
            continue
        depth += (ch == "{") - (ch == "}")
        i += 1
        if depth == 0:
            return text[match.end():i - 1], i
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{}`/`\\fbox{}`; None if there is none or it is unbalanced."""
    openers = list(_BOX_OPEN.finditer(text))
    if not openers:
        return None
    box = _box_at(text, openers[-1])
    return None if box is None else box[0]


def _final_boxes(text: str) -> list[str]:
    """Contents of the top-level boxes on the last line that opens one (for list answers)."""
    openers = list(_BOX_OPEN.finditer(text))
    line_start = text.rfind("\n", 0, openers[-1].start()) + 1 if openers else 0
    contents, end = [], line_start
    for match in openers:
        if match.start() < end:  # before that line, or nested in the previous box
            continue
        box = _box_at(text, match)
        if box is None:
            return []
        contents.append(box[0])
        end = box[1]
    return contents


def _is_list(gold: str) -> bool:
    """True when the gold has a comma outside any bracket (and is not `1,000`)."""
    depth = 0
    for ch in gold:
        depth += (ch in "{([") - (ch in "})]")
        if ch == "," and depth == 0:
            return _as_integer(gold) is None
    return False


def _as_integer(answer: str) -> str | None:
    """Canonical digits of a plain integer answer ('068' -> '68'), else None."""
    s = answer.replace("$", "").replace("{,}", ",").replace("\\,", "").replace("\\!", "").strip()
    if not _INTEGER.fullmatch(s):
        return None
    digits = s.lstrip("+-").replace(",", "").lstrip("0") or "0"
    return "-" + digits if s.startswith("-") and digits != "0" else digits


def _exact_rational(parsed: list[Any]) -> Any:
    """The first parse as an exact sympy Rational, or None if it is anything else."""
    import sympy

    if not parsed or not isinstance(parsed[0], sympy.Basic):
        return None
    try:
        value = parsed[0].doit()
    except Exception:  # leave odd objects to math-verify
        return None
    return value if isinstance(value, sympy.Rational) else None


def _equivalent(gold: str, pred: str) -> bool:
    """math-verify comparison, gold first, with exact arithmetic when both sides are rational."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    gold_parsed = parse(
        f"${gold.replace('$', '')}$",
        extraction_config=[LatexExtractionConfig(), ExprExtractionConfig()],
        parsing_timeout=None,
    )
    pred_parsed = parse(
        f"\\boxed{{{pred.replace('$', '')}}}",
        extraction_config=[LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()],
        parsing_timeout=None,
    )
    gold_q, pred_q = _exact_rational(gold_parsed), _exact_rational(pred_parsed)
    if gold_q is not None and pred_q is not None:
        return bool(gold_q == pred_q)
    return verify(gold_parsed, pred_parsed, timeout_seconds=None)


class _SoftTimeout(BaseException):
    """Raised by SIGALRM; a BaseException so math-verify's `except Exception` cannot eat it."""


def _raise_soft_timeout(signum: int, frame: object) -> None:
    raise _SoftTimeout


def _worker_main(fd: int, timeout: float) -> None:
    """Serve (gold, pred) requests until the socket closes; replies ("ok", bool) or a failure."""
    conn = Connection(fd)
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout disabled" warnings
    signal.signal(signal.SIGALRM, _raise_soft_timeout)
    _equivalent("1", "1")  # pay math-verify's lazy setup before the first deadline starts
    conn.send(("ready", None))
    while True:
        try:
            gold, pred = conn.recv()
        except EOFError:
            return
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                reply: tuple[str, Any] = ("ok", _equivalent(gold, pred))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _SoftTimeout:
            reply = ("timeout", None)
        except Exception as exc:
            reply = ("error", f"{type(exc).__name__}: {str(exc)[:200]}")
        conn.send(reply)


class _Worker:
    """One grading process and its socket; `job` is (index, gold, pred) while it is busy.

    A `python -c` child, not multiprocessing "spawn", which re-runs the caller's `__main__`
    (breaking scripts without a main guard). It exits when the socket closes.
    """

    def __init__(self, timeout: float) -> None:
        ours, theirs = socket.socketpair()
        code = _WORKER_CODE.format(fd=theirs.fileno(), timeout=timeout)
        path = os.pathsep.join(p for p in (_PACKAGE_ROOT, os.environ.get("PYTHONPATH")) if p)
        self.process = subprocess.Popen(
            [sys.executable, "-c", code], pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": path},
            start_new_session=True,  # a Ctrl-C in the terminal is the parent's to handle
        )
        theirs.close()
        self.conn = Connection(ours.detach())
        self.ready = False
        self.job: tuple[int, str, str] | None = None
        self.deadline = time.monotonic() + _STARTUP_TIMEOUT

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        self.conn.close()


class MathGrader:
    """Grades math completions; reuse one instance so worker start-up is paid once."""

    def __init__(self, timeout: float = 5.0, workers: int = 1, compat: str = "default") -> None:
        if compat not in COMPAT_MODES["math"]:
            raise ValueError(f"MathGrader: compat must be one of {COMPAT_MODES['math']}, "
                             f"got {compat!r}")
        if timeout <= 0:
            raise ValueError(f"MathGrader: timeout must be > 0 seconds, got {timeout}")
        if workers < 1:
            raise ValueError(f"MathGrader: workers must be >= 1, got {workers}")
        self.timeout = timeout
        self.compat = compat
        self.n_workers = workers
        self._workers: list[_Worker] = []  # started lazily: all-integer sets never need them
        self._deaths: dict[int, int] = {}  # sample index -> workers that died grading it

    def grade(self, problem: Problem, completion: str) -> Grade:
        return self.grade_many([(problem, completion)])[0]

    def grade_many(self, items: list[tuple[Problem, str]]) -> list[Grade]:
        """Grades in input order; the math-verify cases are spread over the workers."""
        grades: list[Grade | None] = [None] * len(items)
        pending: deque[tuple[int, str, str]] = deque()
        for index, (problem, completion) in enumerate(items):
            outcome = _prepare(problem, completion, self.compat)
            if isinstance(outcome, Grade):
                grades[index] = outcome
            else:
                pending.append((index, *outcome))
        if pending:
            self._deaths = {}
            self._run(pending, grades)
        assert all(g is not None for g in grades)
        return grades  # type: ignore[return-value]

    def _run(self, pending: deque[tuple[int, str, str]], grades: list[Grade | None]) -> None:
        while len(self._workers) < self.n_workers:
            self._workers.append(_Worker(self.timeout))
        try:
            self._dispatch(pending, grades)
        except BaseException:  # busy workers would answer for jobs nobody waits for any more
            self.close()
            raise

    def _dispatch(self, pending: deque[tuple[int, str, str]], grades: list[Grade | None]) -> None:
        while pending or any(w.job for w in self._workers):
            for slot, worker in enumerate(self._workers):
                if worker.ready and worker.job is None and pending:
                    if worker.process.poll() is not None:  # died while idle: start a fresh one
                        worker.kill()
                        self._workers[slot] = _Worker(self.timeout)
                        continue
                    worker.job = pending.popleft()
                    worker.conn.send(worker.job[1:])
                    worker.deadline = time.monotonic() + self.timeout + _HARD_GRACE
            waiting = [w for w in self._workers if w.job or not w.ready]
            next_deadline = min(w.deadline for w in waiting)
            wait([w.conn for w in waiting], timeout=max(0.0, next_deadline - time.monotonic()))
            for slot, worker in enumerate(self._workers):
                self._collect(slot, worker, grades, pending)

    def _collect(self, slot: int, worker: _Worker, grades: list[Grade | None],
                 pending: deque[tuple[int, str, str]]) -> None:
        """Take this worker's reply if any; replace it if it died (the sample goes back to the
        front of the queue, up to `_ATTEMPTS` deaths) or overran its deadline."""
        if worker.ready and worker.job is None:
            return
        try:
            message = worker.conn.recv() if worker.conn.poll() else None
        except (EOFError, ConnectionResetError):  # reset: it died with our request unread
            worker.process.wait()
            if worker.job is None:
                raise RuntimeError(
                    f"math grader worker exited during start-up (code {worker.process.returncode});"
                    " is math-verify installed in this environment?"
                ) from None
            job, code = worker.job, worker.process.returncode
            deaths = self._deaths[job[0]] = self._deaths.get(job[0], 0) + 1
            worker.kill()
            self._workers[slot] = _Worker(self.timeout)
            if deaths < _ATTEMPTS:
                pending.appendleft(job)
            else:
                grades[job[0]] = Grade(GRADER_ERROR, f"math-verify worker died {deaths} times "
                                                     f"on this sample (last exit {code})", job[2])
            return
        if message is None:
            if time.monotonic() < worker.deadline:
                return
            if worker.job is None:
                worker.kill()
                raise RuntimeError(f"math grader worker not ready after {_STARTUP_TIMEOUT:g} s")
            self._replace(slot, worker, grades, f"killed after {self.timeout:g} s")
        elif message[0] == "ready":
            worker.ready = True
        else:
            assert worker.job is not None
            index, gold, pred = worker.job
            grades[index] = _reply_grade(message, gold, pred, self.timeout)
            worker.job = None

    def _replace(self, slot: int, worker: _Worker, grades: list[Grade | None], why: str) -> None:
        assert worker.job is not None
        index, _, pred = worker.job
        grades[index] = Grade(GRADER_TIMEOUT, f"math-verify {why}", pred)
        worker.kill()
        self._workers[slot] = _Worker(self.timeout)

    def close(self) -> None:
        for worker in self._workers:
            worker.kill()
        self._workers = []

    def __enter__(self) -> MathGrader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _prepare(problem: Problem, completion: str, compat: str = "default") -> Grade | tuple[str, str]:
    """A final Grade when no math-verify call is needed, else the (gold, pred) to compare."""
    gold = problem.answer
    if gold is None:
        raise ValueError(f"MathGrader: problem {problem.problem_id!r} has no gold answer")
    answer = strip_reasoning(completion)
    if answer is None:
        return Grade(NO_ANSWER, "reasoning not closed (<think> without </think>)")
    boxes = _final_boxes(answer) if _is_list(gold) else []
    pred = ", ".join(boxes) if len(boxes) > 1 else last_boxed(answer)
    fallback = ""
    if compat == "matharena":
        if pred is None:
            found = _LAST_INTEGER.findall(answer)
            pred = found[-1] if found else None
            fallback = " (no box: last integer of the text, MathArena's non-strict fallback)"
        if pred is not None:
            pred = _matharena_normalise(pred)
            if not pred:  # `\boxed{\text{293}}`: MathArena parses nothing and marks it wrong
                return _wrong(gold, pred, " (nothing left after MathArena's normalisation)")
    if pred is None or not pred.strip():
        return Grade(NO_ANSWER, "no complete \\boxed{} answer", pred)
    pred = _TRAILING_PERIOD.sub("", pred) or pred  # `\\boxed{1037.}`: a sentence's full stop
    gold_int, pred_int = _as_integer(gold), _as_integer(pred)
    if gold_int is not None and pred_int is not None:
        if gold_int == pred_int:
            return Grade(PASS, fallback.strip(" ()"), extracted=pred)
        return _wrong(gold, pred, fallback)
    return gold, pred


def _matharena_normalise(pred: str) -> str:
    """MathArena's `normalize_string` steps that change verdicts (parser.py): a plain integer
    is kept as is; else `\\left`/`\\right`, `$`, thin spaces and a trailing period go,
    `\\text{...}` is deleted with its content, `=` keeps its right side, `\\approx` its left."""
    if re.fullmatch(r"\s*\d+\s*", pred):
        return pred.strip()
    s = pred.replace("\\left", "").replace("\\right", "").replace("$", "")
    for space in ("\\;", "\\:", "\\,", "\\!"):
        s = s.replace(space, "")
    s = _TRAILING_PERIOD.sub("", s)
    s = _TEXT.sub("", s)
    if "=" in s:
        s = s.split("=")[-1]
    if "\\approx" in s:
        s = s.split("\\approx")[0]
    return s.strip()


def _reply_grade(message: tuple[str, Any], gold: str, pred: str, timeout: float) -> Grade:
    status, value = message
    if status == "timeout":
        return Grade(GRADER_TIMEOUT, f"math-verify exceeded {timeout:g} s", pred)
    if status == "error":
        return Grade(GRADER_ERROR, f"math-verify raised {value}; expected {gold}, got {pred}", pred)
    return Grade(PASS, extracted=pred) if value else _wrong(gold, pred)


def _wrong(gold: str, pred: str, note: str = "") -> Grade:
    return Grade(WRONG_ANSWER, f"expected {gold}, got {pred}{note}", pred)
