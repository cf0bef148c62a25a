"""Fixture problems through loader + grader: reference solutions pass, deliberately wrong ones get
the right verdicts (code in the bubblewrap sandbox, math through the math-verify worker)."""

from __future__ import annotations

import pytest
from fixtures_hub import HMMT_ROWS, write_aime, write_hmmt, write_lcb

from repro.benchmarks import get_benchmark, load_problems
from repro.graders.code import CodeGrader
from repro.graders.math import MathGrader
from repro.sandbox import Sandbox

STDIN_OK = "n = int(input())\nprint(sum(map(int, input().split())))"
STDIN_WRONG = "n = int(input())\nprint(sum(map(int, input().split())) + 1)"
STDIN_CRASH = "n = int(input())\nprint(1 // 0)"
FUNC_OK = "class Solution:\n    def pairSum(self, nums, k):\n        return sum(sorted(nums)[-k:])"
FUNC_TUPLE = ("class Solution:\n    def pairSum(self, nums, k):\n"
              "        return (sum(sorted(nums)[-k:]),)")


def fenced(code: str) -> str:
    return f"<think>plan</think>\nHere it is.\n```python\n{code}\n```\n"


@pytest.fixture(scope="module")
def lcb_problems(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("data")
    pins = write_lcb(data_dir)
    problems, _ = load_problems(get_benchmark("livecodebench"), data_dir=data_dir,
                                release="release_v6", sha256_pins=pins)
    return problems


def test_lcb_fixture_reference_and_wrong_solutions(lcb_problems):
    sandbox = Sandbox()
    sandbox.check()
    grader = CodeGrader(sandbox, workers=2)
    items, expected = [], []
    for p in lcb_problems:
        if p.tests.fn_name is None:
            items += [(p, fenced(STDIN_OK)), (p, fenced(STDIN_WRONG)), (p, fenced(STDIN_CRASH))]
            expected += ["pass", "wrong_answer", "runtime_error"]
        else:
            items += [(p, fenced(FUNC_OK)), (p, fenced(FUNC_TUPLE)), (p, "no code at all")]
            expected += ["pass", "wrong_answer", "no_answer"]
    grades = grader.grade_many(items)
    assert [g.verdict for g in grades] == expected
    assert all(g.reason for g in grades if g.verdict != "pass")  # every failure says why
    assert {p.tests.fn_name is None for p in lcb_problems} == {True, False}


@pytest.mark.parametrize("name", ["aime25", "hmmt25"])
def test_math_fixture_golds_pass_and_wrong_answers_fail(name, tmp_path):
    (write_aime if name == "aime25" else write_hmmt)(tmp_path)
    problems, _ = load_problems(get_benchmark(name), data_dir=tmp_path)
    items, expected = [], []
    for p in problems:
        items.append((p, f"<think>work</think>\nThe answer is \\boxed{{{p.answer}}}."))
        items.append((p, "<think>work</think>\nThe answer is \\boxed{999999}."))
        expected += ["pass", "wrong_answer"]
    swapped = ", ".join(reversed(HMMT_ROWS[4]["answer"].split(", ")))
    if name == "hmmt25":  # the two-element list answer in the other order
        items.append((problems[4], f"\\boxed{{{swapped}}}"))
        expected.append("pass")
    with MathGrader() as grader:
        assert [g.verdict for g in grader.grade_many(items)] == expected
