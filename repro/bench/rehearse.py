"""`repro bench rehearse --out DIR`: the paper presets' own workflow at a shrunk shape on CPU
(issue 42 item 4).

For each preset, in its own copy of the workflow (DIR/<preset>/: Snakemake locks its working
directory, and the checkout's results/ stay untouched): the offline data mirror and its lock
(`repro.bench.rehearse_data`), then `snakemake --configfile config/presets/<preset>.yaml
config/overlays/rehearse-cpu.yaml` to the tables and figures: every rule the preset runs (the
overlay's comments say what it replaces). Then the checks: the tables exist, `repro plan`'s
parameter count of the shrunk shape equals the built model's `sum(p.numel())`, and the exported
policies are in the dtype of the preset's checkpoint (bf16). DIR/rehearse.json holds the wall
times and what was checked; `failures` lists what did not hold.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ("Snakefile", "rules", "config", "profiles", "envs", "scripts", "repro",
            "pyproject.toml")
PRESETS = ("paper-qwen3-next-80b", "paper-qwen3-32b")
OVERLAY = "config/overlays/rehearse-cpu.yaml"
DATA = "rehearsal-data"
REAL_DATA = ROOT.parent / "shared" / "data" / "real"


def configfiles(preset: str) -> list[str]:
    return [f"config/presets/{preset}.yaml", OVERLAY]


def copy_workflow(dest: Path) -> None:
    """What a job needs of the checkout: the workflow and the package its rules import."""
    for name in WORKFLOW:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def prepare(wd: Path, real_dir: Path) -> None:
    """A fresh workflow copy in `wd` with the rehearsal's data mirror and lock."""
    from repro.bench.rehearse_data import write_mirror_and_lock

    if wd.exists():
        shutil.rmtree(wd)
    copy_workflow(wd)
    write_mirror_and_lock(real_dir, wd / DATA)


def snakemake(wd: Path, preset: str, *args: str, timeout: int) -> subprocess.CompletedProcess:
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(wd)}
    cmd = [sys.executable, "-m", "snakemake", *args, "--configfile", *configfiles(preset)]
    return subprocess.run(cmd, cwd=wd, env=env, capture_output=True, text=True, timeout=timeout)


def check(wd: Path, preset: str) -> dict[str, Any]:
    """What the finished rehearsal in `wd` shows: the planner's parameter count against the
    built model's, the tables written, the exported policies' dtypes."""
    from transformers import AutoModelForCausalLM

    from repro.pipeline.layout import INIT_MODEL_DIR
    from repro.plan import load_config, model_shape

    config = load_config(wd / "config" / "config.yaml", [wd / f for f in configfiles(preset)])
    out = wd / config["results"]
    models = {}
    for key in config["run"]["models"]:
        model = AutoModelForCausalLM.from_pretrained(wd / INIT_MODEL_DIR.format(model=key))
        models[key] = {"planned_params": model_shape(config, key).params,
                       "built_params": sum(p.numel() for p in model.parameters()),
                       "architecture": type(model).__name__}
    exports = sorted({json.loads(p.read_text()).get("dtype")
                      for p in (out / "runs").glob("**/policy/frac=*/config.json")})
    return {"experiment": config["experiment"], "models": models, "export_dtypes": exports,
            "train_runs": len(list((out / "runs").glob("**/train_log.parquet"))),
            "evaluations": len(list((out / "eval").glob("**/problems.parquet"))),
            "tables": sorted(p.name for p in (out / "tables").glob("*.md")),
            "figures": sorted(p.name for p in (out / "figures").glob("*.pdf"))}


def failures_of(result: dict[str, Any]) -> list[str]:
    """The rehearsal's acceptance: tables written, planned = built parameters, bf16 exports."""
    failed = []
    if not result["tables"]:
        failed.append("no tables written")
    for key, m in result["models"].items():
        if m["planned_params"] != m["built_params"]:
            failed.append(f"{key}: repro plan counts {m['planned_params']} parameters, the "
                          f"built model has {m['built_params']}")
    if result["export_dtypes"] != ["bfloat16"]:
        failed.append(f"exported policies in {result['export_dtypes']}, not bfloat16")
    return failed


def run_rehearsal(out: Path, presets: tuple[str, ...] = PRESETS, real_dir: Path = REAL_DATA,
                  cores: int = 2, timeout: int = 3600) -> dict[str, Any]:
    """Rehearse each preset in out/<preset>/; write and return out/rehearse.json."""
    report: dict[str, Any] = {"presets": {}, "failures": []}
    start = time.monotonic()
    for preset in presets:
        wd = out / preset
        prepare(wd, real_dir)
        began = time.monotonic()
        proc = snakemake(wd, preset, "--cores", str(cores), timeout=timeout)
        wall = time.monotonic() - began
        (wd / "snakemake.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode:
            report["failures"].append(f"{preset}: snakemake exited {proc.returncode} after "
                                      f"{wall:.0f} s (log: {wd / 'snakemake.log'})")
            report["presets"][preset] = {"wall_s": wall}
            continue
        result = check(wd, preset) | {"wall_s": round(wall, 1)}
        report["presets"][preset] = result
        report["failures"] += [f"{preset}: {line}" for line in failures_of(result)]
    report["seconds"] = round(time.monotonic() - start, 1)
    out.mkdir(parents=True, exist_ok=True)
    (out / "rehearse.json").write_text(json.dumps(report, indent=2) + "\n")
    return report
