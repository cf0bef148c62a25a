"""Synthetic tasks: exact hub schemas, determinism, disjoint splits, and demonstrations that an
independent reference evaluation (arithmetic here, real execution of the code) grades correct."""

from __future__ import annotations

import ast
import base64
import json
import operator
import os
import pickle
import re
import subprocess
import sys
import zlib
from collections import Counter
from datetime import datetime
from fractions import Fraction
from pathlib import Path

import pytest

from repro.tasks import (
    SYNTHETIC,
    synthetic_demonstrations,
    synthetic_probes,
    synthetic_rows,
    synthetic_size,
)
from repro.tasks.prompts import LCB_SYSTEM_MESSAGE, code_messages, math_user_message

MATH = ("synth-aime", "synth-hmmt")
ALL = tuple(SYNTHETIC)  # every task module: a new one is tested here with no other edit
LCB_FIELDS = {
    "question_title", "question_content", "platform", "question_id", "contest_id", "contest_date",
    "starter_code", "difficulty", "public_test_cases", "private_test_cases", "metadata",
}
MAX_RESPONSE = 160


def _text(name: str, row: dict) -> str:
    """The problem text in its twin's schema (LiveCodeBench's or MathArena's)."""
    return row["question_content"] if "question_content" in row else row["problem"]


def _id(name: str, row: dict) -> str:
    return str(row["question_id"] if "question_id" in row else row["problem_idx"])


def _all(name: str, split: str) -> list[dict]:
    return synthetic_rows(name, split, synthetic_size(name, split), 0)



@pytest.mark.parametrize("name", MATH)
def test_math_rows_have_the_matharena_schema(name: str) -> None:
    for row in synthetic_rows(name, "eval", 40, 0):
        assert set(row) == {"problem_idx", "problem", "answer", "problem_type"}
        assert type(row["problem_idx"]) is int and isinstance(row["problem"], str)
        assert isinstance(row["problem_type"], list)
        assert row["problem_type"] and all(isinstance(t, str) for t in row["problem_type"])
        if name == "synth-aime":
            assert type(row["answer"]) is int and 0 <= row["answer"] <= 999
        else:
            assert isinstance(row["answer"], str)
            assert re.fullmatch(r"\\frac\{\d+\}\{\d+\}|\d+\\sqrt\{\d+\}", row["answer"])


def _decode_private(s: str) -> list[dict]:
    return json.loads(pickle.loads(zlib.decompress(base64.b64decode(s))))


def test_lcb_rows_have_the_code_generation_lite_schema() -> None:
    rows = synthetic_rows("synth-lcb", "eval", 40, 0)
    for row in rows:
        assert set(row) == LCB_FIELDS and all(isinstance(v, str) for v in row.values())
        public = json.loads(row["public_test_cases"])
        with pytest.raises(json.JSONDecodeError):
            json.loads(row["private_test_cases"])  # the compressed form, as most hub rows
        private = _decode_private(row["private_test_cases"])
        metadata = json.loads(row["metadata"])
        datetime.fromisoformat(row["contest_date"])
        assert row["difficulty"] in {"easy", "medium", "hard"}
        assert len(public) >= 1 and len(private) >= 3
        functional = row["platform"] == "leetcode"
        assert row["platform"] in {"leetcode", "atcoder"}
        kind = "functional" if functional else "stdin"
        for case in public + private:
            assert set(case) == {"input", "output", "testtype"} and case["testtype"] == kind
        if functional:
            assert re.fullmatch(
                r"class Solution:\n    def (\w+)\(self, [^\n]*\) -> [^\n]+:\n        ",
                row["starter_code"],
            )
            assert metadata == {"func_name": re.search(r"def (\w+)", row["starter_code"])[1]}
            for case in public + private:  # one JSON value per argument line, one JSON output
                for line in [*case["input"].split("\n"), case["output"]]:
                    json.loads(line)
        else:
            assert row["starter_code"] == "" and "func_name" not in metadata
    assert {r["platform"] for r in rows} == {"leetcode", "atcoder"}
    assert {r["platform"] for r in synthetic_rows("synth-lcb", "train", 4, 1)} == {
        "leetcode", "atcoder"}



@pytest.mark.parametrize("name", ALL)
def test_rows_are_deterministic_by_seed(name: str) -> None:
    assert synthetic_rows(name, "train", 20, 7) == synthetic_rows(name, "train", 20, 7)
    assert synthetic_rows(name, "train", 20, 7) != synthetic_rows(name, "train", 20, 8)
    assert synthetic_demonstrations(name, "eval", 6, 3) == synthetic_demonstrations(
        name, "eval", 6, 3)
    assert synthetic_probes(name) == synthetic_probes(name)


def test_rows_do_not_depend_on_the_interpreter_hash_seed() -> None:
    code = ("import json; from repro.tasks import synthetic_rows as r; "
            "print(json.dumps([r(n, 'eval', 9, 4) for n in ('synth-aime', 'synth-lcb')]))")
    outs = {subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[1],
                           env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True,
                           text=True, check=True).stdout for seed in ("1", "2")}
    assert len(outs) == 1
    assert json.loads(outs.pop()) == [synthetic_rows(n, "eval", 9, 4)
                                      for n in ("synth-aime", "synth-lcb")]


@pytest.mark.parametrize("name", ALL)
def test_train_and_eval_are_disjoint_and_ids_unique(name: str) -> None:
    train, evals = _all(name, "train"), _all(name, "eval")
    train_texts = {_text(name, r) for r in train}
    assert len(train_texts) == len(train)
    assert not train_texts & {_text(name, r) for r in evals}
    ids = [_id(name, r) for r in train + evals]
    assert len(set(ids)) == len(ids)
    assert len(evals) >= 100  # enough held-out problems for avg@k


def test_mirrored_problems_share_a_split() -> None:
    """a+b / b+a (and a problem's functional / stdin variants) never straddle train and eval."""
    splits = {r["problem"]: s for s in ("train", "eval") for r in _all("synth-aime", s)}
    for text, split in splits.items():
        if m := re.fullmatch(r"Compute (\d+)\+(\d+)\.", text):
            assert splits[f"Compute {m[2]}+{m[1]}."] == split
    lcb = {s: {r["question_title"] for r in _all("synth-lcb", s)} for s in ("train", "eval")}
    assert not lcb["train"] & lcb["eval"]


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="split"):
        synthetic_rows("synth-aime", "test", 1, 0)
    with pytest.raises(ValueError, match="holds"):
        synthetic_rows("synth-lcb", "eval", synthetic_size("synth-lcb", "eval") + 1, 0)
    with pytest.raises(ValueError, match="unknown"):
        synthetic_rows("synth-gsm", "train", 1, 0)


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: Fraction}


def _value(expr: str) -> Fraction:
    """Exact value of + - * / arithmetic (division is exact, unlike Python's)."""
    def ev(node: ast.AST) -> Fraction:
        if isinstance(node, ast.BinOp):
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        assert isinstance(node, ast.Constant) and type(node.value) is int
        return Fraction(node.value)
    return ev(ast.parse(expr, mode="eval").body)


def _boxed(response: str) -> str:
    start = response.rindex("\\boxed{") + len("\\boxed{")
    depth, i = 1, start
    while depth:
        depth += {"{": 1, "}": -1}.get(response[i], 0)
        i += 1
    return response[start : i - 1]


def _latex_value(latex: str) -> Fraction | tuple[int, int]:
    if m := re.fullmatch(r"\\d?frac\{(\d+)\}\{(\d+)\}", latex):
        return Fraction(int(m[1]), int(m[2]))
    m = re.fullmatch(r"(\d+) ?\\sqrt\{(\d+)\}", latex)
    assert m, latex
    k, r = int(m[1]), int(m[2])
    assert all(r % (p * p) for p in range(2, r + 1)), f"{latex} is not simplified"
    return (k * k * r, 0)  # the radicand it equals


def _expected(problem: str) -> Fraction | tuple[int, int]:
    if m := re.fullmatch(r"Simplify \$\\sqrt\{(\d+)\}\$\.", problem):
        return (int(m[1]), 0)
    m = re.fullmatch(r"(?:Compute|Simplify) ([\d+\-*/]+)\.", problem)
    assert m, problem
    return _value(m[1])


def _check_math_response(name: str, problem: str, answer: object, response: str) -> None:
    think = re.fullmatch(r"<think>(.*)</think>\n(.*)", response, re.S)
    assert think, response
    for step in think[1].split(", "):  # every equality the trace claims holds
        values = {_value(side) for side in step.split("=")}
        assert len(values) == 1, step
    expected = _expected(problem)
    if name == "synth-aime":
        assert Fraction(int(_boxed(response))) == expected == answer
    else:
        assert _latex_value(_boxed(response)) == expected
        assert _latex_value(str(answer)) == expected


@pytest.mark.parametrize("name", MATH)
def test_math_demonstrations_and_both_forms_are_correct(name: str) -> None:
    n = 200
    rows = synthetic_rows(name, "train", n, 5)
    demos = synthetic_demonstrations(name, "train", n, 5)
    probes = synthetic_probes(name, n, 5)
    assert [d["problem_idx"] for d in demos] == [r["problem_idx"] for r in rows]
    for row, demo, probe in zip(rows, demos, probes, strict=True):
        assert demo["messages"][:-1] == list(probe.messages)
        assert demo["messages"][-1]["content"] == (
            probe.form_a if demo["form"] == "A" else probe.form_b)
        for response in (probe.form_a, probe.form_b):
            _check_math_response(name, row["problem"], row["answer"], response)
    assert all(0 <= r["answer"] <= 999 for r in _all("synth-aime", "eval"))


_HARNESS = r"""
import contextlib, io, json, sys
from typing import *

def extract(response):
    lines = response.split("\n")
    fences = [i for i, line in enumerate(lines) if "```" in line]
    return "\n".join(lines[fences[-2] + 1 : fences[-1]])

def passes(code, tests, fn_name):
    try:
        return run_all(code, tests, fn_name)
    except Exception:
        return False  # runtime error: a failed test, as in LCB

def run_all(code, tests, fn_name):
    for case in tests:
        namespace = {"List": List}
        if fn_name:
            exec(code, namespace)
            got = getattr(namespace["Solution"](), fn_name)(
                *[json.loads(line) for line in case["input"].split("\n")])
            if (list(got) if isinstance(got, tuple) else got) != json.loads(case["output"]):
                return False
        else:
            out = io.StringIO()
            sys.stdin = io.StringIO(case["input"])
            with contextlib.redirect_stdout(out):
                exec(code, namespace)
            got = [line.strip() for line in out.getvalue().strip().split("\n")]
            want = [line.strip() for line in case["output"].strip().split("\n")]
            if got != want:
                return False
    return True

jobs = json.load(sys.stdin)
print(json.dumps([job["label"] for job in jobs
                  if not passes(extract(job["response"]), job["tests"], job["fn_name"])]))
"""


def _tests_of(row: dict) -> list[dict]:
    return json.loads(row["public_test_cases"]) + _decode_private(row["private_test_cases"])


def test_code_demonstrations_and_both_forms_pass_their_tests_when_run() -> None:
    jobs = []
    for split in ("train", "eval"):
        n = synthetic_size("synth-lcb", split)
        rows = synthetic_rows("synth-lcb", split, n, 0)
        probes = synthetic_probes("synth-lcb", n, 0, split)
        demos = synthetic_demonstrations("synth-lcb", split, n, 0)
        for row, probe, demo in zip(rows, probes, demos, strict=True):
            assert probe.problem_id == demo["question_id"] == row["question_id"]
            fn_name = json.loads(row["metadata"]).get("func_name")
            for label, response in (("A", probe.form_a), ("B", probe.form_b),
                                    ("demo", demo["messages"][-1]["content"])):
                jobs.append({"label": f"{row['question_id']}/{label}", "response": response,
                             "tests": _tests_of(row), "fn_name": fn_name})
    run = subprocess.run([sys.executable, "-c", _HARNESS], input=json.dumps(jobs),
                         capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(run.stdout) == []


def test_a_wrong_solution_fails_the_code_check() -> None:
    """The harness is not vacuous: breaking a form makes it fail."""
    rows = synthetic_rows("synth-lcb", "eval", 12, 0)
    probes = synthetic_probes("synth-lcb", 12, 0, "eval")
    jobs = []
    for row, probe in zip(rows, probes, strict=True):
        bad = probe.form_a[: -len("\n```")] + " + 1\n```"  # functional: return x + 1
        if row["platform"] == "atcoder":
            bad = probe.form_a.replace("print(", "print(1 + ")  # stdin: print(1 + x)
        jobs.append({"label": row["question_id"], "response": bad, "tests": _tests_of(row),
                     "fn_name": json.loads(row["metadata"]).get("func_name")})
    run = subprocess.run([sys.executable, "-c", _HARNESS], input=json.dumps(jobs),
                         capture_output=True, text=True, timeout=30, check=True)
    assert json.loads(run.stdout) == [job["label"] for job in jobs]



@pytest.mark.parametrize("name", ALL)
def test_probes_have_two_forms_and_shared_template_prefixes(name: str) -> None:
    probes = synthetic_probes(name)
    assert len(probes) == 16 and len({p.problem_id for p in probes}) == 16
    for p in probes:
        assert p.form_a != p.form_b and p.form_a.startswith("<think>")
        assert 0 < len(p.form_a) - len(p.branch_prefix) <= 30  # they part near the end
        assert len(p.template_prefixes) >= 4 and p.template_prefixes[0] == ""
        assert any(t.endswith("</think>") for t in p.template_prefixes)
        for t in p.template_prefixes:
            assert p.form_a.startswith(t) and p.form_b.startswith(t)
            assert len(t) < len(p.branch_prefix)
    assert {p.messages[-1]["role"] for p in probes} == {"user"}


@pytest.mark.parametrize("name", ALL)
def test_demonstrations_balance_forms_and_stay_short(name: str) -> None:
    for n, seed in ((60, 11), (38, 3), (7, 0)):
        counts = Counter(d["form"] for d in synthetic_demonstrations(name, "train", n, seed))
        assert abs(counts["A"] - counts["B"]) == n % 2
    demos = synthetic_demonstrations(name, "train", 60, 11)
    for d in demos:
        assert [m["role"] for m in d["messages"]][-2:] == ["user", "assistant"]
    forms = [f for p in synthetic_probes(name, 300, 2) for f in (p.form_a, p.form_b)]
    assert max(len(f) for f in forms) <= MAX_RESPONSE


def test_every_text_is_in_the_tokenizer_charset() -> None:
    from repro.models.tokenizer import CHARSET, THINK_TOKENS

    allowed = set(CHARSET)
    for name in ALL:
        for demo in synthetic_demonstrations(name, "eval", 30, 0):
            for message in demo["messages"]:
                text = message["content"]
                for token in THINK_TOKENS:
                    text = text.replace(token, "")
                assert set(text) <= allowed, (name, set(text) - allowed)


def test_prompts_match_the_benchmarks() -> None:
    assert math_user_message("Compute 1+1.", True) == (
        "Compute 1+1.\n\nPlease reason step by step, and put your final answer within "
        "\\boxed{}.\nThe answer is an integer between 0 and 999 inclusive.")
    assert math_user_message("Simplify 2/4.", False).endswith("within \\boxed{}.")
    system, user = code_messages("Q?", "class Solution:\n    def f(self) -> int:\n        ")
    assert system == {"role": "system", "content": LCB_SYSTEM_MESSAGE}
    assert user["content"].startswith("### Question:\nQ?\n\n### Format: You will use the following")
    assert user["content"].endswith(
        "        \n```\n\n### Answer: (use the provided format with backticks)\n\n")
    stdin_user = code_messages("Q?", "")[1]["content"]
    assert "```python\n# YOUR CODE HERE\n```\n\n### Answer:" in stdin_user


def test_every_task_is_its_benchmark_spec_and_every_synthetic_spec_a_task() -> None:
    """The task modules (SYNTHETIC) and the benchmark specs stay in step: each task has the spec
    of its name, whose generator is the task's module, and each synthetic spec's generator is
    a task module (a spec may reuse one under another name)."""
    from repro.benchmarks import benchmark_names, get_benchmark

    specs = [get_benchmark(n) for n in benchmark_names()]
    modules = {n: m.__name__ for n, m in SYNTHETIC.items()}
    generators = {s.name: s.generator.partition(":")[0] for s in specs if s.source == "synthetic"}
    assert set(modules) <= set(generators) and {"synth-aime", "synth-rule"} <= set(modules)
    assert all(generators[name] == module for name, module in modules.items())
    assert set(generators.values()) <= set(modules.values())
