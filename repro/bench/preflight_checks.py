"""The checks of `repro bench gpu` (repro/bench/gpu.py): every line is one check the report does
not meet. Kept apart from the runner so tests can feed them a report with one defect each."""

from __future__ import annotations

import math
from typing import Any

from repro.plan.memory import RESERVE_GB

NOISE_FLOOR = 1e-3  # vLLM's noise at load can round to ~0 on a tiny model: tolerance floor
NOISE_CAP = 0.25  # vLLM vs trainer on the same weights: bf16 kernels differ by ~0.01-0.05
CHANGED_FRAC = 0.5  # share of master elements with a gradient that the preset's lr must move


def mfu_of(update: dict[str, Any], peak_flops: float, processes: int) -> float:
    """Model FLOPs of the update stage over its time and the processes' dense bf16 peak."""
    if update.get("status") != "ok":
        return math.nan
    return update["model_flops"] / update["seconds"] / (peak_flops * processes)


def failures(report: dict[str, Any], lr: float, stale_factor: float,
             noise_factor: float) -> list[str]:
    """One line per check not met; a stage skipped with its reason is not a failure."""
    bad: list[str] = []
    stages = report["stages"]
    for name, stage in stages.items():
        if stage.get("status") not in ("ok", "skipped"):
            bad.append(f"{name}: {stage.get('status')} ({stage.get('reason', '')[:300]})")
    change = stages.get("param_change", {})
    if change.get("status") == "ok":
        if report["processes"] > 1 and not change["sharded"]:
            bad.append(f"param_change: parameters are not DTensors on {report['processes']} "
                       f"processes ({change['distributed_type']}): FSDP2 did not shard")
        if change["master_dtypes"] != ["torch.float32"]:
            bad.append(f"param_change: master dtypes {change['master_dtypes']}, want float32")
        if not change["elements_changed_frac"] > CHANGED_FRAC:
            bad.append(f"param_change: {change['elements_changed_frac']:.1%} of the master "
                       f"weights with a gradient moved at lr {lr:g} (want > {CHANGED_FRAC:.0%})")
    save = stages.get("save", {})
    owners = min(report["processes"], save.get("files", 0))  # file i: process i mod world
    if save.get("status") == "ok" and save.get("writers", 0) != owners:
        bad.append(f"save: {save.get('writers', 0):g} processes wrote the {save.get('files')} "
                   f"policy files, want {owners} (each writes the files it owns)")
    reload = stages.get("reload", {})
    if reload.get("status") == "ok" and reload["tensors_differ"]:
        bad.append(f"reload: {len(reload['tensors_differ'])} of {reload['tensors']} tensors "
                   f"differ from the trainer's (e.g. {reload['tensors_differ'][0]})")
    sync = stages.get("vllm_sync", {})
    if sync.get("status") == "ok":
        tol = noise_factor * max(sync["noise"], NOISE_FLOOR)
        if not sync["noise"] <= NOISE_CAP:
            bad.append(f"vllm_sync: vLLM's log-probs {sync['noise']:.3g} off the trainer's "
                       f"before training (more than bf16 explains, cap {NOISE_CAP})")
        if not sync["synced"] <= tol:
            bad.append(f"vllm_sync: vLLM log-probs {sync['synced']:.3g} off the trainer's after "
                       f"a sync (tolerance {tol:.3g})")
        if not sync["stale"] > stale_factor * tol:
            bad.append(f"vllm_sync: before the sync vLLM was only {sync['stale']:.3g} off: the "
                       "perturbation does not show, the check cannot tell a stale vLLM")
        resync = stages.get("vllm_resync", {})
        if resync.get("status") == "ok" and not resync["trained"] <= tol:
            bad.append(f"vllm_resync: vLLM log-probs {resync['trained']:.3g} off the trained "
                       f"policy's after TRL's sync (tolerance {tol:.3g})")
    for phase in ("rollout", "update"):
        stage, want = stages.get(phase, {}), report["predicted_gb"].get(phase)
        if "peak_gb" in stage and want is not None and not stage["peak_gb"] <= want:
            bad.append(f"{phase}: peak {stage['peak_gb']:.1f} GB per GPU over repro.plan's "
                       f"{want:.1f} GB")
        if "device_used_gb" not in stage:
            continue
        outside = stage["device_used_gb"] - stage["peak_gb"]
        if not outside <= RESERVE_GB:
            bad.append(f"{phase}: the device used {stage['device_used_gb']:.1f} GB, "
                       f"{outside:.1f} above the allocator's "
                       f"peak (fragmentation {stage['reserved_gb'] - stage['peak_gb']:.1f}, "
                       f"outside torch {stage['device_used_gb'] - stage['reserved_gb']:.1f}): "
                       f"more than the {RESERVE_GB:g} GB repro.plan keeps free (RESERVE_GB)")
    return bad
