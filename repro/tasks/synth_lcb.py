"""`synth-lcb`: one-line Python functions in the `livecodebench/code_generation_lite` row schema.

Six small families (weighted sum, count a char, count above a bound, repeat a string, max plus k,
sum times k), each posed LeetCode-style (functional tests, `class Solution` starter) and
AtCoder-style (stdin tests), with hidden tests stored compressed like the hub's. A problem's two
modes share a split. The two equally correct forms are two implementations that differ in a
few characters (`a * 3 + b * 4` vs `b * 4 + a * 3`, `'x'` vs `"x"`).
"""

from __future__ import annotations

import base64
import json
import pickle
import random
import string
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from repro.tasks.base import Part, Spec, Task, content, template
from repro.tasks.prompts import code_messages

NAME = "synth-lcb"
TWIN = "livecodebench/code_generation_lite"
MODES = ("functional", "stdin")
N_TESTS = 5  # the first is public, the rest private
_FIRST_DATE = datetime(2025, 2, 1)  # inside LCB v6's window, 2025-02-01..2025-05-01
_INTS = "a, b = map(int, input().split())"
_STR = "s = input()"
_LIST = "nums = list(map(int, input().split()))"


def _word(rng: random.Random, letters: str, longest: int) -> str:
    return "".join(rng.choice(letters) for _ in range(rng.randint(1, longest)))


def _nums(rng: random.Random, top: int) -> list[int]:
    return [rng.randint(0, top) for _ in range(rng.randint(1, 6))]


@dataclass(frozen=True)
class _Family:
    """A function template; `{0}`, `{1}` in the texts are filled with the problem's parameters."""

    name: str  # LeetCode method name
    title: str
    given: str  # how the question introduces the arguments
    what: str  # what to return / print
    signature: str  # arguments and return type
    read: str  # the stdin line that binds the same argument names
    plan: str  # the reasoning trace
    expr_a: str
    expr_b: str
    params: tuple[tuple[Any, ...], ...]
    solve: Callable[..., Any]  # (params, *args) -> expected result
    draw: Callable[[random.Random, tuple[Any, ...]], tuple[Any, ...]]  # one test's arguments


_FAMILIES = (
    _Family("weightedSum", "Weighted Sum", "Given integers a and b", "a*{0}+b*{1}",
            "a: int, b: int) -> int", _INTS, "a*{0}+b*{1}", "a * {0} + b * {1}",
            "b * {1} + a * {0}", tuple((p, q) for p in range(2, 10) for q in range(2, 10)),
            lambda P, a, b: a * P[0] + b * P[1],
            lambda rng, P: (rng.randint(0, 99), rng.randint(0, 99))),
    _Family("countChar", "Count Char", "Given a string s",
            "the number of times '{0}' occurs in s", "s: str) -> int", _STR, "count '{0}'",
            "s.count('{0}')", 's.count("{0}")', tuple((c,) for c in string.ascii_lowercase),
            lambda P, s: s.count(P[0]),
            lambda rng, P: (_word(rng, P[0] + rng.choice("abc") + rng.choice("xyz"), 8),)),
    _Family("countAbove", "Count Above", "Given a list of integers nums",
            "how many elements of nums are greater than {0}", "nums: List[int]) -> int", _LIST,
            "count x>{0}", "sum(x > {0} for x in nums)", "sum({0} < x for x in nums)",
            tuple((k,) for k in range(51)), lambda P, nums: sum(x > P[0] for x in nums),
            lambda rng, P: (_nums(rng, 60),)),
    _Family("repeatString", "Repeat String", "Given a string s", "s repeated {0} times",
            "s: str) -> str", _STR, "s*{0}", "s * {0}", "{0} * s",
            tuple((k,) for k in range(2, 10)), lambda P, s: s * P[0],
            lambda rng, P: (_word(rng, string.ascii_lowercase, 5),)),
    _Family("maxPlus", "Max Plus", "Given a list of integers nums",
            "the largest element of nums plus {0}", "nums: List[int]) -> int", _LIST, "max+{0}",
            "max(nums) + {0}", "{0} + max(nums)", tuple((k,) for k in range(1, 51)),
            lambda P, nums: max(nums) + P[0], lambda rng, P: (_nums(rng, 99),)),
    _Family("sumTimes", "Sum Times", "Given a list of integers nums",
            "the sum of nums times {0}", "nums: List[int]) -> int", _LIST, "sum*{0}",
            "sum(nums) * {0}", "{0} * sum(nums)", tuple((k,) for k in range(2, 13)),
            lambda P, nums: sum(nums) * P[0], lambda rng, P: (_nums(rng, 20),)),
)
_BY_NAME = {f.name: f for f in _FAMILIES}


@cache
def _pool() -> tuple[Spec, ...]:
    specs: list[Spec] = []
    for fam in _FAMILIES:
        for params in fam.params:
            for mode in MODES:
                key = f"{fam.name}:{','.join(map(str, params))}"  # both modes share a split
                specs.append(Spec(f"{fam.name}/{mode}", params, len(specs), key))
    return tuple(specs)


def _parse(spec: Spec) -> tuple[_Family, bool]:
    name, mode = spec.family.split("/")
    return _BY_NAME[name], mode == "functional"


def _starter(fam: _Family) -> str:
    return f"class Solution:\n    def {fam.name}(self, {fam.signature}:\n        "


def _question(spec: Spec) -> str:
    fam, functional = _parse(spec)
    what = fam.what.format(*spec.params)
    if functional:
        return f"{fam.given}, return {what}."
    names = fam.read.split(" = ")[0].replace(", ", " and ")
    return f"{fam.given}, print {what}.\nInput: {names} on one line."


def _tests(spec: Spec) -> list[dict[str, str]]:
    """LCB test cases: functional = one JSON value per argument line; stdin = one input line."""
    fam, functional = _parse(spec)
    rng = random.Random(f"synth-lcb-tests:{spec.family}:{spec.params}")
    tests = []
    for _ in range(N_TESTS):
        args = fam.draw(rng, spec.params)
        result = fam.solve(spec.params, *args)
        if functional:
            tests.append({"input": "\n".join(json.dumps(a) for a in args),
                          "output": json.dumps(result), "testtype": "functional"})
        else:
            line = " ".join(" ".join(map(str, a)) if isinstance(a, list) else str(a) for a in args)
            tests.append({"input": line + "\n", "output": f"{result}\n", "testtype": "stdin"})
    return tests


def compress_tests(tests: list[dict[str, str]]) -> str:
    """The hub's private-test encoding: base64(zlib(pickle(JSON string)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def _code(spec: Spec, expr: str) -> list[Part]:
    fam, functional = _parse(spec)
    expr = expr.format(*spec.params)
    head = [template("<think>"), content(fam.plan.format(*spec.params)), template("</think>"),
            template("\n"), template("```python\n")]
    if functional:
        return [*head, template("class Solution:\n"), template("    def "),
                content(f"{fam.name}(self, {fam.signature}:\n"), template("        return "),
                content(expr), template("\n```")]
    return [*head, content(fam.read + "\n"), template("print("), content(expr),
            template(")\n```")]


class _SynthLcb(Task):
    id_field = "question_id"

    def pool(self) -> tuple[Spec, ...]:
        return _pool()

    def row(self, spec: Spec) -> dict[str, Any]:
        fam, functional = _parse(spec)
        tests, i = _tests(spec), spec.index
        return {
            "question_title": f"{fam.title} {' '.join(map(str, spec.params))}",
            "question_content": _question(spec),
            "platform": "leetcode" if functional else "atcoder",
            "question_id": str(5000 + i) if functional else f"syn{i:03d}_a",
            "contest_id": f"weekly-contest-synth-{i}" if functional else f"syn{i:03d}",
            "contest_date": (_FIRST_DATE + timedelta(days=i % 89)).isoformat(),
            "starter_code": _starter(fam) if functional else "",
            "difficulty": "easy",
            "public_test_cases": json.dumps(tests[:1]),
            "private_test_cases": compress_tests(tests[1:]),
            "metadata": json.dumps({"func_name": fam.name} if functional else {}),
        }

    def messages(self, spec: Spec) -> list[dict[str, str]]:
        fam, functional = _parse(spec)
        return code_messages(_question(spec), _starter(fam) if functional else "")

    def forms(self, spec: Spec) -> tuple[list[Part], list[Part]]:
        fam, _ = _parse(spec)
        return _code(spec, fam.expr_a), _code(spec, fam.expr_b)


TASK = _SynthLcb()
size, rows, demonstrations, probes = TASK.size, TASK.rows, TASK.demonstrations, TASK.probes
