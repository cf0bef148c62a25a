"""lm-eval hooks of the *_repro tasks: docs from repro's loaders, scores from repro's graders.

`dataset` is the tasks' `custom_dataset`: lm-eval calls it with the task metadata (plus any
`--metadata` JSON), so the same pinned loader, offline mirror and LCB shard pins apply as in
`repro eval`, and the synthetic tasks need no files at all.
"""

from __future__ import annotations

import atexit
import functools
import json
from statistics import fmean
from typing import Any

from repro.benchmarks import (
    BenchmarkSpec,
    CodeTests,
    Problem,
    build_messages,
    get_benchmark,
    load_problems,
)


def dataset(
    benchmark: str,
    data_dir: str | None = None,
    sha256_pins: dict[str, str] | None = None,
    **_: Any,
) -> Any:
    """A DatasetDict with one `test` split of docs (other metadata keys, e.g. version, unused)."""
    import datasets

    spec = get_benchmark(benchmark)
    lcb_only = {"sha256_pins": sha256_pins} if spec.source == "lcb_jsonl" else {}
    problems, provenance = load_problems(spec, data_dir=data_dir, **lcb_only)
    docs = [problem_to_doc(spec, p, provenance["revision_hash"]) for p in problems]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(docs)})


def problem_to_doc(spec: BenchmarkSpec, problem: Problem, revision_hash: str) -> dict[str, str]:
    """A flat, all-string doc (Arrow-friendly) that `doc_to_problem` turns back into a Problem."""
    messages = build_messages(spec, problem)
    tests = problem.tests
    return {
        "benchmark": spec.name,
        "grader": spec.grader,
        "problem_id": problem.problem_id,
        "question": problem.question,
        "answer": problem.answer or "",
        "starter_code": problem.starter_code,
        "tests": "" if tests is None else json.dumps(
            {"inputs": tests.inputs, "outputs": tests.outputs, "fn_name": tests.fn_name}
        ),
        "metadata": json.dumps(dict(problem.metadata)),
        "system": "".join(m["content"] for m in messages if m["role"] == "system"),
        "user": messages[-1]["content"],
        "target": problem.answer or "",
        "revision_hash": revision_hash,
    }


def doc_to_problem(doc: dict[str, str]) -> Problem:
    tests = json.loads(doc["tests"]) if doc["tests"] else None
    return Problem(
        benchmark=doc["benchmark"],
        problem_id=doc["problem_id"],
        question=doc["question"],
        answer=doc["answer"] or None,
        starter_code=doc["starter_code"],
        tests=None if tests is None else CodeTests(
            tuple(tests["inputs"]), tuple(tests["outputs"]), tests["fn_name"]
        ),
        metadata=json.loads(doc["metadata"]),
    )


def process_results(doc: dict[str, str], results: list[Any]) -> dict[str, float]:
    """avg@k of one problem: the fraction of its k kept samples the grader accepts."""
    completions = results[0] if results and isinstance(results[0], list) else results
    grader = _grader(doc["benchmark"])
    problem = doc_to_problem(doc)
    return {"avg@k": fmean(grader.grade(problem, text).correct for text in completions)}


@functools.cache
def _grader(benchmark: str) -> Any:
    """One grader per benchmark and process (its worker pool / sandbox is reused across docs),
    in the benchmark's compat mode, as `repro eval`."""
    spec = get_benchmark(benchmark)
    if spec.grader == "math":
        from repro.graders.math import MathGrader

        grader = MathGrader(compat=spec.compat)
    else:
        from repro.graders.code import CodeGrader
        from repro.sandbox import Sandbox

        grader = CodeGrader(Sandbox(), compat=spec.compat)  # bubblewrap, as `repro eval`
    atexit.register(grader.close)
    return grader
