"""Export a finished run from its resumable scratch folder into the pipeline's declared outputs.

The trainer works in a scratch folder (`checkpoints/`, `final/`, `train_log.parquet`) that
Snakemake does not own, so a killed job's state survives Snakemake's clean-up of failed outputs.
When training ends, the export copies what the rest of the pipeline reads: the step log, one
policy per budget fraction (`policy/frac=F/`, the checkpoint saved when F of the budget was
used) and a `manifest.json` written last, so a run folder with a manifest is complete.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from repro.atomic import atomic_dir, atomic_file

MANIFEST = "manifest.json"


def frac_label(fraction: float) -> str:
    """One spelling per fraction for folder names and keys: 0.5 -> '0.5', 1 -> '1.0'."""
    return repr(float(fraction))


def write_manifest(path: Path, data: dict[str, Any]) -> None:
    text = json.dumps(data, indent=2, sort_keys=True, default=str)
    atomic_file(path, lambda tmp: tmp.write_text(text + "\n"))


def export_run(scratch: Path, dest: Path) -> Path:
    """Copy the log and the per-fraction policies of the run in `scratch` to `dest`."""
    scratch, dest = Path(scratch), Path(dest)
    source = scratch / MANIFEST
    if not source.exists():
        raise FileNotFoundError(f"{source}: no manifest, so the run in {scratch} has not finished")
    manifest = json.loads(source.read_text())
    atomic_file(dest / "train_log.parquet",
                lambda tmp: shutil.copyfile(scratch / "train_log.parquet", tmp))
    for label, step in sorted(manifest["fraction_steps"].items()):
        policy = scratch / "checkpoints" / f"step_{step:06d}" / "policy"
        if not policy.is_dir():
            raise FileNotFoundError(f"{policy}: checkpoint of budget fraction {label} is missing")
        atomic_dir(dest / "policy" / f"frac={label}",
                   lambda tmp, src=policy: shutil.copytree(src, tmp, dirs_exist_ok=True))
    write_manifest(dest / MANIFEST, manifest | {"scratch": str(scratch)})
    return dest
