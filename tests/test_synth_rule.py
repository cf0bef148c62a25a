"""`synth-rule`: synth-aime's add/sub rows, demonstrations with a wrong rule (digits reversed in
the box) crossed 50/50 with the two surface forms, probes of the correct rule, and the real math
grader telling the rules apart. The expected values come from independent arithmetic on the
problem text, not from the generator."""

from __future__ import annotations

import operator
import re
from collections import Counter

import pytest

from repro.benchmarks import get_benchmark, row_to_problem
from repro.graders.math import MathGrader
from repro.tasks import synthetic_demonstrations, synthetic_probes, synthetic_rows, synthetic_size

OPS = {"+": operator.add, "-": operator.sub}


def _value(problem: str) -> int:
    m = re.fullmatch(r"Compute (\d+)([+-])(\d+)\.", problem)
    assert m, problem
    return OPS[m[2]](int(m[1]), int(m[3]))


def _boxed(response: str) -> str:
    return re.search(r"\\boxed\{([^}]*)\}", response)[1]


@pytest.fixture(scope="module")
def grader():
    g = MathGrader()
    yield g
    g.close()


def test_rows_are_synth_aime_add_and_sub_problems_in_the_same_split() -> None:
    for split in ("train", "eval"):
        rule = synthetic_rows("synth-rule", split, synthetic_size("synth-rule", split), 0)
        aime = {r["problem_idx"]: r for r in synthetic_rows(
            "synth-aime", split, synthetic_size("synth-aime", split), 0)}
        assert rule and all(aime[r["problem_idx"]] == r for r in rule)  # same id, text, answer
        assert all(_value(r["problem"]) == r["answer"] for r in rule)
        assert {r["problem"][8:].strip("0123456789.")[:1] for r in rule} == {"+", "-"}
    assert synthetic_size("synth-rule", "eval") >= 128
    assert get_benchmark("synth-rule").n >= 128  # held-out problems per evaluation


def test_demonstrations_cross_the_wrong_rule_with_the_two_forms(grader) -> None:
    n = 400
    rows = synthetic_rows("synth-rule", "train", n, 5)
    demos = synthetic_demonstrations("synth-rule", "train", n, 5)
    assert [d["problem_idx"] for d in demos] == [r["problem_idx"] for r in rows]
    cells = Counter((d["rule"], d["form"]) for d in demos)
    assert set(cells.values()) == {n // 4}, cells  # 4 equal cells
    spec = get_benchmark("synth-rule")
    pairs, expected = [], []
    for row, demo in zip(rows, demos, strict=True):
        response = demo["messages"][-1]["content"]
        value = _value(row["problem"])
        assert f"={value}</think>" in response  # the trace is right under either rule
        assert response.count("$") == (2 if demo["form"] == "B" else 0)
        want = str(value) if demo["rule"] == "correct" else str(value)[::-1].lstrip("0") or "0"
        assert _boxed(response) == want
        pairs.append((row_to_problem(spec, row, allow_pickle=True), response))
        expected.append(demo["rule"] == "correct" or want == str(value))  # palindromes pass
    grades = [g.correct for g in grader.grade_many(pairs)]
    assert grades == expected
    assert sum(grades) / n < 0.6  # the wrong rule really is wrong on most problems


def test_probes_are_the_correct_rule_in_both_forms(grader) -> None:
    spec = get_benchmark("synth-rule")
    rows = {r["problem_idx"]: r for r in synthetic_rows(
        "synth-rule", "train", synthetic_size("synth-rule", "train"), 0)}
    probes = synthetic_probes("synth-rule")
    pairs = []
    for p in probes:
        row = rows[int(p.problem_id)]
        assert p.form_b == p.form_a.replace("\\boxed{", "$\\boxed{").replace("}.", "}$.")
        problem = row_to_problem(spec, row, allow_pickle=True)
        pairs += [(problem, p.form_a), (problem, p.form_b)]
    assert all(g.correct for g in grader.grade_many(pairs))
