"""The `repro` command line: one Typer app, one subcommand per pipeline step.

The CLI only parses options and dispatches; the work lives in the modules it calls.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from repro.atomic import WriteFailed

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)

THREADS_HELP = (
    "torch CPU threads (default: torch's choice). Give each job no more threads than the cores "
    "it owns: an op spread over a core another job is using stalls (measured 10x slower)."
)


def _set_threads(threads: int | None) -> None:
    if threads is not None:
        import torch

        if threads < 1:
            raise typer.BadParameter(f"--threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)
bench_app = typer.Typer(no_args_is_help=True, help="Speed and memory benchmarks (ratios, side by side).")
app.add_typer(bench_app, name="bench")
data_app = typer.Typer(no_args_is_help=True, help="Benchmark files: download once, pin by sha256.")
app.add_typer(data_app, name="data")


@app.command()
def theory(
    out: Annotated[Path, typer.Option(help="Output folder for theory.parquet and the figure.")] = Path(
        "results/theory"
    ),
    steps: Annotated[int, typer.Option(help="Rollout batches per algorithm.")] = 60,
    seed: Annotated[int, typer.Option(help="Random seed (sampling of the groups).")] = 0,
) -> None:
    """Exact tabular experiment: learning tax (KL at the template) and drift between equal answers."""
    from repro.theory.experiment import TheoryConfig, run_theory

    run_theory(TheoryConfig(steps=steps, seed=seed), out)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def sft(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option(help="Model folder to write (save_pretrained + sft_metrics.json).")],
    threads: Annotated[int | None, typer.Option(help=THREADS_HELP)] = None,
) -> None:
    """SFT warm start on the synthetic demonstrations. Extra arguments are KEY=VALUE overrides of
    SFTConfig (e.g. steps=600 lr=3e-3); see repro/training/sft.py for every field."""
    from repro.config_fields import check_fields
    from repro.training.config import parse_overrides
    from repro.training.sft import SFTConfig, run_sft

    try:
        overrides = parse_overrides(list(ctx.args))
        check_fields(SFTConfig, overrides)
        cfg = SFTConfig(**overrides)
    except (TypeError, ValueError) as err:
        typer.echo(f"repro sft: {err}", err=True)
        raise typer.Exit(2) from None
    _set_threads(threads)
    run_sft(cfg, out)


def _train_epilog() -> str:
    from repro.training.config import fields_help

    return fields_help()


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    epilog=_train_epilog(),
)
def train(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option(help="Run folder: train_log.parquet, final/, checkpoints/.")],
    config: Annotated[Path | None, typer.Option(help="YAML file of TrainConfig fields.")] = None,
    label: Annotated[str | None, typer.Option(help="Run label in the log (default: algorithm).")] = None,
    resume: Annotated[bool, typer.Option(help="Continue from the newest checkpoint in --out.")] = False,
    threads: Annotated[int | None, typer.Option(help=THREADS_HELP)] = None,
    fingerprint: Annotated[str, typer.Option(
        help="Stored with each checkpoint (the pipeline passes its source digest); --resume "
             "continues only a checkpoint with the same fingerprint and config.")] = "",
    export: Annotated[Path | None, typer.Option(
        help="When done, copy train_log.parquet, policy/frac=F/ per budget fraction and "
             "manifest.json here (the pipeline's outputs; --out keeps the resumable state).")] = None,
) -> None:
    """RL-train a policy. Extra arguments are KEY=VALUE overrides of the config, e.g.
    `algorithm=dfpo objective.transform=orth_proj steps=40` (fields: see TrainConfig)."""
    from repro.training.config import load_train_config
    from repro.training.loop import train as run_train

    try:
        cfg = load_train_config(config, list(ctx.args))
    except ValueError as err:
        typer.echo(f"repro train: {err}", err=True)
        raise typer.Exit(2) from None
    _set_threads(threads)
    run_train(cfg, out, label=label, resume=resume, fingerprint=fingerprint)
    if export is not None:  # once, by the main process of a multi-process (accelerate) run
        from accelerate import PartialState

        from repro.training.export import export_run

        dist = PartialState()
        if dist.is_main_process:
            export_run(out, export)
        dist.wait_for_everyone()


@app.command("eval")
def eval_(
    model: Annotated[str, typer.Option(help="Local model folder or hub id (Qwen/Qwen3-32B).")],
    benchmark: Annotated[list[str], typer.Option(
        help="aime25, hmmt25, livecodebench, synth-aime, ...; repeat for several (one model load).")],
    out: Annotated[Path, typer.Option(help="Output folder (samples.parquet, problems.parquet).")],
    split: Annotated[bool, typer.Option(
        help="Write each benchmark to OUT/benchmark=NAME/ (required for several).")] = False,
    k: Annotated[int | None, typer.Option(help="Samples per problem (default: the benchmark's).")] = None,
    limit: Annotated[int | None, typer.Option(help="Only the first N problems.")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Offline mirror of the datasets.")] = None,
    lock: Annotated[Path | None, typer.Option(
        help="Data lock written by `repro data pin` (sha256 pins; its data_dir unless "
             "--data-dir is given).")] = None,
    checkpoint: Annotated[str, typer.Option(help="Label stored with the results.")] = "final",
    engine: Annotated[str, typer.Option(help="auto (vLLM on a GPU, else HF), hf or vllm.")] = "auto",
    batch_size: Annotated[int, typer.Option(help="Prompts per generate call.")] = 16,
    seed: Annotated[int, typer.Option(help="Sampling seed.")] = 0,
    temperature: Annotated[float | None, typer.Option(help="Override the benchmark's temperature.")] = None,
    top_p: Annotated[float | None, typer.Option(help="Override the benchmark's top_p.")] = None,
    top_k: Annotated[int | None, typer.Option(help="Override the benchmark's top_k (0 = off).")] = None,
    min_p: Annotated[float | None, typer.Option(help="Override the benchmark's min_p.")] = None,
    max_new_tokens: Annotated[int | None, typer.Option(help="Override the generation budget.")] = None,
    workers: Annotated[int, typer.Option(help="Parallel grading workers.")] = 2,
    unsafe_no_sandbox: Annotated[
        bool, typer.Option("--unsafe-no-sandbox", help="Run generated code WITHOUT bubblewrap (recorded).")
    ] = False,
) -> None:
    """Evaluate a model on a benchmark: k samples per problem, graded, written as Parquet.
    Every benchmark and data set is loaded and checked before the model is."""
    from repro.benchmarks import DatasetUnavailable
    from repro.evaluation.runner import EvalConfig, run_eval_suite
    from repro.sandbox import SandboxUnavailable

    overrides = {"temperature": temperature, "top_p": top_p, "top_k": top_k, "min_p": min_p,
                 "max_new_tokens": max_new_tokens}
    try:
        cfg = EvalConfig(
            model=model, benchmark=benchmark[0], out=out, k=k, limit=limit, data_dir=data_dir, lock=lock,
            checkpoint=checkpoint, engine=engine, batch_size=batch_size, seed=seed,
            sampling={key: v for key, v in overrides.items() if v is not None}, workers=workers,
            unsafe_no_sandbox=unsafe_no_sandbox,
        )
        run_eval_suite(cfg, benchmark, split)
    except (DatasetUnavailable, SandboxUnavailable, ValueError) as err:
        typer.echo(f"repro eval: {err}", err=True)
        raise typer.Exit(2) from None


@data_app.command("pin")
def data_pin(
    benchmark: Annotated[list[str], typer.Option(
        help="Benchmarks whose files to fetch and pin (aime25, hmmt25, livecodebench, lcb-train, "
             "openr1-math); repeat for several.")],
    data_dir: Annotated[Path, typer.Option(
        help="Mirror folder (hub layout, DATA_DIR/<dataset id>/...); missing files are "
             "downloaded into it.")],
    lock: Annotated[Path, typer.Option(help="Lock file to write (merged if it exists).")] = Path(
        "data.lock.yaml"),
) -> None:
    """Download each benchmark's files once, sha256 them, and write the pins into the lock that
    `repro eval --lock`, training and the pipeline (config `data_lock`) read."""
    from repro.benchmarks import DatasetUnavailable, get_benchmark
    from repro.benchmarks.pins import pin

    try:
        specs = [get_benchmark(name) for name in benchmark]
        written = pin(specs, data_dir, lock)
    except (DatasetUnavailable, ValueError) as err:
        typer.echo(f"repro data pin: {err}", err=True)
        raise typer.Exit(2) from None
    for dataset, entry in sorted(written["datasets"].items()):
        for name, digest in sorted(entry["sha256"].items()):
            typer.echo(f"{dataset}@{entry['revision']} {name} {digest}")
    typer.echo(f"-> {lock}")


@app.command("plan")
def plan(
    configfile: Annotated[list[Path] | None, typer.Option(
        help="Config overlays, as given to snakemake (a preset); repeat for several.")] = None,
    base: Annotated[Path, typer.Option(
        help="The base config the overlays merge into (its schema.yaml beside it).")] = Path(
        "config/config.yaml"),
) -> None:
    """Per-GPU (and per-node host) memory of every GPU job the config plans, phase by phase,
    against its GPUs: exits 1 with one line naming the key to change when a job cannot fit.
    The workflow runs the same check at parse time."""
    from repro.plan import PlanRefusal, load_config, plan_jobs, table

    try:
        config = load_config(base, configfile or [])
        typer.echo(table(plan_jobs(config)))
    except PlanRefusal as err:
        typer.echo(f"repro plan: {err}", err=True)
        raise typer.Exit(1) from None
    except (OSError, ValueError) as err:
        typer.echo(f"repro plan: {err}", err=True)
        raise typer.Exit(2) from None


@bench_app.command("objectives")
def bench_objectives(
    seqs: Annotated[int, typer.Option(help="Sequences per minibatch.")] = 1024,
    max_len: Annotated[int, typer.Option(help="Maximum response length (tokens).")] = 4096,
    group_size: Annotated[int, typer.Option(help="Responses per group.")] = 16,
    repeats: Annotated[int, typer.Option(help="Timed repetitions per case (median reported).")] = 5,
    device: Annotated[str, typer.Option(help="torch device.")] = "cpu",
    threads: Annotated[
        int | None, typer.Option(help="torch CPU threads for the run (1 is steadier on a busy box).")
    ] = None,
) -> None:
    """Loss + backward time of every algorithm as a ratio to GSPO; transform scaling in groups."""
    from repro.bench.objectives import ObjectivesBenchConfig, run_objectives_bench

    run_objectives_bench(
        ObjectivesBenchConfig(
            seqs=seqs, max_len=max_len, group_size=group_size, repeats=repeats, device=device,
            threads=threads,
        )
    )


@bench_app.command("sandbox")
def bench_sandbox(
    generations: Annotated[int, typer.Option(help="Generations per round and program kind.")] = 32,
    tests_per_generation: Annotated[int, typer.Option(help="Test cases per generation.")] = 20,
    workers: Annotated[int, typer.Option(help="Parallel sandboxes.")] = 2,
    rounds: Annotated[int, typer.Option(help="Timed rounds (median reported).")] = 3,
) -> None:
    """Test cases per second through bubblewrap vs the same harness unsandboxed, as a ratio."""
    from repro.bench.sandbox import SandboxBenchConfig, run_sandbox_bench

    run_sandbox_bench(SandboxBenchConfig(
        workers=workers, generations=generations, tests_per_generation=tests_per_generation,
        rounds=rounds,
    ))


@bench_app.command("logprobs")
def bench_logprobs(
    tokens: Annotated[int, typer.Option(help="Response tokens (rows).")] = 8192,
    vocab: Annotated[int, typer.Option(help="Vocabulary size (Qwen3: 151,936).")] = 151936,
    hidden: Annotated[int, typer.Option(help="Hidden size.")] = 1024,
    chunk_size: Annotated[int, typer.Option(help="Rows per lm_head chunk.")] = 1024,
    repeats: Annotated[int, typer.Option(help="Rounds per path (median reported).")] = 3,
) -> None:
    """Peak memory and time of chunked vs naive log-probs + entropy (forward + backward)."""
    from repro.bench.logprobs import LogprobsBenchConfig, run_logprobs_bench

    run_logprobs_bench(LogprobsBenchConfig(
        tokens=tokens, vocab=vocab, hidden=hidden, chunk_size=chunk_size, repeats=repeats
    ))


@bench_app.command("rl-step")
def bench_rl_step(
    repeats: Annotated[int, typer.Option(help="Timed rounds (median reported).")] = 5,
    out: Annotated[Path | None, typer.Option(help="Also write the JSON here.")] = None,
    threads: Annotated[int | None, typer.Option(help=THREADS_HELP)] = None,
    overrides: Annotated[list[str] | None, typer.Argument(
        help="KEY=VALUE overrides of the step's TrainConfig, e.g. algorithm=gspo.")] = None,
) -> None:
    """One native RL step of the tiny default, stage by stage (generate, grading, old log-probs,
    update, diagnostics, probes, checkpoint), with rollout throughput and update time as ratios
    to bare `model.generate` and a bare forward + backward, measured side by side."""
    from repro.bench.rl_step import RLStepBenchConfig, run_rl_step_bench

    try:
        cfg = RLStepBenchConfig(overrides=overrides or [], repeats=repeats)
        cfg.train_config()
    except ValueError as err:
        typer.echo(f"repro bench rl-step: {err}", err=True)
        raise typer.Exit(2) from None
    _set_threads(threads)
    run_rl_step_bench(cfg, out=out)


@bench_app.command("gpu")
def bench_gpu(
    out: Annotated[Path, typer.Option(help="Folder: preflight.json, the model, worker logs.")] = Path(
        "preflight"),
    tiny: Annotated[bool, typer.Option(help="CPU mode (tiny model, 2 gloo processes): for CI.")] = False,
    shape: Annotated[str, typer.Option(help="Random-init Qwen3 shape (GPU): qwen3-32b-4l.")] = "qwen3-32b-4l",
    processes: Annotated[int, typer.Option(help="Processes (0: every visible GPU; 2 on CPU).")] = 0,
    lr: Annotated[float | None, typer.Option(help="Learning rate (default: the paper preset's).")] = None,
    budget_s: Annotated[float, typer.Option(help="Total seconds; each stage has its own too.")] = 420.0,
) -> None:
    """Preflight of one node before a paper run: FSDP2 + precision recipe under torchrun, vLLM
    colocate rollouts with the weight sync checked, updates at the preset's lr, save and reload,
    MFU and peak memory per stage against `repro plan`. One JSON; exits 1 when a check fails."""
    import torch

    from repro.bench.gpu import SHAPES, PreflightConfig, run_preflight

    if not tiny and not torch.cuda.is_available():
        typer.echo("repro bench gpu: no GPU visible; --tiny runs the preflight on CPU", err=True)
        raise typer.Exit(2)
    if not tiny and shape not in SHAPES:
        typer.echo(f"repro bench gpu: --shape {shape!r} is not one of {sorted(SHAPES)}", err=True)
        raise typer.Exit(2)
    if lr is not None and not lr > 0:
        typer.echo(f"repro bench gpu: --lr {lr} must be > 0", err=True)
        raise typer.Exit(2)
    report = run_preflight(PreflightConfig(out=out, tiny=tiny, shape=shape, processes=processes,
                                           lr=lr, budget_s=budget_s))
    for name, stage in report["stages"].items():
        extra = f" ({stage.get('reason', '')[:160]})" if stage.get("status") != "ok" else ""
        typer.echo(f"  {name:<13} {stage.get('status')}{extra}")
    _close_report("repro bench gpu", out / "preflight.json", report, f"{report['device']}, ")


def _close_report(command: str, path: Path, report: dict, prefix: str = "") -> None:
    """Print a check-running bench's failures and its one-line summary; exit 1 on a failure."""
    for line in report["failures"]:
        typer.echo(f"{command}: FAILED {line}", err=True)
    typer.echo(f"{command}: {path} ({prefix}{report['seconds']:.0f} s, "
               f"{len(report['failures'])} failures)")
    if report["failures"]:
        raise typer.Exit(1)


@bench_app.command("twin")
def bench_twin(
    out: Annotated[Path, typer.Option(help="Folder: twin.json, runs/<algo>/, logs.")],
) -> None:
    """CPU twin of the paper-scale stack: 2 processes (torchrun, gloo), the TRL engine through
    accelerate's FSDP2, the paper preset's lr and precision, checkpoint, kill, resume, export.
    Exits 1 when an acceptance check fails (listed in twin.json's `failures`)."""
    from repro.bench.twin import run_twin

    report = run_twin(out)
    _close_report("repro bench twin", out / "twin.json", report)


@bench_app.command("coherence")
def bench_coherence(
    model: Annotated[str, typer.Option(help="Policy folder (e.g. an SFT start or a run's final).")],
    task: Annotated[str, typer.Option(help="Training prompt set.")] = "synth-rule",
    batches: Annotated[int, typer.Option(help="Independent rollout batches (>= 2).")] = 8,
    prompts: Annotated[int, typer.Option(help="Prompts per batch.")] = 8,
    group_size: Annotated[int, typer.Option(help="Samples per prompt.")] = 8,
    max_new_tokens: Annotated[int, typer.Option(help="Response budget.")] = 64,
    temperature: Annotated[float, typer.Option(help="Sampling temperature.")] = 1.0,
    seed: Annotated[int, typer.Option(help="Prompt stream and sampling seed.")] = 0,
    same_prompts: Annotated[bool, typer.Option(help="Redraw samples of one prompt set.")] = False,
    out: Annotated[Path | None, typer.Option(help="Also write the JSON here.")] = None,
    threads: Annotated[int | None, typer.Option(help=THREADS_HELP)] = None,
) -> None:
    """Cosine between GRPO gradients of rollout batches with different prompts, and the signal
    share of their mean: does RL at this policy learn something shared across problems?"""
    from repro.bench.coherence import CoherenceConfig, run_coherence_bench

    try:
        cfg = CoherenceConfig(model=model, task=task, batches=batches, prompts=prompts,
                              group_size=group_size, max_new_tokens=max_new_tokens,
                              temperature=temperature, seed=seed, same_prompts=same_prompts)
    except ValueError as err:
        typer.echo(f"repro bench coherence: {err}", err=True)
        raise typer.Exit(2) from None
    _set_threads(threads)
    try:
        run_coherence_bench(cfg, out)
    except ValueError as err:  # e.g. every group has one reward: no gradient to compare
        typer.echo(f"repro bench coherence: {err}", err=True)
        raise typer.Exit(2) from None


def _register_reporting() -> None:
    """`repro aggregate`, `repro tables`, `repro figures`, `repro paper-reference` (repro/reporting)."""
    from repro.reporting.commands import register

    register(app)


_register_reporting()


def main() -> None:
    """The console entry: a full disk (or another storage failure) while writing a result is
    one line naming the file, not a traceback; the previous version of the file is intact."""
    try:
        app()
    except WriteFailed as err:
        sys.exit(f"repro: {err.strerror}")
