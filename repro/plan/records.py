"""Tracked peaks kept as data: `repro plan --measure --record` writes what torch's tracker
measured for a train job, and the parse-time plan uses it (issue 48).

Why: the parse-time check must not import torch and must finish in a second, so it cannot trace;
its arithmetic is within 5% of the tracker on the preflight shapes, 8% high at the Qwen3-32B
preset and 6-10% low at the Qwen3-Next-80B one (no Gated DeltaNet + MoE recompute term;
docs/gpu.md). A record carries the tracker's number to the parse-time check instead of a second,
fitted formula.

A record is addressed by the fingerprint of everything the trace reads (`StepSpec`: the
model's config.json fields, world size, rows per micro-step, prompt and response tokens,
checkpointing, ...), so a preset edited after its measurement finds no record and says so;
nothing stale is ever applied. tests/test_plan_records.py holds every paper preset to a record.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from repro.atomic import atomic_file

RECORDS = Path(__file__).resolve().parents[2] / "config" / "memory"
UNTRACED = ("real", "seed")  # StepSpec fields that do not change what a record measures


def fingerprint(spec: Any) -> str:
    """sha256 of the spec's traced fields, as canonical JSON."""
    data = {k: v for k, v in dataclasses.asdict(spec).items() if k not in UNTRACED}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def record_path(model: str, spec: Any, root: Path | None = None) -> Path:
    """Where the record of `model`'s job `spec` lives (under RECORDS unless `root`)."""
    return (root or RECORDS) / f"{model}-{fingerprint(spec)[:12]}.json"


def write_record(model: str, spec: Any, measured: Any, rss_gb: float,
                 root: Path | None = None) -> Path:
    """Write one job's tracked stages with their provenance; returns the path."""
    import torch
    import transformers

    from repro.results.io import git_revision

    path = record_path(model, spec, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"model": model, "fingerprint": fingerprint(spec),
            "spec": {k: v for k, v in dataclasses.asdict(spec).items() if k not in UNTRACED},
            "layers": measured.layers, "extrapolated_from": measured.extrapolated_from,
            "stages": measured.stages, "seconds": round(measured.seconds, 1),
            "host_rss_gb": round(rss_gb, 2), "torch": torch.__version__,
            "transformers": transformers.__version__, "git_commit": git_revision(),
            "recorded": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    text = json.dumps(body, indent=1, sort_keys=True) + "\n"
    atomic_file(path, lambda tmp: tmp.write_text(text))
    return path


def find_record(model: str, spec: Any, root: Path | None = None) -> dict[str, Any] | None:
    """The record of exactly this spec, or None. A file whose content does not carry the
    fingerprint its name promises is an error naming it (a hand edit, a bad merge)."""
    path = record_path(model, spec, root)
    if not path.is_file():
        return None
    try:
        body = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSON ({err.msg}); re-record it with repro plan "
                         "--measure --record") from None
    if body.get("fingerprint") != fingerprint(spec) or "stages" not in body:
        raise ValueError(f"{path}: its fingerprint or stages do not match the job it is named "
                         "for; re-record it with repro plan --measure --record")
    return body


def apply_record(plan: Any, config: dict[str, Any], key: str, train: dict[str, Any],
                 root: Path | None = None) -> None:
    """Check train job `plan` against its tracked record, if one exists: its peak stage (plus a
    sleeping vLLM, which the tracker does not see) joins the plan as a phase, and a peak over
    the GPU is refused naming the knob (`refuse_over_measured`). Without a record the plan says
    it is arithmetic only."""
    from repro.plan.hardware import Hardware
    from repro.plan.measure import GB, Measured, job_spec, refuse_over_measured
    from repro.plan.memory import Phase, step_layout

    spec = job_spec(config, key, train)
    body = find_record(key, spec, root)
    if body is None:
        name = record_path(key, spec, root).name
        plan.notes.append(f"arithmetic only: no tracked record for this job ({name}); record "
                          "one with repro plan --measure --record (docs/gpu.md)")
        return
    measured = Measured(layers=body["layers"], stages=body["stages"], seconds=body["seconds"],
                        extrapolated_from=body["extrapolated_from"])
    local = step_layout(train, Hardware.of(config["hardware"]), spec.world)[0]
    refuse_over_measured(plan, measured, spec, local)
    update = next(p for p in plan.phases if p.name == "update")
    stage, cats = measured.peak()
    phase = Phase(f"tracked {stage} ({body['recorded'][:10]})", update.capacity_gb,
                  {f"{name} (tracker)": b / GB for name, b in cats.items()
                   if name != "Total" and b})
    phase.items |= {name: gb for name, gb in update.items.items() if name.startswith("vLLM")}
    plan.phases.append(phase)
