"""The `repro` command line: one Typer app, one subcommand per pipeline step.

The CLI only parses options and dispatches; the work lives in the modules it calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
bench_app = typer.Typer(no_args_is_help=True, help="Speed and memory benchmarks (ratios, side by side).")
app.add_typer(bench_app, name="bench")


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
