"""`repro eval`: load a benchmark, sample k completions per problem, grade, write Parquet.

Two files per run under --out: `samples.parquet` (one row per completion) and
`problems.parquet` (one row per problem: c of n, avg, pass@k), both with full provenance
(model, checkpoint, benchmark, revision hash, k, sampling, engine, grader version, sandbox mode),
and a `manifest.json` written last (checksums, rows). A local model folder is verified against
its run's manifest first; finished generation batches are cached (`cache`), so a killed
evaluation resumes without regenerating them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro.benchmarks import BenchmarkSpec, build_messages, get_benchmark, load_problems
from repro.benchmarks.pins import missing_pins, pins_for, read_lock
from repro.benchmarks.problem import Problem
from repro.evaluation.cache import GenerationCache
from repro.evaluation.stats import bootstrap_ci, pass_at_k
from repro.generation.base import Completion, SamplingConfig
from repro.graders.base import GRADER_FAILURES, GRADER_VERSION, NO_ANSWER, Grade
from repro.progress import progress
from repro.results import EVAL_PROBLEMS, EVAL_SAMPLES, write_table
from repro.results.manifest import check_tree, write_manifest

SAMPLING_KEYS = tuple(f.name for f in dataclasses.fields(SamplingConfig)
                      if f.name not in ("n", "seed"))  # the run sets n (= k) and the seed


@dataclass
class EvalConfig:
    """One evaluation run (the options of `repro eval`)."""

    model: str = field(metadata={"help": "Local model folder or hub id (Qwen/Qwen3-32B)."})
    benchmark: str = field(
        metadata={"help": "Registry name: aime25, hmmt25, livecodebench, synth-*."}
    )
    out: Path = field(metadata={"help": "Output folder for samples.parquet and problems.parquet."})
    k: int | None = field(
        default=None, metadata={"help": "Samples per problem; None = the benchmark's default."}
    )
    limit: int | None = field(
        default=None, metadata={"help": "Evaluate only the first N problems."}
    )
    data_dir: Path | None = field(
        default=None, metadata={"help": "Offline mirror of the datasets."}
    )
    lock: Path | None = field(default=None, metadata={
        "help": "Data lock of `repro data pin`: sha256 pins, and the mirror when data_dir is "
                "None."})
    checkpoint: str = field(default="final", metadata={"help": "Label stored with the results."})
    engine: str = field(
        default="auto", metadata={"help": "auto (vLLM on GPU, else HF), hf or vllm."}
    )
    batch_size: int = field(default=16, metadata={"help": "Prompts per HF generate call."})
    seed: int = field(default=0, metadata={"help": "Sampling seed."})
    sampling: dict[str, Any] = field(
        default_factory=dict,
        metadata={"help": "Overrides of the benchmark's sampling (temperature, "
                  "max_new_tokens...)."},
    )
    workers: int = field(default=2, metadata={"help": "Parallel grading workers (sandboxes)."})
    unsafe_no_sandbox: bool = field(
        default=False,
        metadata={"help": "Run generated code without bubblewrap (recorded in the results)."},
    )

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        for name in ("k", "limit"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name} must be >= 1, got {value}")
        for name in ("batch_size", "workers"):
            value = getattr(self, name)
            if value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
        unknown = sorted(set(self.sampling) - set(SAMPLING_KEYS))
        if unknown:
            raise ValueError(f"sampling key {unknown[0]!r} is not one of {list(SAMPLING_KEYS)}")
        SamplingConfig(**self.sampling)  # a bad value fails here, naming the field


def sampling_for(cfg: EvalConfig, spec: Any) -> SamplingConfig:
    """The benchmark's sampling, every key of `cfg.sampling` over it, n = k, the run seed."""
    base = dict(spec.sampling)
    base.update(cfg.sampling)
    base["n"] = cfg.k or spec.default_k
    base["seed"] = cfg.seed
    return SamplingConfig(**base)


@dataclass
class Prepared:
    """One benchmark, loaded and checked before any model is: problems, sampling, grader."""

    cfg: EvalConfig
    spec: BenchmarkSpec
    problems: list[Problem]
    provenance: dict[str, Any]
    sampling: SamplingConfig


def prepare(cfg: EvalConfig) -> Prepared:
    """Everything that can fail without a model: benchmark name, data, sampling, sandbox."""
    spec = get_benchmark(cfg.benchmark)
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
    return Prepared(cfg, spec, problems, provenance, sampling_for(cfg, spec))


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


def run_eval(cfg: EvalConfig, engine: Any | None = None) -> dict[str, Path]:
    """Run one evaluation; `engine` may be passed in (tests, or a trainer's live policy)."""
    prepared = prepare(cfg)
    if engine is None:
        from repro.generation.factory import make_engine

        check_tree(cfg.model)  # a damaged exported policy: refuse before generating

        engine = make_engine(cfg.model, cfg.engine, batch_size=cfg.batch_size, seed=cfg.seed)
    return run_prepared(prepared, engine)


def run_prepared(prepared: Prepared, engine: Any) -> dict[str, Path]:
    """Generate, grade and write one prepared benchmark."""
    cfg, spec, problems = prepared.cfg, prepared.spec, prepared.problems
    sampling = prepared.sampling
    grader, sandbox_mode = make_grader(spec, cfg)
    tokenizer = getattr(engine, "tokenizer", None)
    prompts = [render(tokenizer, build_messages(spec, p)) for p in problems]
    keys = [f"{spec.name}/{p.problem_id}" for p in problems]  # each problem's random streams
    chunk = max(1, cfg.batch_size)
    cache = GenerationCache(cfg.out, cfg.model, engine.name, sampling.as_record())
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
    config = {"eval": dataclasses.asdict(cfg), "provenance": prepared.provenance,
              "sampling": sampling.as_record()}
    paths = {"samples": cfg.out / "samples.parquet", "problems": cfg.out / "problems.parquet"}
    write_table(sample_rows, EVAL_SAMPLES, paths["samples"], config=config)
    write_table(problem_rows, EVAL_PROBLEMS, paths["problems"], config=config)
    write_manifest(cfg.out, [p.name for p in paths.values()], {"benchmark": spec.name})
    cache.remove()
    mean, lo, hi = bootstrap_ci([r["avg"] for r in problem_rows])
    failures = sum(r["grader_errors"] for r in problem_rows)
    print(f"{spec.name}: avg@{sampling.n} = {mean:.4f} (95% CI {lo:.4f}..{hi:.4f}, "
          f"bootstrap over {len(problem_rows)} problems; {failures} grader errors/timeouts) "
          f"-> {cfg.out}")
    return paths


def run_eval_suite(cfg: EvalConfig, benchmarks: list[str], split: bool) -> list[dict[str, Path]]:
    """Several benchmarks with one engine (one model load, one vLLM start-up). Every benchmark
    is loaded and checked first, so a bad name or a missing dataset fails before the model
    loads. With `split`, each benchmark's files go to `cfg.out/benchmark=NAME/` (the pipeline's
    hive layout)."""
    if len(benchmarks) > 1 and not split:
        raise ValueError(f"{len(benchmarks)} benchmarks need one folder each: pass --split")
    duplicated = sorted({b for b in benchmarks if benchmarks.count(b) > 1})
    if duplicated:
        raise ValueError(f"--benchmark {duplicated[0]} is given twice")
    prepared = [
        prepare(dataclasses.replace(cfg, benchmark=name,
                                    out=cfg.out / f"benchmark={name}" if split else cfg.out))
        for name in benchmarks
    ]
    from repro.generation.factory import make_engine

    check_tree(cfg.model)  # a damaged exported policy: refuse before generating
    engine = make_engine(cfg.model, cfg.engine, batch_size=cfg.batch_size, seed=cfg.seed)
    return [run_prepared(p, engine) for p in prepared]


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
