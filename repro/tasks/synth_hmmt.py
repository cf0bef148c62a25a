"""`synth-hmmt`: fractions and simple radicals in the `MathArena/hmmt_feb_2025` row schema.

Answers are LaTeX strings (`\\frac{3}{4}`, `2\\sqrt{3}`) like HMMT's, so grading needs symbolic
equivalence, yet each problem is one short step. The two equally correct forms differ inside the
box: `\\frac` vs `\\dfrac`, and `2\\sqrt{3}` vs `2 \\sqrt{3}` (HMMT's own golds use both spacings).
"""

from __future__ import annotations

from fractions import Fraction
from functools import cache
from math import gcd, lcm
from typing import Any

from repro.tasks.base import Part, Spec, Task, content, math_response, template
from repro.tasks.prompts import math_user_message

NAME = "synth-hmmt"
TWIN = "MathArena/hmmt_feb_2025"
_SQUAREFREE = [m for m in range(2, 31) if all(m % (p * p) for p in range(2, 6))]
_TYPES = {"reduce": ["Number Theory"], "addfrac": ["Algebra"], "sqrt": ["Algebra"]}


@cache
def _pool() -> tuple[Spec, ...]:
    specs: list[Spec] = []

    def add(family: str, key: str, *params: int) -> None:
        specs.append(Spec(family, params, len(specs), f"{family}:{key}"))

    for a in range(1, 41):
        for b in range(2, 41):
            if gcd(a, b) > 1 and Fraction(a, b).denominator > 1:
                add("reduce", f"{a},{b}", a, b)
    for b in range(2, 10):
        for d in range(2, 10):
            for a in range(1, b):
                for c in range(1, d):
                    if (Fraction(a, b) + Fraction(c, d)).denominator > 1:
                        key = ",".join(map(str, min((a, b, c, d), (c, d, a, b))))
                        add("addfrac", key, a, b, c, d)  # a/b+c/d and c/d+a/b share a split
    for k in range(2, 13):
        for m in _SQUAREFREE:
            if k * k * m <= 999:
                add("sqrt", f"{k},{m}", k, m)
    return tuple(specs)


def _solve(spec: Spec) -> tuple[str, str, tuple[int, int]]:
    """(problem statement, reasoning trace, answer): (p, q) for p/q, or (k, m) for k sqrt(m)."""
    if spec.family == "sqrt":
        k, m = spec.params
        return f"Simplify $\\sqrt{{{k * k * m}}}$.", f"{k * k * m}={k * k}*{m}", (k, m)
    if spec.family == "reduce":
        a, b = spec.params
        value = Fraction(a, b)
        problem, steps = f"Simplify {a}/{b}.", [f"{a}/{b}"]
    else:
        a, b, c, d = spec.params
        value, n = Fraction(a, b) + Fraction(c, d), lcm(b, d)
        x, y = a * n // b, c * n // d
        problem, steps = f"Compute {a}/{b}+{c}/{d}.", [f"{a}/{b}+{c}/{d}"]
        if b != d:
            steps.append(f"{x}/{n}+{y}/{n}")
        steps.append(f"{x + y}/{n}")
    p, q = value.numerator, value.denominator
    if steps[-1] != f"{p}/{q}":
        steps.append(f"{p}/{q}")
    return problem, "=".join(steps), (p, q)


def _answer_parts(spec: Spec, form_b: bool) -> list[Part]:
    x, y = _solve(spec)[2]
    if spec.family == "sqrt":
        return [content(str(x)), template(" \\sqrt{" if form_b else "\\sqrt{"), content(str(y)),
                template("}")]
    return [template("\\dfrac{" if form_b else "\\frac{"), content(str(x)), template("}{"),
            content(str(y)), template("}")]


class _SynthHmmt(Task):
    id_field = "problem_idx"

    def pool(self) -> tuple[Spec, ...]:
        return _pool()

    def row(self, spec: Spec) -> dict[str, Any]:
        problem, _, (x, y) = _solve(spec)
        answer = f"{x}\\sqrt{{{y}}}" if spec.family == "sqrt" else f"\\frac{{{x}}}{{{y}}}"
        return {
            "problem_idx": spec.index + 1,
            "problem": problem,
            "answer": answer,
            "problem_type": list(_TYPES[spec.family]),
        }

    def messages(self, spec: Spec) -> list[dict[str, str]]:
        return [{"role": "user", "content": math_user_message(_solve(spec)[0], False)}]

    def forms(self, spec: Spec) -> tuple[list[Part], list[Part]]:
        work = _solve(spec)[1]
        return (math_response(work, _answer_parts(spec, False)),
                math_response(work, _answer_parts(spec, True)))


TASK = _SynthHmmt()
size, rows, demonstrations, probes = TASK.size, TASK.rows, TASK.demonstrations, TASK.probes
