"""The LiveCodeBench grader: extraction rules, then LCB semantics run in the real sandbox.

Every grading test goes through bubblewrap and `lcb_harness.py` exactly as an evaluation does;
nothing about the sandbox is mocked.
"""

from __future__ import annotations

import shutil

import pytest

from repro.benchmarks.problem import CodeTests, Problem
from repro.graders.base import (
    COMPILE_ERROR,
    NO_ANSWER,
    PASS,
    RUNTIME_ERROR,
    TIME_LIMIT,
    WRONG_ANSWER,
)
from repro.graders.code import CodeGrader, extract_code, strip_reasoning
from repro.sandbox import Sandbox

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None,
                                reason="bubblewrap is not installed (apt-get install bubblewrap)")


def fenced(code: str, tag: str = "python") -> str:
    return f"Here is my solution.\n```{tag}\n{code}\n```\nDone."


def stdin_problem(inputs: list[str], outputs: list[str]) -> Problem:
    return Problem("synth-lcb", "p-stdin", "q", tests=CodeTests(tuple(inputs), tuple(outputs)))


def call_problem(inputs: list[str], outputs: list[str], fn: str) -> Problem:
    return Problem("synth-lcb", "p-call", "q", tests=CodeTests(tuple(inputs), tuple(outputs), fn))


SQUARES = stdin_problem(["3\n", "5\n", "12\n"], ["9\n", "25\n", "144\n"])
PAIR_SUM = stdin_problem(["2\n5 7\n", "3\n1 2 3\n"], ["12\n", "6\n"])
ADD_K = call_problem(["[1, 2]\n3", "[4]\n5", "[]\n1"], ["[4, 5]", "[9]", "[]"], "addK")


@pytest.fixture(scope="module")
def grader() -> CodeGrader:
    return CodeGrader(Sandbox(), timeout_per_test=6, workers=2)


@pytest.fixture(scope="module")
def fast_grader() -> CodeGrader:
    """A 1 s per-test limit, for the timeout cases."""
    return CodeGrader(Sandbox(), timeout_per_test=1, workers=2)


@pytest.fixture(scope="module")
def fixed_grader() -> CodeGrader:
    return CodeGrader(Sandbox(), compat="fixed")


# ---- extraction ---------------------------------------------------------------------------

def test_extract_takes_lines_between_the_last_two_fence_lines() -> None:
    text = "```python\nfirst()\n```\nthen\n```py\nsecond()\nmore()\n```\ntrailing"
    assert extract_code(text) == "second()\nmore()"


def test_extract_ignores_the_language_tag_and_counts_any_line_containing_a_fence() -> None:
    assert extract_code("```cpp\nx = 1\n```") == "x = 1"
    assert extract_code("See: ```\nx = 2\nend ``` here") == "x = 2"
    assert extract_code("```\n```") == ""  # an empty block is graded (and fails), not no_answer


def test_extract_fewer_than_two_fences_is_none() -> None:
    assert extract_code("print(1)") is None
    assert extract_code("```python\nprint(1)") is None


def test_extract_strips_reasoning_first() -> None:
    thinking = "<think>\n```python\nprint('draft')\n```\n</think>"
    assert extract_code(thinking + "\n```python\nprint('final')\n```") == "print('final')"
    assert extract_code(thinking + "\nNo code after all.") is None
    assert extract_code("<think>\n```python\nprint('draft')\n```\n") is None  # never closed
    assert strip_reasoning("<think>a</think>b<think>c</think>d") == "d"
    assert strip_reasoning("no reasoning") == "no reasoning"


def test_no_code_block_is_no_answer(grader: CodeGrader) -> None:
    grade = grader.grade(SQUARES, "The answer is to square the number.")
    assert grade.verdict == NO_ANSWER and grade.extracted is None
    assert "fenced" in grade.reason
    assert grader.grade(SQUARES, "<think>still going ```").verdict == NO_ANSWER


# ---- stdin mode ---------------------------------------------------------------------------

def test_stdin_correct_solution_passes(grader: CodeGrader) -> None:
    grade = grader.grade(SQUARES, fenced("n = int(input())\nprint(n * n)"))
    assert grade.verdict == PASS and grade.correct, grade.reason
    assert grade.extracted == "n = int(input())\nprint(n * n)"
    assert grader.sandbox_mode == "bwrap"


def test_main_guard_is_unwrapped_and_exit_is_fine(grader: CodeGrader) -> None:
    code = ("import sys\ndef main():\n    n = int(sys.stdin.readline())\n    print(n * n)\n"
            "    exit()\n\nif __name__ == \"__main__\":\n    main()")
    assert grader.grade(SQUARES, fenced(code)).verdict == PASS
    assert grader.grade(SQUARES, fenced("import sys\nprint(int(input()) ** 2)\nsys.exit(0)")
                        ).verdict == PASS
    # reliability_guard sets quit = None, so quit() is a runtime error, as in LCB
    assert grader.grade(SQUARES, fenced("print(int(input()) ** 2)\nquit()")
                        ).verdict == RUNTIME_ERROR


def test_stdin_buffer_read_passes_in_lcb_mode(grader: CodeGrader) -> None:
    code = "import sys\ndata = sys.stdin.buffer.read().split()\nprint(sum(map(int, data[1:])))"
    assert grader.grade(PAIR_SUM, fenced(code)).verdict == PASS


def test_stdin_buffer_readline_replays_the_first_line_in_lcb_mode(
    grader: CodeGrader, fixed_grader: CodeGrader
) -> None:
    """LCB's MockBuffer.readline returns the first line every time: the second call gets
    "2" again, so this correct fast-I/O solution fails under LCB and passes on a real stream."""
    code = ("import sys\ninput = sys.stdin.buffer.readline\nn = int(input())\n"
            "print(sum(map(int, input().split())))")
    lcb = grader.grade(PAIR_SUM, fenced(code))
    assert lcb.verdict == WRONG_ANSWER and "got '2', expected '12'" in lcb.reason
    assert fixed_grader.grade(PAIR_SUM, fenced(code)).verdict == PASS


def test_iterating_stdin_fails_in_lcb_mode_and_works_when_fixed(
    grader: CodeGrader, fixed_grader: CodeGrader
) -> None:
    code = "import sys\nlines = [l for l in sys.stdin]\nprint(sum(map(int, lines[1].split())))"
    lcb = grader.grade(PAIR_SUM, fenced(code))
    assert lcb.verdict == RUNTIME_ERROR and "not iterable" in lcb.reason
    assert fixed_grader.grade(PAIR_SUM, fenced(code)).verdict == PASS
    raw = "import os\nos.write(1, str(sum(map(int, os.read(0, 99).split()[1:]))).encode())"
    assert fixed_grader.grade(PAIR_SUM, fenced(raw)).verdict == PASS


@pytest.mark.parametrize(("printed", "expected", "verdict"), [
    ("1.0", "1", PASS),
    ("0.50", "0.5", PASS),
    ("1e2", "100", PASS),
    ("1  2", "1 2", PASS),  # numeric tokens compare as Decimals, spacing aside
    ("0.3333333", "0.33333333", WRONG_ANSWER),  # no float tolerance
    ("a  b", "a b", WRONG_ANSWER),  # a non-numeric line must match exactly after strip()
    ("Yes", "yes", WRONG_ANSWER),
])
def test_line_comparison(grader: CodeGrader, printed: str, expected: str, verdict: str) -> None:
    problem = stdin_problem(["\n"], [expected + "\n"])
    assert grader.grade(problem, fenced(f"print({printed!r})")).verdict == verdict


def test_surrounding_whitespace_and_blank_lines_are_tolerated(grader: CodeGrader) -> None:
    problem = stdin_problem(["\n"], ["1 2\n3\n"])
    assert grader.grade(problem, fenced(r"print('\n  1 2   \n3\t\n\n\n')")).verdict == PASS
    wrong = grader.grade(problem, fenced(r"print('1 2\n\n3')"))  # an inner blank line counts
    assert wrong.verdict == WRONG_ANSWER and "3 output lines, expected 2" in wrong.reason


def test_wrong_answer_names_the_failing_test(grader: CodeGrader) -> None:
    grade = grader.grade(SQUARES, fenced("n = int(input())\nprint(9 if n == 3 else n + n)"))
    assert grade.verdict == WRONG_ANSWER
    assert grade.reason.startswith("test 2/3:") and "got '10', expected '25'" in grade.reason


def test_exception_is_runtime_error(grader: CodeGrader) -> None:
    grade = grader.grade(SQUARES, fenced("n = int(input())\nprint(n * n if n != 5 else n // 0)"))
    assert grade.verdict == RUNTIME_ERROR
    assert grade.reason.startswith("test 2/3:") and "ZeroDivisionError" in grade.reason
    eof = grader.grade(SQUARES, fenced("input()\ninput()"))
    assert eof.verdict == RUNTIME_ERROR and "EOFError" in eof.reason


def test_syntax_error_is_compile_error(grader: CodeGrader) -> None:
    grade = grader.grade(SQUARES, fenced("def f(:\n    pass"))
    assert grade.verdict == COMPILE_ERROR and "SyntaxError" in grade.reason


def test_class_solution_in_a_stdin_program_fails_as_in_lcb(grader: CodeGrader) -> None:
    code = "class Solution:\n    pass\nprint(int(input()) ** 2)"
    grade = grader.grade(SQUARES, fenced(code))
    assert grade.verdict == RUNTIME_ERROR and "Solution" in grade.reason


def test_per_test_timeout_is_time_limit(fast_grader: CodeGrader) -> None:
    grade = fast_grader.grade(SQUARES, fenced("n = int(input())\nwhile n == 5:\n    pass\n"
                                              "print(n * n)"))
    assert grade.verdict == TIME_LIMIT and grade.reason.startswith("test 2/3:")


def test_global_timeout_is_time_limit(fast_grader: CodeGrader) -> None:
    """A program that swallows the per-test alarm is stopped by the supervisor's wall clock."""
    code = ("def addK(a, k):\n    while True:\n        try:\n            while True:\n"
            "                pass\n        except BaseException:\n            pass")
    problem = call_problem(["[1]\n1"], ["[2]"], "addK")
    run = fast_grader.run(extract_code(fenced(code)), problem.tests)
    assert run.grade.verdict == TIME_LIMIT and "global timeout" in run.grade.reason
    assert run.sandbox is not None and run.sandbox.timed_out
    assert run.sandbox.wall_s < fast_grader.global_timeout(1) + 3


def test_stops_at_the_first_failure(grader: CodeGrader) -> None:
    """Each call announces itself on the real fd 1 (outside LCB's capture); test 2 fails, so
    test 3 must never run."""
    code = ("import os\ndef addK(a, k):\n    os.write(1, b'RAN\\n')\n"
            "    return [x + k for x in a] if k != 5 else []")
    run = grader.run(extract_code(fenced(code)), ADD_K.tests)
    assert run.grade.verdict == WRONG_ANSWER and run.grade.reason.startswith("test 2/3:")
    assert run.sandbox is not None and run.sandbox.stdout.count(b"RAN") == 2
    stdin_code = "import os\nos.write(1, b'RAN\\n')\nprint(int(input()) + 1)"
    run = grader.run(stdin_code, SQUARES.tests)
    assert run.grade.verdict == WRONG_ANSWER and run.sandbox.stdout.count(b"RAN") == 1


def test_printed_or_injected_verdicts_are_ignored(grader: CodeGrader) -> None:
    """A program that prints verdict records, and writes them to every inherited fd, still
    gets its own (wrong) answer graded."""
    fake = '{"nonce": "0", "verdict": "pass", "test": null, "passed": 3, "reason": ""}\\n'
    code = (f"import os\nfor fd in range(1, 64):\n    try:\n        os.write(fd, b'{fake}')\n"
            f"    except OSError:\n        pass\nprint('{fake}')\nprint(0)")
    assert grader.grade(SQUARES, fenced(code)).verdict == WRONG_ANSWER


# ---- functional (LeetCode) mode -----------------------------------------------------------

def test_functional_class_solution_with_tuple_result_passes(grader: CodeGrader) -> None:
    code = ("class Solution:\n    def addK(self, a: List[int], k: int) -> List[int]:\n"
            "        return tuple(x + k for x in a)")
    assert grader.grade(ADD_K, fenced(code)).verdict == PASS


def test_functional_top_level_function_passes(grader: CodeGrader) -> None:
    assert grader.grade(ADD_K, fenced("def addK(a, k):\n    return [x + k for x in a]")
                        ).verdict == PASS


def test_functional_failures(grader: CodeGrader) -> None:
    wrong = grader.grade(ADD_K, fenced("def addK(a, k):\n    return [x + k + 1 for x in a]"))
    assert wrong.verdict == WRONG_ANSWER and "test 1/3" in wrong.reason
    assert "got [5, 6], expected [4, 5]" in wrong.reason
    missing = grader.grade(ADD_K, fenced("def add_k(a, k):\n    return a"))
    assert missing.verdict == RUNTIME_ERROR and "addK" in missing.reason
    boom = grader.grade(ADD_K, fenced("def addK(a, k):\n    return a[10]"))
    assert boom.verdict == RUNTIME_ERROR and "IndexError" in boom.reason


def test_grade_many_keeps_order(grader: CodeGrader) -> None:
    items = [
        (SQUARES, fenced("print(int(input()) ** 2)")),
        (SQUARES, "no code"),
        (ADD_K, fenced("def addK(a, k):\n    return [x + k for x in a]")),
        (SQUARES, fenced("print(")),
        (SQUARES, fenced("print(1)")),
    ]
    verdicts = [g.verdict for g in grader.grade_many(items)]
    assert verdicts == [PASS, NO_ANSWER, PASS, COMPILE_ERROR, WRONG_ANSWER]


def test_grade_many_runs_each_distinct_program_once(grader: CodeGrader, monkeypatch) -> None:
    square, wrong = fenced("print(int(input()) ** 2)"), fenced("print(1)")
    items = [(SQUARES, square), (SQUARES, "thinking...\n" + square), (SQUARES, wrong),
             (ADD_K, square), (SQUARES, square)]
    runs = []
    real_run = grader.run
    monkeypatch.setattr(grader, "run",
                        lambda code, tests: runs.append(code) or real_run(code, tests))
    verdicts = [g.verdict for g in grader.grade_many(items)]
    assert verdicts == [PASS, PASS, WRONG_ANSWER, RUNTIME_ERROR, PASS]
    assert len(runs) == 3  # square and wrong on SQUARES, square on ADD_K


def test_grader_config_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match="timeout_per_test"):
        CodeGrader(Sandbox(), timeout_per_test=0)
    with pytest.raises(ValueError, match="compat"):
        CodeGrader(Sandbox(), compat="loose")
