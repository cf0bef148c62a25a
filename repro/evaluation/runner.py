"""`repro eval`: load a benchmark, sample k completions per problem, grade, write Parquet.

Two files per run under --out: `samples.parquet` (one row per completion) and
`problems.parquet` (one row per problem: c of n, avg, pass@k), both with full provenance
(model, checkpoint, benchmark, revision hash, k, sampling, engine, grader version, sandbox mode).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from repro.benchmarks import build_messages, get_benchmark, load_problems
from repro.benchmarks.problem import Problem
from repro.evaluation.stats import bootstrap_ci, pass_at_k
from repro.generation.base import Completion, SamplingConfig
from repro.graders.base import GRADER_VERSION, NO_ANSWER, Grade
from repro.results import EVAL_PROBLEMS, EVAL_SAMPLES, write_table


@dataclass
class EvalConfig:
    """One evaluation run (the options of `repro eval`)."""

    model: str = field(metadata={"help": "Local model folder or hub id (Qwen/Qwen3-32B)."})
    benchmark: str = field(metadata={"help": "Registry name: aime25, hmmt25, livecodebench, synth-*."})
    out: Path = field(metadata={"help": "Output folder for samples.parquet and problems.parquet."})
    k: int | None = field(default=None, metadata={"help": "Samples per problem; None = the benchmark's default."})
    limit: int | None = field(default=None, metadata={"help": "Evaluate only the first N problems."})
    data_dir: Path | None = field(default=None, metadata={"help": "Offline mirror of the datasets."})
    checkpoint: str = field(default="final", metadata={"help": "Label stored with the results."})
    engine: str = field(default="auto", metadata={"help": "auto (vLLM on GPU, else HF), hf or vllm."})
    batch_size: int = field(default=16, metadata={"help": "Prompts per HF generate call."})
    seed: int = field(default=0, metadata={"help": "Sampling seed."})
    sampling: dict[str, Any] = field(
        default_factory=dict,
        metadata={"help": "Overrides of the benchmark's sampling (temperature, max_new_tokens...)."},
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
                raise ValueError(f"EvalConfig.{name} must be >= 1, got {value}")


def sampling_for(cfg: EvalConfig, spec: Any) -> SamplingConfig:
    base = dict(spec.sampling)
    base.update(cfg.sampling)
    base["n"] = cfg.k or spec.default_k
    base["seed"] = cfg.seed
    return SamplingConfig(**base)


def make_grader(spec: Any, cfg: EvalConfig) -> tuple[Any, str]:
    """The benchmark's grader and the sandbox mode it runs under ('none' for math)."""
    if spec.grader == "math":
        from repro.graders.math import MathGrader

        return MathGrader(workers=cfg.workers), "none"
    from repro.graders.code import CodeGrader
    from repro.sandbox import Sandbox, SandboxConfig

    sandbox = Sandbox(SandboxConfig(mode="unsafe" if cfg.unsafe_no_sandbox else "bwrap"))
    sandbox.check()
    return CodeGrader(sandbox, workers=cfg.workers), sandbox.mode


def run_eval(cfg: EvalConfig, engine: Any | None = None) -> dict[str, Path]:
    """Run one evaluation; `engine` may be passed in (tests, or a trainer's live policy)."""
    spec = get_benchmark(cfg.benchmark)
    problems, provenance = load_problems(spec, data_dir=cfg.data_dir, limit=cfg.limit)
    sampling = sampling_for(cfg, spec)
    if engine is None:
        from repro.generation.factory import make_engine

        engine = make_engine(cfg.model, cfg.engine, batch_size=cfg.batch_size, seed=cfg.seed)
    grader, sandbox_mode = make_grader(spec, cfg)  # refuse early: before spending generation time
    tokenizer = getattr(engine, "tokenizer", None)
    prompts = [render(tokenizer, build_messages(spec, p)) for p in problems]
    completions: list[list[Completion]] = []
    chunk = max(1, cfg.batch_size)
    for start in tqdm(range(0, len(prompts), chunk), desc=f"generate {cfg.benchmark}", unit="batch"):
        completions.extend(engine.generate(prompts[start : start + chunk], sampling))
    flat = [(p, c.text) for p, row in zip(problems, completions) for c in row]
    grades = grader.grade_many(flat)
    if hasattr(grader, "close"):
        grader.close()
    keys = {
        "model": str(cfg.model), "checkpoint": cfg.checkpoint, "benchmark": spec.name,
        "revision_hash": provenance["revision_hash"], "k": sampling.n,
        "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k,
        "min_p": sampling.min_p, "max_new_tokens": sampling.max_new_tokens, "seed": sampling.seed,
        "engine": engine.name, "grader_version": GRADER_VERSION, "sandbox_mode": sandbox_mode,
    }
    sample_rows, problem_rows = tabulate(keys, problems, completions, grades)
    config = {"eval": dataclasses.asdict(cfg), "provenance": provenance, "sampling": sampling.as_record()}
    paths = {"samples": cfg.out / "samples.parquet", "problems": cfg.out / "problems.parquet"}
    write_table(sample_rows, EVAL_SAMPLES, paths["samples"], config=config)
    write_table(problem_rows, EVAL_PROBLEMS, paths["problems"], config=config)
    mean, lo, hi = bootstrap_ci([r["avg"] for r in problem_rows])
    print(f"{spec.name}: avg@{sampling.n} = {mean:.4f} (95% CI {lo:.4f}..{hi:.4f}, "
          f"bootstrap over {len(problem_rows)} problems) -> {cfg.out}")
    return paths


def run_eval_suite(cfg: EvalConfig, benchmarks: list[str], split: bool) -> list[dict[str, Path]]:
    """Several benchmarks with one engine (one model load, one vLLM start-up). With `split`, each
    benchmark's files go to `cfg.out/benchmark=NAME/` (the pipeline's hive layout)."""
    if len(benchmarks) > 1 and not split:
        raise ValueError(f"{len(benchmarks)} benchmarks need one folder each: pass --split")
    from repro.generation.factory import make_engine

    engine = make_engine(cfg.model, cfg.engine, batch_size=cfg.batch_size, seed=cfg.seed)
    return [
        run_eval(dataclasses.replace(cfg, benchmark=name,
                                     out=cfg.out / f"benchmark={name}" if split else cfg.out),
                 engine=engine)
        for name in benchmarks
    ]


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
    for problem, row in zip(problems, completions):
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
        })
    return samples, per_problem
