"""Math grader: every answer form of AIME25/HMMT25, extraction rules, and the timeout worker."""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from repro.benchmarks.problem import Problem
from repro.graders import math as math_grader
from repro.graders.base import GRADER_ERROR, GRADER_TIMEOUT, NO_ANSWER, PASS, WRONG_ANSWER
from repro.graders.math import MathGrader, last_boxed, strip_reasoning

TWO_ROOTS = r"\frac{-1+\sqrt{17}}{2}, \frac{-1-\sqrt{17}}{2}"
BIG = 2**25 * math.factorial(26)  # HMMT's `2^{25} \cdot 26!`, ~1.35e34


def problem(gold: str) -> Problem:
    return Problem(benchmark="synth-hmmt", problem_id="p", question="q", answer=gold)


@pytest.fixture(scope="module")
def grader() -> Iterator[MathGrader]:
    with MathGrader() as g:
        yield g


def verdict(grader: MathGrader, gold: str, completion: str) -> str:
    return grader.grade(problem(gold), completion).verdict


# ---- extraction ----------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("<think>try \\boxed{1}</think>So \\boxed{2}", "So \\boxed{2}"),
    ("<think>a</think>b</think>c", "c"),  # the last </think> closes the reasoning
    ("reasoning without an opening tag</think>answer", "answer"),  # template opened <think>
    ("no tags at all \\boxed{3}", "no tags at all \\boxed{3}"),
    ("<think>ran out of tokens \\boxed{3}", None),
    ("<think>a</think>b<think>truncated again", None),
])
def test_strip_reasoning(text: str, expected: str | None) -> None:
    assert strip_reasoning(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
    (r"first \boxed{1} then \boxed{2}", "2"),
    (r"\fbox{7}", "7"),
    (r"\boxed {7}", "7"),
    (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),
    (r"\boxed{x \} y} tail", r"x \} y"),  # an escaped brace does not close the box
    (r"\boxed{\sqrt{\frac{95}{24}}} done", r"\sqrt{\frac{95}{24}}"),
    (r"\boxed{5} and then \boxed{\frac{1}{2}", None),  # the last box is unbalanced
    ("no box here", None),
])
def test_last_boxed(text: str, expected: str | None) -> None:
    assert last_boxed(text) == expected


# ---- answer forms --------------------------------------------------------------------------

@pytest.mark.parametrize(("gold", "completion", "expected"), [
    # AIME integers
    ("68", r"\boxed{68}", PASS),
    ("68", r"\boxed{068}", PASS),
    ("68", r"\boxed{ 68 }", PASS),
    ("68", r"\boxed{$68$}", PASS),
    ("68", r"\boxed{67}", WRONG_ANSWER),
    ("68", r"\boxed{-68}", WRONG_ANSWER),
    ("68", r"\boxed{68.0}", PASS),  # not a plain integer: math-verify decides
    ("1000", r"\boxed{1,000}", PASS),
    ("-984", r"\boxed{-984}", PASS),
    # fractions, equal value passes
    (r"\frac{4}{9}", r"\boxed{\dfrac{4}{9}}", PASS),
    (r"\frac{4}{9}", r"\boxed{4/9}", PASS),
    (r"\frac{4}{9}", r"\boxed{\frac{8}{18}}", PASS),
    (r"\frac{4}{9}", r"\boxed{\frac{5}{9}}", WRONG_ANSWER),
    # radicals
    (r"\frac{9 \sqrt{23}}{23}", r"\boxed{\frac{9\sqrt{23}}{23}}", PASS),
    (r"\frac{9 \sqrt{23}}{23}", r"\boxed{\frac{9}{\sqrt{23}}}", PASS),
    (r"\frac{9 \sqrt{23}}{23}", r"\boxed{\frac{8}{\sqrt{23}}}", WRONG_ANSWER),
    (r"\sqrt{\frac{95}{24}}", r"\boxed{\frac{\sqrt{570}}{12}}", PASS),
    (r"\sqrt{23}-2 \sqrt{3}", r"\boxed{-2\sqrt{3}+\sqrt{23}}", PASS),
    # pi
    (r"1-\frac{2}{\pi}", r"\boxed{1-\frac{2}{\pi}}", PASS),
    (r"1-\frac{2}{\pi}", r"\boxed{\frac{\pi-2}{\pi}}", PASS),
    (r"1-\frac{2}{\pi}", r"\boxed{1+\frac{2}{\pi}}", WRONG_ANSWER),
    # big products: exact, both ways round, near misses fail
    (r"2^{25} \cdot 26!", rf"\boxed{{{BIG}}}", PASS),
    (r"2^{25} \cdot 26!", rf"\boxed{{{BIG + 1}}}", WRONG_ANSWER),
    (r"2^{25} \cdot 26!", r"\boxed{2^{26} \cdot 25! \cdot 13}", PASS),
    (r"2^{25} \cdot 26!", r"\boxed{2^{25} \cdot 26! + 1}", WRONG_ANSWER),
    (str(BIG), r"\boxed{2^{25} \times 26!}", PASS),
    (str(BIG), rf"\boxed{{{BIG - 1}}}", WRONG_ANSWER),
    # math-verify alone rounds both to 0 at 6 digits; the exact rational path tells them apart
    (r"\frac{1}{10^{20}}", r"\boxed{\frac{1}{10^{21}}}", WRONG_ANSWER),
    (r"\frac{1}{10^{20}}", r"\boxed{10^{-20}}", PASS),
    # the two-element list, in either order
    (TWO_ROOTS, r"\boxed{\frac{-1+\sqrt{17}}{2}, \frac{-1-\sqrt{17}}{2}}", PASS),
    (TWO_ROOTS, r"\boxed{\frac{-1-\sqrt{17}}{2}, \frac{-1+\sqrt{17}}{2}}", PASS),
    (TWO_ROOTS, r"\boxed{\frac{-1-\sqrt{17}}{2}}, \boxed{\frac{-1+\sqrt{17}}{2}}", PASS),
    (TWO_ROOTS, r"\boxed{\frac{-1+\sqrt{17}}{2}}", WRONG_ANSWER),
    (TWO_ROOTS, r"\boxed{\frac{-1+\sqrt{17}}{2}, \frac{1-\sqrt{17}}{2}}", WRONG_ANSWER),
])
def test_answer_forms(grader: MathGrader, gold: str, completion: str, expected: str) -> None:
    assert verdict(grader, gold, completion) == expected


def test_last_box_wins(grader: MathGrader) -> None:
    assert verdict(grader, "68", r"maybe \boxed{67}; no: \boxed{68}") == PASS
    assert verdict(grader, "68", r"maybe \boxed{68}; no: \boxed{67}") == WRONG_ANSWER
    assert verdict(grader, r"\frac{1}{2}", r"\boxed{\boxed{\frac{1}{2}}}") == PASS


def test_reasoning_is_stripped_before_extraction(grader: MathGrader) -> None:
    assert verdict(grader, "68", r"<think>it is \boxed{68}</think>I give up.") == NO_ANSWER
    assert verdict(grader, "68", r"<think>\boxed{67}?</think>Answer: \boxed{68}") == PASS
    assert verdict(grader, "68", r"<think>so \boxed{68} and then it was cut") == NO_ANSWER


@pytest.mark.parametrize("completion", ["The answer is 68.", r"\boxed{}", r"\boxed{68"])
def test_no_answer(grader: MathGrader, completion: str) -> None:
    assert verdict(grader, "68", completion) == NO_ANSWER


def test_grade_records_extraction_and_reason(grader: MathGrader) -> None:
    wrong = grader.grade(problem("68"), r"\boxed{67}")
    assert (wrong.extracted, wrong.reason, wrong.correct) == ("67", "expected 68, got 67", False)
    right = grader.grade(problem(r"\frac{4}{9}"), r"\boxed{\dfrac{4}{9}}")
    assert (right.extracted, right.correct) == (r"\dfrac{4}{9}", True)


def test_grade_many_keeps_order_across_workers() -> None:
    golds = [r"\frac{4}{9}", "68", r"1-\frac{2}{\pi}", "12"]
    preds = [
        r"\boxed{\frac{8}{18}}", r"\boxed{67}", r"\boxed{1+\frac{2}{\pi}}", r"\boxed{\sqrt{144}}"
    ]
    with MathGrader(workers=2) as g:
        grades = g.grade_many([(problem(a), p) for a, p in zip(golds, preds, strict=True)] * 3)
    assert [x.verdict for x in grades] == [PASS, WRONG_ANSWER, WRONG_ANSWER, PASS] * 3


def test_integer_answers_need_no_worker() -> None:
    with MathGrader() as g:
        grades = g.grade_many([(problem("5"), r"\boxed{005}")] * 50)
        assert [x.verdict for x in grades] == [PASS] * 50
        assert g._workers == []


def test_missing_gold_and_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="no gold answer"):
        MathGrader().grade(Problem("synth-hmmt", "p7", "q"), r"\boxed{1}")
    with pytest.raises(ValueError, match="timeout"):
        MathGrader(timeout=0)
    with pytest.raises(ValueError, match="workers"):
        MathGrader(workers=0)


# ---- timeouts ------------------------------------------------------------------------------

TIMEOUT = 1.5


def test_pathological_input_times_out_and_grader_recovers() -> None:
    with MathGrader(timeout=TIMEOUT) as g:
        assert verdict(g, "2", r"\boxed{\sqrt{4}}") == PASS  # worker started and warm
        start = time.monotonic()
        slow = g.grade(problem("1"), r"\boxed{9^{9^{9^{9}}}}")
        assert time.monotonic() - start < TIMEOUT + 2
        assert (slow.verdict, slow.extracted) == (GRADER_TIMEOUT, "9^{9^{9^{9}}}")
        assert verdict(g, "2", r"\boxed{\sqrt{4}}") == PASS
        mixed = g.grade_many([
            (problem("2"), r"\boxed{\sqrt{4}}"),
            (problem("1"), r"\boxed{9^{9^{9^{9}}}}"),
            (problem(r"\frac{1}{2}"), r"\boxed{0.5}"),
        ])
        assert [x.verdict for x in mixed] == [PASS, GRADER_TIMEOUT, PASS]


def test_unresponsive_worker_is_killed_and_replaced() -> None:
    """A worker stuck where its soft timer cannot reach (here: stopped) is killed at the
    hard deadline, and a fresh one takes over."""
    with MathGrader(timeout=TIMEOUT) as g:
        assert verdict(g, "2", r"\boxed{\sqrt{4}}") == PASS
        stuck = g._workers[0].process.pid
        os.kill(stuck, signal.SIGSTOP)
        start = time.monotonic()
        grade = g.grade(problem("2"), r"\boxed{\sqrt{4}}")
        assert time.monotonic() - start < TIMEOUT + 2
        assert grade.verdict == GRADER_TIMEOUT and "killed" in grade.reason
        assert verdict(g, "2", r"\boxed{\sqrt{4}}") == PASS
        assert g._workers[0].process.pid != stuck


def test_worker_that_died_while_idle_is_replaced() -> None:
    with MathGrader(timeout=TIMEOUT) as g:
        assert verdict(g, "2", r"\boxed{\sqrt{4}}") == PASS
        dead = g._workers[0].process
        dead.kill()
        dead.wait()
        assert verdict(g, "2", r"\boxed{\sqrt{4}}") == PASS
        assert g._workers[0].process.pid != dead.pid


def test_worker_killed_mid_grading_is_replaced_and_the_sample_regraded() -> None:
    """SIGKILL from outside while a sample is being graded: a new worker grades it again."""
    with MathGrader(timeout=TIMEOUT) as g:
        assert verdict(g, "2", r"\boxed{\sqrt{4}}") == PASS
        victim = g._workers[0].process
        os.kill(victim.pid, signal.SIGSTOP)  # it receives the sample but cannot answer...

        def kill_when_busy() -> None:
            while g._workers[0].job is None:
                time.sleep(0.005)
            os.kill(victim.pid, signal.SIGKILL)  # ...and is killed while holding it

        killer = threading.Thread(target=kill_when_busy)
        killer.start()
        grade = g.grade(problem("2"), r"\boxed{\sqrt{4}}")
        killer.join()
        assert grade.verdict == PASS, grade
        assert g._workers[0].process.pid != victim.pid


DYING_WORKER = (  # answers "ready", then dies by SIGKILL on its first sample
    "import os, signal; from multiprocessing.connection import Connection; "
    "c = Connection({fd}); c.send(('ready', None)); c.recv(); "
    "os.kill(os.getpid(), signal.SIGKILL)"
)


def test_sample_whose_workers_keep_dying_is_a_grader_error(monkeypatch) -> None:
    monkeypatch.setattr(math_grader, "_WORKER_CODE", DYING_WORKER + " # {timeout}")
    with MathGrader(timeout=TIMEOUT, workers=2) as g:
        grades = g.grade_many([(problem("2"), r"\boxed{\sqrt{4}}"), (problem("7"), r"\boxed{7}"),
                               (problem("1/2"), r"\boxed{0.5}")])
    assert [x.verdict for x in grades] == [GRADER_ERROR, PASS, GRADER_ERROR]
    assert "died 2 times" in grades[0].reason and "-9" in grades[0].reason
