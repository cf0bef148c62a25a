"""The reporting commands of the `repro` CLI: parse options and dispatch (repro.cli registers
them). Imports are deferred so that `repro --help` does not load matplotlib."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from repro.cli_fields import config_options
from repro.reporting.study import Study

AGGREGATE_HELP = "Folder written by `repro aggregate` (results/aggregate)."


def register(app: typer.Typer) -> None:
    app.command("aggregate")(aggregate_cmd)
    app.command("tables")(tables_cmd)
    app.command("figures")(figures_cmd)
    app.command("report")(report_cmd)
    app.command("paper-reference")(paper_reference_cmd)
    app.command("compare")(compare_cmd)
    app.command("fair-clip")(fair_clip_cmd)
    app.command("expectations")(expectations_cmd)


def _fail(command: str, err: Exception) -> typer.Exit:
    typer.echo(f"repro {command}: {err}", err=True)
    return typer.Exit(2)


@config_options(Study)
def aggregate_cmd(
    settings: dict[str, Any],
    files: Annotated[list[Path], typer.Argument(
        help="train_log.parquet and problems.parquet files under key=value folders "
             "(each problems.parquet's sibling samples.parquet is read too).",
        exists=True, dir_okay=False, show_default=False)],
    out: Annotated[Path, typer.Option(help="Output folder of the aggregate tables.")] = Path(
        "results/aggregate"
    ),
) -> None:
    """Per-job train logs and evaluations -> train_curves, runs, eval_problems and eval_samples
    Parquet, with the run keys of their paths and the study settings in the metadata."""
    from repro.reporting.aggregate import aggregate

    try:
        counts = aggregate(files, out, Study(**settings))
    except ValueError as err:
        raise _fail("aggregate", err) from None
    for name, rows in counts.items():
        typer.echo(f"{out / name}: {rows} rows")


def tables_cmd(
    aggregate: Annotated[Path, typer.Option(help=AGGREGATE_HELP)] = Path("results/aggregate"),
    out: Annotated[Path, typer.Option(help="Output folder for NAME.md and NAME.tex.")] = Path(
        "results/tables"
    ),
    paper: Annotated[Path | None, typer.Option(
        help="The paper's numbers (repro paper-reference): adds the paper table.")] = None,
) -> None:
    """Markdown and LaTeX (booktabs) tables from the aggregate Parquet alone: main, compute,
    mechanism, ablations (and paper with --paper)."""
    from repro.reporting.tables import write_tables

    try:
        paths = write_tables(aggregate, out, paper)
    except ValueError as err:
        raise _fail("tables", err) from None
    typer.echo(f"wrote {len(paths)} files under {out}")


def figures_cmd(
    aggregate: Annotated[Path, typer.Option(help=AGGREGATE_HELP)] = Path("results/aggregate"),
    out: Annotated[Path, typer.Option(help="Output folder for NAME.pdf and NAME.png.")] = Path(
        "results/figures"
    ),
    docs: Annotated[bool, typer.Option(
        "--docs", help="Instead: the PNGs docs/results.md shows, each from its study's committed "
        "aggregate, under docs/figures (repro.reporting.figures.DOC_FIGURES).")] = False,
) -> None:
    """PDF and PNG figures from the aggregate Parquet alone (a figure without data says so)."""
    from repro.reporting.figures import write_doc_figures, write_figures

    try:
        paths = (write_doc_figures(Path("."), Path("docs/figures")) if docs
                 else write_figures(aggregate, out))
    except ValueError as err:
        raise _fail("figures", err) from None
    typer.echo(f"wrote {len(paths)} files under {'docs/figures' if docs else out}")


def report_cmd(
    check: Annotated[bool, typer.Option(
        "--check", help="Write nothing: print the diff a rerun would make, exit 1 if any.")
    ] = False,
) -> None:
    """Regenerate the data tables of docs/results.md between its `<!-- repro report: NAME -->`
    fences, from the committed aggregates and the verdict engine (run from the repository
    root; the prose outside the fences is left as it is)."""
    from repro.reporting import report

    try:
        if check:
            diff = report.check(Path("."))
            if diff:
                typer.echo(diff, nl=False)
                raise typer.Exit(1)
            typer.echo("repro report: every generated section is up to date")
            return
        changed = report.write(Path("."))
    except report.ReportError as err:
        raise _fail("report", err) from None
    typer.echo(f"repro report: rewrote {', '.join(changed)}" if changed
               else "repro report: nothing to change")


def paper_reference_cmd(
    out: Annotated[Path, typer.Option(help="Parquet file for the paper's numbers.")] = Path(
        "results/paper/reference.parquet"
    ),
) -> None:
    """The paper's published numbers (arXiv 2604.13088 v1, Tables 1, 2, 4) as Parquet."""
    from repro.reporting.paper_numbers import write_reference

    write_reference(out)
    typer.echo(f"wrote {out}")


def compare_cmd(
    first: Annotated[Path, typer.Argument(help="An aggregate folder.", show_default=False)],
    second: Annotated[Path, typer.Argument(help="Another of the same experiment.",
                                           show_default=False)],
    tol: Annotated[list[str] | None, typer.Option(
        help="METRIC=VALUE: another tolerance (metrics and defaults: repro.reporting.compare)."
    )] = None,
    exact: Annotated[bool, typer.Option(
        "--exact", help="Also require every value of every aggregate table to be equal, but the "
        "wall-clock seconds: a rerun with the same packages and CPU kernels.")] = False,
) -> None:
    """Summary metrics of two aggregates (e.g. one run under ATEN_CPU_CAPABILITY=avx2): prints
    each metric's largest difference; exit 1 if any is outside its tolerance."""
    from repro.reporting.compare import (
        TOLERANCE,
        compare,
        cpu_note,
        cpus,
        exact_differences,
        summary,
    )

    try:
        tolerance = TOLERANCE | _tolerances(tol or [], TOLERANCE)
        machines = [cpus(folder) for folder in (first, second)]
        largest, problems = compare(summary(first), summary(second), tolerance)
        differ = exact_differences(first, second) if exact else []
    except ValueError as err:
        raise _fail("compare", err) from None
    typer.echo(f"CPUs: {first}: {'; '.join(machines[0])}; {second}: {'; '.join(machines[1])}")
    for metric, diff in largest.items():
        typer.echo(f"{metric}: largest |diff| {diff:.3g} (tolerance {tolerance[metric]:g})")
    typer.echo(f"note: {cpu_note(*machines)}")
    if exact:
        typer.echo(f"exact: {len(differ)} column(s) differ, the wall-clock seconds aside")
        problems += differ
    if problems:
        typer.echo("\n".join(f"repro compare: {line}" for line in problems), err=True)
        raise typer.Exit(1)


def expectations_cmd(
    aggregate: Annotated[Path, typer.Option(help="This run's aggregate folder, relative to the "
                                            "repository root.")] = Path("results/aggregate"),
    out: Annotated[Path | None, typer.Option(help="Also write the summary here (Markdown).")
                   ] = None,
) -> None:
    """This run's aggregate against the committed one (read from git): "exact", or which
    headline numbers fall inside the README's ranges, and how to restore the committed files.
    Exit 1 only when this run's aggregate is missing or damaged."""
    from repro.atomic import atomic_file
    from repro.reporting.expectations import summary

    lines, readable = summary(Path.cwd(), aggregate.as_posix())
    text = "\n".join(lines) + "\n"
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_file(out, lambda tmp: tmp.write_text(text))
    typer.echo(text, nl=False)
    if not readable:
        raise typer.Exit(1)


def fair_clip_cmd(
    pilot: Annotated[Path, typer.Option(help="The pilot preset (study 3's or 4's).", exists=True,
                                        dir_okay=False)] = Path(
        "config/presets/offpolicy-pilot.yaml"),
    aggregate: Annotated[Path, typer.Option(help="The pilot's aggregate folder.")] = Path(
        "results/offpolicy-pilot/aggregate"),
) -> None:
    """A study's pre-registered rule on its pilot: per source, the clip shares of GSPO's paper
    clip and candidates, and the clip `gspo_fair` gets (docs/preregistration-3.md, -4.md)."""
    from repro.plan import load_config
    from repro.reporting.fair_clip import fair_clips, markdown

    try:
        clips = fair_clips(load_config(Path("config/config.yaml"), [pilot]), aggregate)
    except (ValueError, OSError) as err:
        raise _fail("fair-clip", err) from None
    typer.echo(markdown(clips))
    for clip in clips:
        typer.echo(f"{clip.source}: eps_low {clip.eps_low:g}, eps_high {clip.eps_high:g} "
                   f"({clip.rule})")


def _tolerances(items: list[str], known: dict[str, float]) -> dict[str, float]:
    """METRIC=VALUE strings -> a mapping; a one-line error for an unknown metric or value."""
    out = {}
    for item in items:
        metric, _, value = item.partition("=")
        if metric not in known:
            raise ValueError(f"--tol {item!r}: unknown metric (known: {', '.join(known)})")
        try:
            out[metric] = float(value)
        except ValueError:
            raise ValueError(f"--tol {item!r}: {value!r} is not a number") from None
    return out
