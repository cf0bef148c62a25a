"""The `repro` command line: one Typer app, one subcommand per pipeline step.

The CLI only parses options and dispatches; the work lives in the modules it calls.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from repro.atomic import WriteFailed
from repro.bench.commands import bench_app
from repro.cli_fields import (
    THREADS_HELP,
    build_config,
    config_options,
    expanded_help,
    field_help,
    given_options,
    set_threads,
)
from repro.evaluation.config import SAMPLING_KEYS, EvalConfig
from repro.generation.base import SamplingConfig
from repro.theory.config import TheoryConfig

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)

app.add_typer(bench_app, name="bench")
data_app = typer.Typer(no_args_is_help=True, help="Benchmark files: download once, pin by sha256.")
app.add_typer(data_app, name="data")


@app.command()
@config_options(TheoryConfig)
def theory(
    settings: dict[str, Any],
    out: Annotated[
        Path, typer.Option(help="Output folder for theory.parquet and the figure.")
    ] = Path("results/theory"),
) -> None:
    """Exact tabular experiment: the learning tax (KL at the template), equal answers' drift."""
    from repro.theory.experiment import run_theory

    run_theory(build_config("repro theory", TheoryConfig, settings), out)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def sft(
    ctx: typer.Context,
    out: Annotated[
        Path, typer.Option(help="Model folder to write (save_pretrained + sft_metrics.json).")
    ],
    threads: Annotated[int | None, typer.Option(help=THREADS_HELP)] = None,
) -> None:
    """SFT warm start on the synthetic demonstrations. Extra arguments are KEY=VALUE overrides of
    SFTConfig (e.g. steps=600 lr=3e-3); see repro/training/sft_config.py for every field."""
    from repro.config_fields import check_fields
    from repro.training.config import parse_overrides
    from repro.training.sft import GateMissed, SFTConfig, run_sft

    try:
        overrides = parse_overrides(list(ctx.args))
        check_fields(SFTConfig, overrides)
        cfg = SFTConfig(**overrides)
    except (TypeError, ValueError) as err:
        typer.echo(f"repro sft: {err}", err=True)
        raise typer.Exit(2) from None
    set_threads(threads)
    try:
        run_sft(cfg, out)
    except GateMissed as err:  # the measured outcome, not a crash: one line, no model written
        typer.echo(f"repro sft: {out}: {err}", err=True)
        raise typer.Exit(1) from None


@app.command("init-model")
def init_model(
    out: Annotated[Path, typer.Option(help="Model folder to write (save_pretrained + tokenizer).")],
    config: Annotated[str, typer.Option(
        help="The model's config.json fields as JSON, model_type included (a catalogue entry's "
             "`config:` with source init).")],
    seed: Annotated[int, typer.Option(help="Torch seed of the random weights.")] = 0,
) -> None:
    """A random model of that config (transformers' own class for its model_type) with the tiny
    tokenizer: the start of a shrunk-shape rehearsal of a paper preset."""
    from repro.models.from_config import build_from_config

    try:
        fields = json.loads(config)
        if not isinstance(fields, dict):
            raise ValueError("--config must be a JSON mapping of config.json fields")
        params = build_from_config(fields, out, seed=seed)
    except ValueError as err:  # json.JSONDecodeError is one
        typer.echo(f"repro init-model: {err}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"{out}: {fields.get('model_type')}, {params} parameters")


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
    label: Annotated[
        str | None, typer.Option(help="Run label in the log (default: algorithm).")
    ] = None,
    resume: Annotated[
        bool, typer.Option(help="Continue from the newest checkpoint in --out.")
    ] = False,
    threads: Annotated[int | None, typer.Option(help=THREADS_HELP)] = None,
    fingerprint: Annotated[str, typer.Option(
        help="Stored with each checkpoint (the pipeline passes its source digest); --resume "
             "continues only a checkpoint with the same fingerprint and config.")] = "",
    export: Annotated[Path | None, typer.Option(
        help="When done, copy train_log.parquet, policy/frac=F/ per budget fraction and "
             "manifest.json here (the pipeline's outputs; --out keeps the resumable "
             "state).")] = None,
) -> None:
    """RL-train a policy. Extra arguments are KEY=VALUE overrides of the config, e.g.
    `algorithm=dfpo objective.transform=orth_proj steps=40` (fields: see TrainConfig)."""
    from repro.engines.registry import train_and_export
    from repro.training.config import load_train_config

    try:
        cfg = load_train_config(config, list(ctx.args))
    except ValueError as err:
        typer.echo(f"repro train: {err}", err=True)
        raise typer.Exit(2) from None
    set_threads(threads)
    train_and_export(cfg, out, export=export, label=label, resume=resume,
                     fingerprint=fingerprint)


EVAL_EXPAND = {"sampling": (SamplingConfig, SAMPLING_KEYS)}


@app.command("eval", epilog=expanded_help(EvalConfig, EVAL_EXPAND))
@config_options(EvalConfig, skip=("benchmarks",), expand=EVAL_EXPAND)
def eval_(
    ctx: typer.Context,
    settings: dict[str, Any],
    benchmark: Annotated[list[str] | None, typer.Option(
        help=field_help(EvalConfig, "benchmarks") + " Repeat the option for each.")] = None,
    config: Annotated[Path | None, typer.Option(
        help="YAML file of EvalConfig fields, e.g. an evaluation's resolved.yaml (which "
             "reproduces it); options given here override its values.")] = None,
) -> None:
    """Evaluate a model on benchmarks: k samples per problem, graded, written as Parquet, with
    the resolved config as OUT/resolved.yaml. Every benchmark and data set is loaded and checked
    before the model is."""
    from repro.benchmarks import DatasetUnavailable
    from repro.evaluation.config import load_eval_config
    from repro.evaluation.runner import run_eval
    from repro.sandbox import SandboxUnavailable

    given = given_options(ctx, settings) | ({"benchmarks": benchmark} if benchmark else {})
    try:
        run_eval(load_eval_config(config, given))
    except (DatasetUnavailable, SandboxUnavailable, ValueError) as err:
        typer.echo(f"repro eval: {err}", err=True)
        raise typer.Exit(2) from None


@data_app.command("pin")
def data_pin(
    benchmark: Annotated[list[str], typer.Option(
        help="Benchmarks whose files to fetch and pin (any spec of repro/benchmarks/specs with "
             "hub files, e.g. aime25, livecodebench); repeat for several.")],
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
    measure: Annotated[bool, typer.Option(
        help="Also trace each train job's step with torch's FSDPMemTracker in fake mode (CPU, "
             "nothing allocated; minutes at paper shapes) and refuse on its peak.")] = False,
    full_depth: Annotated[bool, typer.Option(
        help="With --measure: trace every layer instead of extrapolating from a few (a check of "
             "the extrapolation; half an hour at the 80B preset).")] = False,
    record: Annotated[bool, typer.Option(
        help="With --measure: write each traced job's peaks to config/memory/ (the parse-time "
             "plan then checks the job against them).")] = False,
) -> None:
    """Per-GPU (and per-node host) memory of every GPU job the config plans, phase by phase,
    against its GPUs: exits 1 with one line naming the key to change when a job cannot fit.
    The workflow runs the same check at parse time (arithmetic only)."""
    from repro.plan import PlanRefusal, load_config, model_lines, plan_jobs, table

    try:
        config = load_config(base, configfile or [])
        plans = plan_jobs(config)
        typer.echo("\n".join([*model_lines(config), table(plans)]))
        if (record or full_depth) and not measure:
            raise ValueError("--record and --full-depth need --measure")
        if measure:
            _plan_measured(config, [p for p in plans if p.job == "train"], record, full_depth)
    except PlanRefusal as err:
        typer.echo(f"repro plan: {err}", err=True)
        raise typer.Exit(1) from None
    except (OSError, ValueError) as err:
        typer.echo(f"repro plan: {err}", err=True)
        raise typer.Exit(2) from None


def _plan_measured(config: dict[str, Any], plans: list[Any], record: bool,
                   full_depth: bool) -> None:
    """`repro plan --measure`: each train job traced, beside its arithmetic; an op the tracker
    cannot trace leaves the arithmetic as the plan, said on stderr. `record`: each job's peaks
    written to config/memory/ (repro.plan.records) before the refusal check, so that a job
    found not to fit is on record too."""
    import resource

    from repro.plan import Hardware
    from repro.plan.measure import (
        UntraceableOp,
        compare_lines,
        few_layers,
        job_spec,
        measure_extrapolated,
        measure_step,
        refuse_over_measured,
    )
    from repro.plan.memory import step_layout
    from repro.plan.records import write_record

    for plan in plans:
        spec = job_spec(config, plan.model)
        try:
            measured = (measure_step(spec) if full_depth
                        else measure_extrapolated(spec, few_layers(spec.fields)))
        except UntraceableOp as err:
            typer.echo(f"repro plan --measure: {plan.model}: {err}; the plan is the arithmetic "
                       "above", err=True)
            continue
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
        typer.echo("\n".join([f"train {plan.model} measured, host RSS {rss:.1f} GB",
                              *compare_lines(plan, measured, spec.world)]))
        if record:
            typer.echo(f"  recorded: {write_record(plan.model, spec, measured, rss)}")
        local = step_layout(config["train"], Hardware.of(config["hardware"]), spec.world)[0]
        refuse_over_measured(plan, measured, spec, local)


def _register_reporting() -> None:
    """`repro aggregate`, `repro tables`, `repro figures`, `repro paper-reference`
    (repro/reporting)."""
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
    finally:
        if "torch.distributed" in sys.modules:  # `repro --help` does not import torch for this
            from repro.engines.fsdp import close_process_group

            close_process_group()
