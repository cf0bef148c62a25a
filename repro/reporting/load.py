"""The aggregate tables as tables and figures read them: per-run curves and per-seed problem
scores, indexed once. Only `results/aggregate/*.parquet` is read; of eval_samples only the
start's samples on tasks that classify their errors (`start_errors`).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from repro.benchmarks import get_benchmark, load_problems
from repro.reporting.aggregate import CURVES_OUT, PROBLEMS_OUT, RUNS_OUT, SAMPLES_OUT
from repro.reporting.study import INIT_ALGO, Study
from repro.results import AGG_EVAL_PROBLEMS, AGG_RUNS, AGG_TRAIN_CURVES, read_table
from repro.results.manifest import check_inputs
from repro.tasks import SYNTHETIC

RunKey = tuple[str, str, int, int]  # model, algo, group_size, seed
EvalKey = tuple[str, str, int | None, float, str]  # model, algo, group_size, frac, benchmark
SeedScores = dict[int, dict[str, float]]  # seed -> problem_id -> avg (fraction correct)
StartErrors = dict[tuple[str, str], dict[int, Counter[str]]]  # (model, bench) -> seed -> kinds


@dataclass(frozen=True)
class Aggregate:
    study: Study
    runs: pa.Table  # AGG_RUNS
    curves: Mapping[RunKey, pa.Table]  # one run's AGG_TRAIN_CURVES rows, by step
    scores: Mapping[EvalKey, SeedScores]
    k: Mapping[str, frozenset[int]]  # benchmark -> samples per problem seen
    start_errors: StartErrors = field(default_factory=dict)  # the start's wrong samples by kind

    def models(self) -> list[str]:
        return sorted({key[0] for key in self.curves} | {key[0] for key in self.scores})

    def benchmarks(self) -> list[str]:
        return sorted({key[4] for key in self.scores})

    def seed_curves(self, model: str, algo: str, group_size: int) -> dict[int, pa.Table]:
        """seed -> curve of the runs of (model, algo, G), by seed."""
        return {key[3]: curve for key, curve in sorted(self.curves.items())
                if key[:3] == (model, algo, group_size)}

    def seed_scores(self, model: str, algo: str, benchmark: str, group_size: int | None,
                    frac: float) -> SeedScores:
        return self.scores.get((model, algo, group_size, frac, benchmark), {})

    def group_sizes(self, model: str, algos: tuple[str, ...]) -> list[int]:
        """Group sizes at which any of `algos` has evaluations."""
        found = {key[2] for key in self.scores if key[0] == model and key[1] in algos}
        return sorted(g for g in found if g is not None)


def load_aggregate(folder: Path) -> Aggregate:
    """Read and index `repro aggregate`'s output; its files must share one study setting."""
    paths = {name: folder / name for name in (CURVES_OUT, RUNS_OUT, PROBLEMS_OUT)}
    for path in paths.values():
        if not path.is_file():
            raise ValueError(f"{path} does not exist: run repro aggregate first")
    check_inputs(paths.values())
    studies = {path: Study.from_parquet(path) for path in paths.values()}
    study = studies[paths[RUNS_OUT]]
    for path, other in studies.items():
        if other != study:
            raise ValueError(f"{path} was aggregated with other study settings than "
                             f"{paths[RUNS_OUT]} ({other} != {study}); rerun repro aggregate")
    curves = read_table(paths[CURVES_OUT], AGG_TRAIN_CURVES)
    problems = read_table(paths[PROBLEMS_OUT], AGG_EVAL_PROBLEMS)
    return Aggregate(
        study=study,
        runs=read_table(paths[RUNS_OUT], AGG_RUNS),
        curves=_split_runs(curves),
        scores=_index_scores(problems),
        k=_k_by_benchmark(problems),
        start_errors=start_errors(folder / SAMPLES_OUT) if (folder / SAMPLES_OUT).is_file()
        else {},
    )


def start_errors(samples: Path) -> StartErrors:
    """(model, benchmark) -> seed -> Counter of the error kinds of the start's wrong samples,
    for benchmarks whose synthetic task classifies errors (`error_kind`); every start seed is
    listed, one without errors with an empty Counter. The gold answers come from the task's
    deterministic generator, checked problem by problem against the samples' problem_hash."""
    classified = sorted(name for name, task in SYNTHETIC.items() if hasattr(task, "error_kind"))
    columns = ["run_model", "run_seed", "benchmark", "problem_id", "problem_hash", "correct",
               "extracted"]
    table = pq.read_table(samples, columns=columns, filters=[
        ("run_algo", "=", INIT_ALGO), ("benchmark", "in", classified)])
    gold: dict[str, dict[str, tuple[str, str]]] = {}  # bench -> id -> (text hash, answer)
    out: StartErrors = {}
    for model, seed, bench, pid, phash, correct, extracted in zip(
        *(table[c].to_pylist() for c in columns), strict=True
    ):
        if bench not in gold:
            gold[bench] = {p.problem_id: (p.text_hash(), p.answer)
                           for p in load_problems(get_benchmark(bench))[0]}
        seen = out.setdefault((model, bench), {}).setdefault(seed, Counter())
        if correct:
            continue
        if gold[bench].get(pid, ("", ""))[0] != phash:
            raise ValueError(f"{samples}: {bench} problem {pid} is not the one the task "
                             "generates now; its errors cannot be classified")
        seen[SYNTHETIC[bench].error_kind(gold[bench][pid][1], extracted)] += 1
    return out


def _split_runs(curves: pa.Table) -> dict[RunKey, pa.Table]:
    """Slices of consecutive rows with equal keys (the aggregate is sorted by them)."""
    keys = zip(*(curves[c].to_pylist() for c in ("run_model", "run_algo", "run_group_size",
                                                 "run_seed")), strict=True)
    runs: dict[RunKey, pa.Table] = {}
    start = 0
    for key, rows in itertools.groupby(keys):
        length = sum(1 for _ in rows)
        runs[key] = curves.slice(start, length)
        start += length
    return runs


def _index_scores(problems: pa.Table) -> dict[EvalKey, SeedScores]:
    columns = ("run_model", "run_algo", "run_group_size", "frac", "benchmark", "run_seed",
               "problem_id", "avg")
    scores: dict[EvalKey, SeedScores] = {}
    for model, algo, g, frac, bench, seed, pid, avg in zip(
        *(problems[c].to_pylist() for c in columns), strict=True
    ):
        scores.setdefault((model, algo, g, frac, bench), {}).setdefault(seed, {})[pid] = avg
    return scores


def _k_by_benchmark(problems: pa.Table) -> dict[str, frozenset[int]]:
    found: dict[str, set[int]] = {}
    for bench, k in zip(problems["benchmark"].to_pylist(), problems["k"].to_pylist(), strict=True):
        found.setdefault(bench, set()).add(k)
    return {bench: frozenset(ks) for bench, ks in found.items()}
