"""`python -m repro` runs the same Typer app as the `repro` console script."""

from repro.cli import app

app()
