"""`repro eval`: load each benchmark, sample k completions per problem, grade, write Parquet.

The evaluation's EvalConfig (repro/evaluation/config.py) is written as OUT/resolved.yaml before
anything is generated. Then, per benchmark under OUT (OUT/benchmark=NAME/ with split):
`samples.parquet` (one row per completion) and `problems.parquet` (one row per problem: c of n,
avg, pass@k), both with full provenance (model, checkpoint, benchmark, revision hash, k,
sampling, engine, grader version, sandbox mode), and a `manifest.json` written last (checksums,
rows). A local model folder is
verified against its run's manifest first; finished generation batches are cached (`cache`), so
a killed evaluation resumes without regenerating them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro.benchmarks import BenchmarkSpec, build_messages, get_benchmark, load_problems
from repro.benchmarks.pins import missing_pins, pins_for, read_lock
from repro.benchmarks.problem import Problem
from repro.evaluation.cache import GenerationCache
from repro.evaluation.config import EvalConfig, write_resolved
from repro.evaluation.stats import bootstrap_ci, pass_at_k
from repro.generation.base import Completion, SamplingConfig
from repro.graders.base import GRADER_FAILURES, GRADER_VERSION, NO_ANSWER, Grade
from repro.progress import progress
from repro.results import EVAL_PROBLEMS, EVAL_SAMPLES, write_table
from repro.results.manifest import check_tree, write_manifest


@dataclass
class Prepared:
    """One benchmark, loaded and checked before any model is: problems, sampling, grader."""

    cfg: EvalConfig
    spec: BenchmarkSpec
    out: Path
    problems: list[Problem]
    provenance: dict[str, Any]
    sampling: SamplingConfig


def prepare(cfg: EvalConfig, name: str) -> Prepared:
    """Everything that can fail without a model: benchmark name, data, sampling, sandbox."""
    spec = get_benchmark(name)
    lock = read_lock(Path(cfg.lock)) if cfg.lock is not None else None
    missing = missing_pins([spec], lock)
    if missing:
        raise ValueError(
            f"{spec.name}: no sha256 pin for {missing[spec.name]} of {spec.dataset}@"
            f"{spec.revision} (lock: {cfg.lock}); its private tests are pickled. Pin them once: "
            f"repro data pin --benchmark {spec.name} --data-dir DATA_DIR --lock data.lock.yaml"
        )
    data_dir = cfg.data_dir if cfg.data_dir is not None or lock is None else lock["data_dir"]
    pins = pins_for(spec, lock) if spec.source != "synthetic" else {}
    problems, provenance = load_problems(spec, data_dir=data_dir, limit=cfg.limit,
                                         sha256_pins=pins or None)
    if spec.grader == "code":
        make_grader(spec, cfg)  # CodeGrader checks its sandbox: refuses now if none can start
    return Prepared(cfg, spec, cfg.out_of(name), problems, provenance, cfg.sampling_for(spec))


def make_grader(spec: Any, cfg: EvalConfig) -> tuple[Any, str]:
    """The benchmark's grader and the sandbox mode it runs under ('none' for math)."""
    if spec.grader == "math":
        from repro.graders.math import MathGrader

        return MathGrader(workers=cfg.workers, compat=spec.compat), "none"
    from repro.graders.code import CodeGrader
    from repro.sandbox import Sandbox, SandboxConfig

    sandbox = Sandbox(SandboxConfig(mode="unsafe" if cfg.unsafe_no_sandbox else "bwrap"))
    sandbox.check()
    return CodeGrader(sandbox, workers=cfg.workers, compat=spec.compat), sandbox.mode


def run_eval(cfg: EvalConfig, engine: Any | None = None) -> dict[str, dict[str, Path]]:
    """The evaluation `cfg` describes: every benchmark loaded and checked first (a bad name or a
    missing dataset fails before the model loads), then one engine (one model load, one vLLM
    start-up) for all of them; `cfg` is written as OUT/resolved.yaml before it generates.
    `engine` may be passed in (tests, or a trainer's live policy). Returns each benchmark's
    written files, by name."""
    prepared = [prepare(cfg, name) for name in cfg.benchmarks]
    if engine is None:
        from repro.generation.factory import make_engine

        check_tree(cfg.model)  # a damaged exported policy: refuse before generating
        engine = make_engine(cfg.model, cfg.engine, batch_size=cfg.batch_size, seed=cfg.seed)
    write_resolved(cfg)
    return {p.spec.name: run_prepared(p, engine) for p in prepared}


def run_prepared(prepared: Prepared, engine: Any) -> dict[str, Path]:
    """Generate, grade and write one prepared benchmark."""
    cfg, spec, problems, out = prepared.cfg, prepared.spec, prepared.problems, prepared.out
    sampling = prepared.sampling
    grader, sandbox_mode = make_grader(spec, cfg)
    tokenizer = getattr(engine, "tokenizer", None)
    prompts = [render(tokenizer, build_messages(spec, p)) for p in problems]
    keys = [f"{spec.name}/{p.problem_id}" for p in problems]  # each problem's random streams
    chunk = max(1, cfg.batch_size)
    cache = GenerationCache(out, cfg.model, engine.name, sampling.as_record())
    if cache.resumed:
        print(f"repro eval: resuming {spec.name}: {cache.resumed} finished batch(es) in "
              f"{cache.path}")
    completions: list[list[Completion]] = []
    with progress(len(prompts), f"generate {spec.name}", "problem") as bar:
        for start in range(0, len(prompts), chunk):
            end = start + chunk
            rows = cache.get(start, prompts[start:end])
            if rows is None:
                rows = engine.generate(prompts[start:end], sampling, keys=keys[start:end])
                cache.put(start, prompts[start:end], rows)
            completions.extend(rows)
            bar.update(len(prompts[start:end]))
    grades: list[Grade] = []
    try:
        with progress(len(problems), f"grade {spec.name}", "problem") as bar:
            for start in range(0, len(problems), chunk):  # whole problems: code dedupes per problem
                part = list(zip(problems[start:start + chunk], completions[start:start + chunk],
                                strict=False))
                grades += grader.grade_many([(p, c.text) for p, row in part for c in row])
                bar.update(len(part))
    finally:
        if hasattr(grader, "close"):
            grader.close()
    keys_row = {
        "model": str(cfg.model), "checkpoint": cfg.checkpoint, "benchmark": spec.name,
        "revision_hash": prepared.provenance["revision_hash"], "k": sampling.n,
        "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k,
        "min_p": sampling.min_p, "max_new_tokens": sampling.max_new_tokens, "seed": sampling.seed,
        "engine": engine.name, "grader_version": GRADER_VERSION, "grader_compat": spec.compat,
        "sandbox_mode": sandbox_mode,
    }
    sample_rows, problem_rows = tabulate(keys_row, problems, completions, grades)
    config = {"eval": cfg.to_dict(), "provenance": prepared.provenance,
              "sampling": sampling.as_record()}
    paths = {"samples": out / "samples.parquet", "problems": out / "problems.parquet"}
    write_table(sample_rows, EVAL_SAMPLES, paths["samples"], config=config)
    write_table(problem_rows, EVAL_PROBLEMS, paths["problems"], config=config)
    write_manifest(out, [p.name for p in paths.values()], {"benchmark": spec.name})
    cache.remove()
    mean, lo, hi = bootstrap_ci([r["avg"] for r in problem_rows])
    failures = sum(r["grader_errors"] for r in problem_rows)
    print(f"{spec.name}: avg@{sampling.n} = {mean:.4f} (95% CI {lo:.4f}..{hi:.4f}, "
          f"bootstrap over {len(problem_rows)} problems; {failures} grader errors/timeouts) "
          f"-> {out}")
    return paths


def render(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """The model's own chat template, with the generation prompt."""
    if tokenizer is None or getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("the model's tokenizer has no chat template; prompts need one")
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def tabulate(
    keys: dict[str, Any],
    problems: list[Problem],
    completions: list[list[Completion]],
    grades: list[Grade],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    samples, per_problem = [], []
    it = iter(grades)
    for problem, row in zip(problems, completions, strict=False):
        h = problem.text_hash()
        graded = [(c, next(it)) for c in row]
        for j, (c, g) in enumerate(graded):
            samples.append(keys | {
                "problem_id": problem.problem_id, "problem_hash": h, "sample_idx": j,
                "completion": c.text, "n_tokens": c.n_tokens, "finish_reason": c.finish_reason,
                "correct": g.correct, "verdict": g.verdict, "reason": g.reason,
                "extracted": g.extracted,
            })
        n, c_ok = len(graded), sum(g.correct for _, g in graded)
        per_problem.append(keys | {
            "problem_id": problem.problem_id, "problem_hash": h, "n": n, "c": c_ok,
            "avg": c_ok / n, "pass_at_k": pass_at_k(n, c_ok, n),
            "truncated_frac": sum(c.finish_reason == "length" for c, _ in graded) / n,
            "no_answer_frac": sum(g.verdict == NO_ANSWER for _, g in graded) / n,
            "grader_errors": sum(g.verdict in GRADER_FAILURES for _, g in graded),
        })
    return samples, per_problem
