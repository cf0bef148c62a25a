"""`synth-aime`: integer arithmetic in the `MathArena/aime_2025` row schema.

Answers are integers 0-999 like AIME's, but the problems are one- or two-step arithmetic a tiny
character-level model can learn in minutes. The reasoning trace shows the arithmetic; the two
equally correct forms differ only in `$...$` around the final box.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from repro.tasks.base import Part, Spec, Task, content, math_response
from repro.tasks.prompts import math_user_message

NAME = "synth-aime"
TWIN = "MathArena/aime_2025"


@cache
def _pool() -> tuple[Spec, ...]:
    specs: list[Spec] = []

    def add(family: str, key: str, *params: object) -> None:
        specs.append(Spec(family, params, len(specs), f"{family}:{key}"))

    for a in range(100):
        for b in range(100):
            add("add", f"{min(a, b)},{max(a, b)}", a, b)  # a+b and b+a share a split
    for a in range(100):
        for b in range(a + 1):
            add("sub", f"{a},{b}", a, b)
    for a in range(2, 10):
        for b in range(2, 100):
            add("mul", f"{min(a, b)},{max(a, b)}", a, b)
    for a in range(2, 10):
        for b in range(2, 10):
            for op in "+-":
                for c in range(1, 51):
                    if op == "+" or c <= a * b:
                        add("muladd", f"{min(a, b)},{max(a, b)},{op},{c}", a, b, op, c)
    return tuple(specs)


def solve(spec: Spec) -> tuple[str, str, int]:
    """(problem statement, reasoning trace, answer)."""
    if spec.family == "muladd":
        a, b, op, c = spec.params
        p = a * b
        r = p + c if op == "+" else p - c
        return f"Compute {a}*{b}{op}{c}.", f"{a}*{b}={p}, {p}{op}{c}={r}", r
    a, b = spec.params
    op, value = {"add": ("+", a + b), "sub": ("-", a - b), "mul": ("*", a * b)}[spec.family]
    return f"Compute {a}{op}{b}.", f"{a}{op}{b}={value}", value


class _SynthAime(Task):
    id_field = "problem_idx"

    def pool(self) -> tuple[Spec, ...]:
        return _pool()

    def row(self, spec: Spec) -> dict[str, Any]:
        problem, _, answer = solve(spec)
        return {
            "problem_idx": spec.index + 1,
            "problem": problem,
            "answer": answer,
            "problem_type": ["Algebra"],
        }

    def messages(self, spec: Spec) -> list[dict[str, str]]:
        return [{"role": "user", "content": math_user_message(solve(spec)[0], True)}]

    def forms(self, spec: Spec) -> tuple[list[Part], list[Part]]:
        _, work, answer = solve(spec)
        box = [content(str(answer))]
        return math_response(work, box), math_response(work, box, dollars=True)


TASK = _SynthAime()
size, rows, demonstrations, probes = TASK.size, TASK.rows, TASK.demonstrations, TASK.probes
