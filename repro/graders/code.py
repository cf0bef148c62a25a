"""LiveCodeBench code grading: extract the program, run its tests in one sandbox, read the verdict.

Extraction follows LCB (`lcb_runner/utils/extraction_utils.py`) after stripping the reasoning:
the text after the last `</think>` (an unclosed `<think>` means there is no answer yet), then
the lines strictly between the last two lines that contain "```" (the language tag is ignored).

Grading semantics live in `lcb_harness.py`, which runs inside the sandbox, one process per
generation, tests in order, stopping at the first failure. This side supervises it: it writes
the harness, the program and the tests (JSON) into the sandbox, enforces LCB's global timeout
`(timeout + 1) * n_tests + 5` s as the sandbox's wall clock, and turns what came back into a
`Grade`. Only nonce-bearing records from the harness's result channel count; the program's own
output is never parsed (see the harness docstring). A run SIGKILLed by someone other than our
wall clock (another process, the OOM killer), or a sandbox that failed to start, is run once
more; the reason says so, and a second kill is graded as what it is (killed by SIGKILL).
"""

from __future__ import annotations

import functools
import json
import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from repro.benchmarks.problem import COMPAT_MODES, CodeTests, Problem
from repro.graders.base import (
    COMPILE_ERROR,
    NO_ANSWER,
    PASS,
    RUNTIME_ERROR,
    SANDBOX_ERROR,
    TIME_LIMIT,
    WRONG_ANSWER,
    Grade,
)
from repro.sandbox import Sandbox, SandboxError, SandboxResult

HARNESS_SOURCE = Path(__file__).with_name("lcb_harness.py").read_bytes()
PYTHON_FLAGS = ("-I", "-S")  # isolated, no site: ~10 ms start-up; the harness recreates exit()
_HARNESS_VERDICTS = (PASS, WRONG_ANSWER, TIME_LIMIT, RUNTIME_ERROR, COMPILE_ERROR)
_ATTEMPTS = 2  # a run killed from outside (or failing to start) is repeated once
_FENCE = "```"


def strip_reasoning(completion: str) -> str | None:
    """The answer part of a completion; None while a `<think>` block is still open."""
    answer = completion.rsplit("</think>", 1)[1] if "</think>" in completion else completion
    return None if "<think>" in answer else answer


def extract_code(completion: str) -> str | None:
    """LCB's rule on the answer part: lines between the last two lines containing ```."""
    answer = strip_reasoning(completion)
    if answer is None:
        return None
    lines = answer.split("\n")
    fences = [i for i, line in enumerate(lines) if _FENCE in line]
    if len(fences) < 2:
        return None
    return "\n".join(lines[fences[-2] + 1: fences[-1]])


@dataclass(frozen=True)
class HarnessRun:
    """A grade with the evidence behind it (the raw sandbox result and the harness records)."""

    grade: Grade
    sandbox: SandboxResult | None
    records: list[dict] = field(default_factory=list)


@functools.lru_cache(maxsize=4)
def _job_json(tests: CodeTests, timeout: int, compat: str) -> bytes:
    """The tests file, serialised once per problem (all k generations of it share it)."""
    return json.dumps({"inputs": list(tests.inputs), "outputs": list(tests.outputs),
                       "fn_name": tests.fn_name, "timeout": timeout, "compat": compat}).encode()


class CodeGrader:
    """Grades code completions with LCB semantics, one sandbox per generation."""

    def __init__(self, sandbox: Sandbox, timeout_per_test: int = 6, workers: int = 2,
                 compat: str = "lcb") -> None:
        if not isinstance(timeout_per_test, int) or timeout_per_test < 1:
            raise ValueError(f"CodeGrader.timeout_per_test must be an int >= 1 (LCB uses integer "
                             f"SIGALRM seconds), got {timeout_per_test!r}")
        if workers < 1:
            raise ValueError(f"CodeGrader.workers must be >= 1, got {workers}")
        if compat not in COMPAT_MODES["code"]:  # lcb_harness: LCB's mocked stdin or byte streams
            raise ValueError(f"CodeGrader.compat must be one of {COMPAT_MODES['code']}, "
                             f"got {compat!r}")
        sandbox.check()  # refuse up front, with the fix in the message, if none can start
        self.sandbox, self.timeout_per_test = sandbox, timeout_per_test
        self.workers, self.compat = workers, compat

    @property
    def sandbox_mode(self) -> str:
        return self.sandbox.mode

    def global_timeout(self, n_tests: int) -> float:
        """LCB's whole-generation limit, enforced as the sandbox's wall clock."""
        return float((self.timeout_per_test + 1) * n_tests + 5)

    def grade(self, problem: Problem, completion: str) -> Grade:
        if problem.tests is None:
            raise ValueError(f"CodeGrader: problem {problem.problem_id!r} has no code tests")
        code = extract_code(completion)
        if code is None:
            why = ("the reasoning (<think>) never closed" if strip_reasoning(completion) is None
                   else "no fenced code block (fewer than two ``` lines)")
            return Grade(NO_ANSWER, why, None)
        return self.run(code, problem.tests).grade

    def grade_many(self, items: list[tuple[Problem, str]]) -> list[Grade]:
        """Grade in a pool of `workers` threads (each drives one sandbox); order is kept.

        A program is run once per problem however many samples produced it (a small policy
        repeats itself a lot): the verdict is a function of (code, tests), and the one source of
        variation, timing near the limit, is not averaged away by LCB's evaluator either."""
        keys = [(problem.problem_id, problem.text_hash(), extract_code(text) or text)
                for problem, text in items]
        first = {key: i for i, key in reversed(list(enumerate(keys)))}
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            grades = dict(zip(first, pool.map(lambda i: self.grade(*items[i]), first.values()),
                              strict=True))
        return [grades[key] for key in keys]

    def run(self, code: str, tests: CodeTests) -> HarnessRun:
        """Run `code` against `tests` in a fresh sandbox and classify the outcome."""
        nonce = secrets.token_hex(16)
        files = {"lcb_harness.py": HARNESS_SOURCE,
                 "tests.json": _job_json(tests, self.timeout_per_test, self.compat),
                 "solution.py": code.encode("utf-8", errors="replace")}
        argv = [self.sandbox.config.python, *PYTHON_FLAGS, "lcb_harness.py", "tests.json",
                "solution.py", Sandbox.RESULT_FD]
        timeout = self.global_timeout(len(tests.inputs))
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                result = self.sandbox.run(argv, files=files, stdin=f"{nonce}\n".encode(),
                                          timeout=timeout, result_channel=True)
            except SandboxError as exc:
                if attempt < _ATTEMPTS:
                    continue
                return HarnessRun(Grade(SANDBOX_ERROR, str(exc), code), None)
            records = _records(result.result, nonce)
            if not _killed_from_outside(result, records):
                break
        grade = _classify(result, records, len(tests.inputs), timeout, code)
        if attempt > 1:
            again = ("killed by SIGKILL on every attempt (out of memory?)"
                     if _killed_from_outside(result, records) else "graded again")
            grade = Grade(grade.verdict, f"{grade.reason} [attempt {attempt}: {again}]", code)
        return HarnessRun(grade, result, records)


def _killed_from_outside(result: SandboxResult, records: list[dict]) -> bool:
    """SIGKILL without a verdict that our wall clock did not send: another process, or the
    OOM killer. The program may be innocent, so the run is repeated once."""
    return (result.signal_name == "SIGKILL" and not result.timed_out
            and not any("verdict" in r for r in records))


def _records(channel: bytes, nonce: str) -> list[dict]:
    """The harness's records: JSON lines that carry this run's nonce (anything else is ignored)."""
    out = []
    for line in channel.decode("utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("nonce") == nonce:
            out.append(record)
    return out


def _where(record: dict | None, n_tests: int) -> str:
    if record is None or record.get("test") is None:
        return "while loading the program" if record is not None else "before the program ran"
    return f"test {record['test'] + 1}/{n_tests}"


def _tail(data: bytes, limit: int = 600) -> str:
    text = data.decode("utf-8", errors="replace").strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def _classify(result: SandboxResult, records: list[dict], n_tests: int, timeout: float,
              code: str) -> Grade:
    final = next((r for r in reversed(records) if "verdict" in r), None)
    if final is not None:
        verdict = final["verdict"]
        if verdict not in _HARNESS_VERDICTS:
            return Grade(SANDBOX_ERROR, f"harness sent an unknown verdict {verdict!r}", code)
        if verdict == PASS:
            return Grade(PASS, f"{n_tests}/{n_tests} tests passed", code)
        return Grade(verdict, f"{_where(final, n_tests)}: {final.get('reason', '')}", code)
    last = records[-1] if records else None
    if result.timed_out:
        return Grade(TIME_LIMIT, f"global timeout of {timeout:.0f} s exceeded at "
                                 f"{_where(last, n_tests)}", code)
    ended = (f"killed by {result.signal_name}" if result.returncode < 0
             else f"exit code {result.returncode}")
    if last is None:  # the program never got control: the sandbox or the harness failed
        return Grade(SANDBOX_ERROR, f"no verdict from the harness ({ended}): "
                                    f"{_tail(result.stderr) or 'no stderr'}", code)
    if result.signal_name == "SIGXCPU":
        return Grade(TIME_LIMIT, f"CPU time limit at {_where(last, n_tests)}", code)
    return Grade(RUNTIME_ERROR, f"{_where(last, n_tests)}: the process ended without a verdict "
                                f"({ended}); stderr: {_tail(result.stderr) or 'none'}", code)
