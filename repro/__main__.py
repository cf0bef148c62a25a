"""`python -m repro` runs the same entry point as the `repro` console script."""

from repro.cli import main

main()
