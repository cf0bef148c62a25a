"""The package, its tests and scripts are clean under pyproject's `[tool.ruff]` rules. The test
extra pins ruff exactly, so a new release's rules cannot turn CI red; `snakemake --lint` of the
workflow is tests/test_workflow.py's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "repro", "tests",
                           "scripts"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
