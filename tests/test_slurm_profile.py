"""docs/slurm.md's small-cluster commands, without a cluster: the first, run as printed, writes
the very profile the SLURM tests run on (tests/slurm_cluster.py: the same overlay file, merged
by the same script), and the second runs Snakemake with that profile folder."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import yaml
from slurm_cluster import SMALL_OVERLAY, ci_profile
from test_workflow import ROOT, copy_workflow

sys.path.insert(0, str(ROOT / "scripts"))
from doc_block import doc_block


def test_the_documented_small_cluster_profile_is_the_tests(tmp_path):
    make, run = doc_block(ROOT / "docs" / "slurm.md", "slurm-small").strip().splitlines()
    wd = copy_workflow(tmp_path / "wd")
    subprocess.run(["bash", "-euo", "pipefail", "-c", make], cwd=wd, check=True,
                   env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"})
    overlay, folder = shlex.split(make)[2:]
    assert (ROOT / overlay) == SMALL_OVERLAY
    documented = yaml.safe_load((wd / folder / "config.yaml").read_text())
    tested = yaml.safe_load((ci_profile(tmp_path / "ci") / "config.yaml").read_text())
    assert documented == tested
    assert documented["set-resources"]["train"]["mem_mb"] == 3000  # the overlay was merged
    assert documented["set-resources"]["sft"]["gpu"] == 1  # and the profile's own entries kept
    args = shlex.split(run)
    assert args[:3] == ["snakemake", "--workflow-profile", folder]
    assert (ROOT / args[args.index("--configfile") + 1]).is_file()
