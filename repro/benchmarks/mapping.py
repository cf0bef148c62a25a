"""Hub row -> `Problem` (driven by a spec's field mapping) and `Problem` -> chat messages.

Real benchmarks and their synthetic stand-ins share one mapping per schema, so a synthetic
row that maps cleanly is, by construction, in the real hub schema.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from repro.benchmarks.lcb import decode_tests
from repro.benchmarks.problem import CodeTests, Problem
from repro.benchmarks.spec import BenchmarkSpec


def row_to_problem(
    spec: BenchmarkSpec, row: Mapping[str, Any], *, allow_pickle: bool = False
) -> Problem:
    """Apply `spec.fields` (hub field -> target); code rows get LCB's test layout.

    `allow_pickle` is True only for rows from a shard whose sha256 matched its pin, or rows
    generated in-process; otherwise pickled private tests raise `PickleRefused`.
    """
    values: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    tests: dict[str, Any] = {}
    for hub_field, target in spec.fields.items():
        if hub_field not in row:
            raise ValueError(
                f"{spec.name}: row has no field {hub_field!r} (fields: {sorted(row)}); "
                f"the mapping is declared in {spec.path}"
            )
        value = row[hub_field]
        if target.startswith("metadata."):
            metadata[target.removeprefix("metadata.")] = value
        elif target.startswith("tests."):
            tests[target.removeprefix("tests.")] = value
        else:
            values[target] = value
    problem_id = str(values["problem_id"])
    answer = values.get("answer")
    return Problem(
        benchmark=spec.name,
        problem_id=problem_id,
        question=values["question"],
        answer=None if answer is None else str(answer),
        starter_code=values.get("starter_code") or "",
        tests=_lcb_tests(tests, allow_pickle) if spec.kind == "code" else None,
        metadata=metadata,
    )


def _lcb_tests(raw: Mapping[str, Any], allow_pickle: bool) -> CodeTests:
    """Public tests first, then private; `fn_name` from metadata.func_name (None: stdin)."""
    cases = decode_tests(raw["public"], allow_pickle=False)
    cases += decode_tests(raw["private"], allow_pickle=allow_pickle)
    meta = json.loads(raw.get("metadata") or "{}")
    return CodeTests(
        inputs=tuple(case["input"] for case in cases),
        outputs=tuple(case["output"] for case in cases),
        fn_name=meta.get("func_name"),
    )


def build_messages(spec: BenchmarkSpec, problem: Problem) -> list[dict[str, str]]:
    """Chat messages for one problem; the engine applies the model's chat template later.

    The builders live in `repro.tasks.prompts` so training and evaluation prompts have one source.
    """
    from repro.tasks.prompts import code_messages, math_user_message

    if spec.template == "lcb-generic":
        return code_messages(problem.question, problem.starter_code)
    integer = spec.template == "math-integer"
    return [{"role": "user", "content": math_user_message(problem.question, integer)}]
