"""Export a finished run from its resumable scratch folder into the pipeline's declared outputs.

The trainer works in a scratch folder (`checkpoints/`, `final/`, `train_log.parquet`) that
Snakemake does not own, so a killed job's state survives Snakemake's clean-up of failed outputs.
When training ends, the export copies what the rest of the pipeline reads: the step log, one
policy per budget fraction (`policy/frac=F/`, the checkpoint saved when F of the budget was
used) and a `manifest.json` written last, so a run folder with a manifest is complete. The
manifest records each copied file's sha256, size and rows (`repro.results.manifest`), so a
reader can tell a damaged output from a good one.

Checkpoints hold the float32 training masters (exact resume); the exported policies are in the
dtype the run started from (`export_dtype` in the run's manifest: the start checkpoint's
config.json, bf16 for Qwen3-32B and Qwen3-Next-80B, float32 for the tiny models), cast one
safetensors shard at a time, so the export never holds more than one shard and writes what
`save_pretrained` of that model in that dtype writes (same tensor names and dtypes), for
`from_pretrained` and vLLM's loader. An 80B export is then ~160 GB, not 320 GB.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from repro.atomic import atomic_dir, atomic_file
from repro.results.manifest import write_manifest as record_outputs
from repro.training.checkpoint import verify_checkpoint

MANIFEST = "manifest.json"


def frac_label(fraction: float) -> str:
    """One spelling per fraction for folder names and keys: 0.5 -> '0.5', 1 -> '1.0'."""
    return repr(float(fraction))


def write_manifest(path: Path, data: dict[str, Any]) -> None:
    text = json.dumps(data, indent=2, sort_keys=True, default=str)
    atomic_file(path, lambda tmp: tmp.write_text(text + "\n"))


def copy_policy(src: Path, dest: Path, dtype: str | None) -> None:
    """Copy a saved policy folder, its floating-point weights cast to `dtype` (a torch dtype
    name; None = as saved) one safetensors shard at a time; config.json and the shard index
    follow the new dtype and sizes."""
    if dtype is None:
        shutil.copytree(src, dest, dirs_exist_ok=True)
        return
    import torch
    from safetensors.torch import load_file, save_file

    want, total = getattr(torch, dtype), 0
    for path in sorted(src.iterdir()):
        if path.suffix == ".safetensors":
            shard = {k: v.to(want) if v.is_floating_point() else v
                     for k, v in load_file(path).items()}
            total += sum(v.numel() * v.element_size() for v in shard.values())
            save_file(shard, dest / path.name, metadata={"format": "pt"})
            del shard
        elif path.name != "model.safetensors.index.json":
            shutil.copy2(path, dest / path.name)
    config = json.loads((src / "config.json").read_text())
    (dest / "config.json").write_text(json.dumps(config | {"dtype": dtype}, indent=2) + "\n")
    index = src / "model.safetensors.index.json"
    if index.exists():
        data = json.loads(index.read_text())
        data["metadata"] = data.get("metadata", {}) | {"total_size": total}
        (dest / index.name).write_text(json.dumps(data, indent=2) + "\n")


def export_run(scratch: Path, dest: Path) -> Path:
    """Copy the log and the per-fraction policies of the run in `scratch` to `dest` (policies
    in the manifest's `export_dtype`; a manifest without one, as written before it existed:
    as saved)."""
    scratch, dest = Path(scratch), Path(dest)
    source = scratch / MANIFEST
    if not source.exists():
        raise FileNotFoundError(f"{source}: no manifest, so the run in {scratch} has not finished")
    manifest = json.loads(source.read_text())
    for label, step in sorted(manifest["fraction_steps"].items()):  # check all before writing
        ckpt = scratch / "checkpoints" / f"step_{step:06d}"
        problem = verify_checkpoint(ckpt) if ckpt.is_dir() else "missing"
        if problem is not None:
            raise ValueError(f"{ckpt}: checkpoint of budget fraction {label} fails verification "
                             f"({problem}); rerun training with --resume")
    atomic_file(dest / "train_log.parquet",
                lambda tmp: shutil.copyfile(scratch / "train_log.parquet", tmp))
    for label, step in sorted(manifest["fraction_steps"].items()):
        policy = scratch / "checkpoints" / f"step_{step:06d}" / "policy"
        atomic_dir(dest / "policy" / f"frac={label}",
                   lambda tmp, src=policy: copy_policy(src, tmp, manifest.get("export_dtype")))
    files = ["train_log.parquet", *sorted(
        str(p.relative_to(dest)) for label in manifest["fraction_steps"]
        for p in (dest / "policy" / f"frac={label}").rglob("*") if p.is_file())]
    record_outputs(dest, files, manifest | {"scratch": str(scratch)})
    return dest
