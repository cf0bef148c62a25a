"""The `repro bench` commands: parse options and dispatch to repro.bench (repro.cli adds
`bench_app` under `bench`). Speed and memory claims live here as ratios measured side by side in
one run, never as timed assertions in tests. Imports are deferred so that `repro --help` loads
neither torch nor the benches."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from repro.bench.options import (
    CoherenceConfig,
    LogprobsBenchConfig,
    ObjectivesBenchConfig,
    PreflightConfig,
)
from repro.bench.sandbox import SandboxBenchConfig
from repro.cli_fields import THREADS_HELP, build_config, config_options, set_threads

bench_app = typer.Typer(
    no_args_is_help=True, help="Speed and memory benchmarks (ratios, side by side)."
)


@bench_app.command("objectives")
@config_options(ObjectivesBenchConfig)
def bench_objectives(settings: dict[str, Any]) -> None:
    """Loss + backward time of every algorithm as a ratio to GSPO; transform scaling in groups."""
    from repro.bench.objectives import run_objectives_bench

    run_objectives_bench(build_config("repro bench objectives", ObjectivesBenchConfig, settings))


@bench_app.command("sandbox")
@config_options(SandboxBenchConfig)
def bench_sandbox(settings: dict[str, Any]) -> None:
    """Test cases per second through bubblewrap vs the same harness unsandboxed, as a ratio."""
    from repro.bench.sandbox import run_sandbox_bench

    run_sandbox_bench(build_config("repro bench sandbox", SandboxBenchConfig, settings))


@bench_app.command("logprobs")
@config_options(LogprobsBenchConfig)
def bench_logprobs(settings: dict[str, Any]) -> None:
    """Peak memory and time of chunked vs naive log-probs + entropy (forward + backward)."""
    from repro.bench.logprobs import run_logprobs_bench

    run_logprobs_bench(build_config("repro bench logprobs", LogprobsBenchConfig, settings))


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
    set_threads(threads)
    run_rl_step_bench(cfg, out=out)


@bench_app.command("gpu")
@config_options(PreflightConfig)
def bench_gpu(settings: dict[str, Any]) -> None:
    """Preflight of one node before a paper run, on both paper architectures (dense Qwen3,
    Qwen3-Next MoE) in turn: FSDP2 + precision recipe under torchrun, vLLM colocate rollouts
    with the weight sync checked, updates at the preset's lr, save and reload, MFU and peak
    memory per stage against `repro plan`. One JSON; exits 1 when a check fails."""
    import torch

    from repro.bench.gpu import run_preflight

    cfg = build_config("repro bench gpu", PreflightConfig, settings)
    if not cfg.tiny and not torch.cuda.is_available():
        typer.echo("repro bench gpu: no GPU visible; --tiny runs the preflight on CPU", err=True)
        raise typer.Exit(2)
    if cfg.lr is not None and not cfg.lr > 0:
        typer.echo(f"repro bench gpu: --lr {cfg.lr} must be > 0", err=True)
        raise typer.Exit(2)
    report = run_preflight(cfg)
    for shape, one in report["shapes"].items():
        typer.echo(f"{shape} ({one['model_type']}):")
        fake, plan = one.get("predicted_fake_gb", {}), one.get("predicted_gb", {})
        for name, stage in one["stages"].items():
            extra = f" ({stage.get('reason', '')[:160]})" if stage.get("status") != "ok" else ""
            if "peak_gb" in stage:  # measured beside the tracker (fake mode) and the arithmetic
                extra += f" peak {stage['peak_gb']:.2f} GB" + "".join(
                    f", {who} {src[name]:.2f} GB (x{stage['peak_gb'] / src[name]:.3f})"
                    for who, src in (("fake-mode", fake), ("plan", plan))
                    if isinstance(src.get(name), float) and src[name] > 0)
            typer.echo(f"  {name:<13} {stage.get('status')}{extra}")
    _close_report("repro bench gpu", cfg.out / "preflight.json", report, f"{report['device']}, ")


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
    model: Annotated[str, typer.Option(
        help="tiny (dense Qwen3), tiny-moe (Qwen3-MoE) or tiny-next (Qwen3-Next: DeltaNet + "
             "gated attention, routed and shared experts): the 80B preset's architecture.")]
    = "tiny",
) -> None:
    """CPU twin of the paper-scale stack: 2 processes (torchrun, gloo), the TRL engine through
    accelerate's FSDP2, the paper preset's lr and precision, checkpoint, kill, resume, export.
    Exits 1 when an acceptance check fails (listed in twin.json's `failures`)."""
    from repro.bench.twin import TWIN_MODELS, run_twin

    if model not in TWIN_MODELS:
        typer.echo(f"repro bench twin: unknown --model {model!r}; known: {sorted(TWIN_MODELS)}",
                   err=True)
        raise typer.Exit(2)
    report = run_twin(out, model)
    _close_report("repro bench twin", out / "twin.json", report)


@bench_app.command("rehearse")
def bench_rehearse(
    out: Annotated[Path, typer.Option(help="Folder: rehearse.json and one workflow copy per "
                                           "preset (its results, logs, snakemake.log).")],
    preset: Annotated[list[str] | None, typer.Option(
        help="Paper preset (config/presets/NAME.yaml) to rehearse; repeat for several. "
             "Default: both.")] = None,
    real_data: Annotated[Path | None, typer.Option(
        help="Folder of the real benchmark files (aime25.jsonl, hmmt25.jsonl, the LCB "
             "record); default ../shared/data/real beside the checkout.")] = None,
    cores: Annotated[int, typer.Option(help="snakemake --cores.")] = 2,
) -> None:
    """The paper presets' own workflow at a shrunk shape on CPU (config/overlays/rehearse-cpu.yaml
    over each): data mirror and lock, every rule to the tables, `repro plan`'s parameter count
    against the built model's, bf16 exports. Exits 1 when a check fails."""
    from repro.bench.rehearse import PRESETS, REAL_DATA, run_rehearsal

    names = tuple(preset or PRESETS)
    unknown = [n for n in names if n not in PRESETS]
    if unknown:
        typer.echo(f"repro bench rehearse: unknown --preset {unknown}; known: {list(PRESETS)}",
                   err=True)
        raise typer.Exit(2)
    report = run_rehearsal(out, names, real_data or REAL_DATA, cores)
    _close_report("repro bench rehearse", out / "rehearse.json", report)


@bench_app.command("coherence")
@config_options(CoherenceConfig)
def bench_coherence(
    settings: dict[str, Any],
    out: Annotated[Path | None, typer.Option(help="Also write the JSON here.")] = None,
    threads: Annotated[int | None, typer.Option(help=THREADS_HELP)] = None,
) -> None:
    """Cosine between GRPO gradients of rollout batches with different prompts, and the signal
    share of their mean: does RL at this policy learn something shared across problems?"""
    from repro.bench.coherence import run_coherence_bench

    cfg = build_config("repro bench coherence", CoherenceConfig, settings)
    set_threads(threads)
    try:
        run_coherence_bench(cfg, out)
    except ValueError as err:  # e.g. every group has one reward: no gradient to compare
        typer.echo(f"repro bench coherence: {err}", err=True)
        raise typer.Exit(2) from None
