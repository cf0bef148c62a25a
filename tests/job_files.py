"""One evaluation job's files (samples.parquet and problems.parquet, the schemas `repro eval`
writes) from made-up grades, for the tests that build an aggregate from known correctness."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from repro.results import write_table
from repro.results.schemas import EVAL_PROBLEMS, EVAL_SAMPLES

Grade = tuple[bool, str | None]  # (correct, extracted answer)


def write_eval_files(folder: Path, graded: Sequence[Sequence[Grade]], *, benchmark: str,
                     seed: int, problems: Sequence[tuple[str, str]] | None = None) -> Path:
    """`graded[p]` holds problem p's k samples; `problems` its (problem_id, problem_hash), by
    default (f"p{p}", f"h{p}"). The problem rows are written in reverse order: readers must sort.
    Returns problems.parquet."""
    ids = problems or [(f"p{p}", f"h{p}") for p in range(len(graded))]
    k = len(graded[0])
    common = {"model": "ckpt", "checkpoint": "final", "benchmark": benchmark,
              "revision_hash": "r", "k": k, "temperature": 0.6, "top_p": 0.95, "top_k": 20,
              "min_p": 0.0, "max_new_tokens": 64, "seed": seed, "engine": "hf",
              "grader_version": "1", "grader_compat": "default", "sandbox_mode": "none"}
    samples, per_problem = [], []
    for (problem_id, problem_hash), grades in zip(ids, graded, strict=True):
        pid = {"problem_id": problem_id, "problem_hash": problem_hash}
        samples += [common | pid | {"sample_idx": i, "completion": "x", "n_tokens": 3,
                                    "finish_reason": "stop", "correct": bool(ok),
                                    "verdict": "ok", "reason": "", "extracted": extracted}
                    for i, (ok, extracted) in enumerate(grades)]
        c = sum(bool(ok) for ok, _ in grades)
        per_problem.append(common | pid | {"n": k, "c": c, "avg": c / k, "pass_at_k": float(c > 0),
                                           "truncated_frac": 0.0, "no_answer_frac": 0.0,
                                           "grader_errors": 0})
    write_table(samples, EVAL_SAMPLES, folder / "samples.parquet")
    write_table(per_problem[::-1], EVAL_PROBLEMS, folder / "problems.parquet")
    return folder / "problems.parquet"
