"""What a grader returns, and the verdict codes shared by the math and code graders."""

from __future__ import annotations

from dataclasses import dataclass

# Bump when any grading rule changes; stored with every result.
# 2: math compat modes, a trailing period dropped, the grader_error verdict.
GRADER_VERSION = "2"

PASS = "pass"
WRONG_ANSWER = "wrong_answer"
NO_ANSWER = "no_answer"  # math: no \boxed{}; code: no fenced block
TIME_LIMIT = "time_limit"  # code: per-test or global timeout
RUNTIME_ERROR = "runtime_error"
COMPILE_ERROR = "compile_error"
SANDBOX_ERROR = "sandbox_error"  # the sandbox itself failed; never the program's fault
GRADER_TIMEOUT = "grader_timeout"  # math: math-verify did not finish in time
# math: math-verify raised, or its worker died (killed, OOM) on every attempt
GRADER_ERROR = "grader_error"
VERDICTS = (
    PASS, WRONG_ANSWER, NO_ANSWER, TIME_LIMIT, RUNTIME_ERROR, COMPILE_ERROR, SANDBOX_ERROR,
    GRADER_TIMEOUT, GRADER_ERROR,
)
# Verdicts that say the grader, not the completion, failed: scored 0 but counted apart
# (train log `grader_errors`, problems table `grader_errors`, mechanism table).
GRADER_FAILURES = (SANDBOX_ERROR, GRADER_TIMEOUT, GRADER_ERROR)


@dataclass(frozen=True)
class Grade:
    """The verdict on one completion. `correct` is exactly `verdict == "pass"`."""

    verdict: str
    reason: str = ""  # human-readable detail: the failing test, the exception, the timeout
    extracted: str | None = None  # the boxed answer or the code block that was graded

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"Grade.verdict must be one of {VERDICTS}, got {self.verdict!r}")

    @property
    def correct(self) -> bool:
        return self.verdict == PASS
