"""Measure the tiny default's stage-1 SFT (models.tiny-base) under one seed / ISA / recipe.

Why: issue 22 found that stage 1 sometimes misses its sudden arithmetic transition (train reward
0.055 instead of ~0.3) on another CPU; this script records one run's outcome as one JSON line
so that a seed x ISA x recipe table can be built from it (docs/sft-robustness.md).

    nice -n 19 env OMP_NUM_THREADS=1 [ATEN_CPU_CAPABILITY=avx2] \
        python scripts/sft_probe.py --seed 0 --label default --log docs/sft-robustness-runs.jsonl
    python scripts/sft_probe.py --profile 40      # where one step's time goes (no training run)

`--stage2` goes on to the RL start itself: stage 2 (config.yaml's models.tiny block) on top of
this stage 1, then the held-out synth-rule evaluation the pipeline runs for `algo=init` (its
`eval` block, eval seed 0), recorded as `start_heldout` (avg@k over the held-out problems).
`--rl` then trains GRPO from that start with config.yaml's `train` block (run seed 0) and
evaluates its final checkpoint the same way (`rl_heldout`): the start's RL gain.
`--eval-seeds N` also evaluates the start at eval seeds 0..N-1 and records their mean
(`start_heldout_mean`, avg@(k*N)): one avg@4 has an SD of ~1.65 points on its own
(docs/sft-robustness.md, section 8), too coarse to compare starts within 5 points.

Extra KEY=VALUE arguments override SFTConfig on top of config/config.yaml's tiny-base block
(e.g. batch_size=32 steps=1750 lr=4e-3, group_by_length=true, gate_reward=0). The models go
to a temporary directory, or to `--keep DIR` (kept, for evaluating them again later); a gate
missed at the cap is recorded as the row's outcome.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import yaml

from repro.results.environment import cpu_model
from repro.training.config import parse_overrides
from repro.training.sft import GateMissed, SFTConfig, collate, encode_demo, run_sft, sft_step

ROOT = Path(__file__).resolve().parent.parent
CONFIG = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def stage1_config(seed: int, extra: list[str]) -> SFTConfig:
    """config/config.yaml's models.tiny-base SFT block, the seed and the extra overrides."""
    block = CONFIG["models"]["tiny-base"]
    return SFTConfig(**{**block.get("sft", {}), "seed": seed, **parse_overrides(extra)})


def heldout(policy: Path, out: Path, checkpoint: str, seed: int) -> dict[str, float]:
    """avg@k of `policy` over each benchmark of config.yaml's `eval` block, as `repro eval`
    computes it for the pipeline (held-out split, the block's k and generation budget)."""
    import pyarrow.parquet as pq

    e = CONFIG["eval"]
    subprocess.run([sys.executable, "-m", "repro", "eval", "--model", str(policy), "--out",
                    str(out), "--checkpoint", checkpoint, "--seed", str(seed), "--split", "--k",
                    str(e["k"]), "--max-new-tokens", str(e["sampling"]["max_new_tokens"]),
                    *(a for b in e["benchmarks"] for a in ("--benchmark", b))],
                   check=True, stdout=subprocess.DEVNULL)
    return {b: sum(col := pq.read_table(out / f"benchmark={b}" / "problems.parquet")["avg"]
                   .to_pylist()) / len(col) for b in e["benchmarks"]}


def rl_start(stage1: Path, work: Path, seed: int, eval_seeds: int) -> dict[str, Any]:
    """Stage 2 (config.yaml's models.tiny) from `stage1`, and the start's held-out avg@k at
    eval seed `seed` (as the pipeline pairs it), plus its mean over eval seeds 0..eval_seeds-1."""
    stage2 = SFTConfig(**{**CONFIG["models"]["tiny"]["sft"], "model": str(stage1)})
    m = run_sft(stage2, work / "stage2")
    runs = {s: heldout(work / "stage2", work / f"eval-init-{s}", "init", s)
            for s in sorted({seed, *range(eval_seeds)})}
    row = {"stage2_train_reward": m["train_reward"]["mean"], "start_heldout": runs[seed]}
    if eval_seeds > 1:
        row["start_heldout_mean"] = {b: sum(runs[s][b] for s in range(eval_seeds)) / eval_seeds
                                     for b in runs[seed]}
        row["start_eval_seeds"] = eval_seeds
    return row


def rl_gain(start: Path, work: Path, seed: int) -> dict[str, Any]:
    """GRPO from `start` with config.yaml's `train` block, run seed `seed`, evaluated at its
    end with the same eval seed as the start (paired, as the pipeline pairs them)."""
    from repro.training.config import TrainConfig

    cfg = TrainConfig(**CONFIG["train"], model=str(start), algorithm="grpo", seed=seed,
                      checkpoint_fractions=[1.0])
    (work / "rl.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
    subprocess.run([sys.executable, "-m", "repro", "train", "--config", str(work / "rl.yaml"),
                    "--out", str(work / "rl"), "--threads", str(torch.get_num_threads()),
                    "--export", str(work / "rl-export")], check=True, stdout=subprocess.DEVNULL)
    return {"rl_heldout": heldout(work / "rl-export" / "policy" / "frac=1.0",
                                  work / "eval-rl", "frac=1.0", seed)}


def profile(cfg: SFTConfig, steps: int) -> None:
    """Time `steps` SFT steps of the recipe's batch with torch.profiler; print the top ops."""
    from repro.models import build_tiny
    from repro.tasks import synthetic_demonstrations
    from repro.training.sft import allocate

    model, tok = build_tiny(cfg.model)
    demos = [d for task, n in allocate(cfg.tasks, cfg.n_demos).items()
             for d in synthetic_demonstrations(task, "train", n, cfg.seed)]
    examples = [e for d in demos if (e := encode_demo(tok, d["messages"], cfg.max_len))]
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    batches = [collate(examples[i * cfg.batch_size:(i + 1) * cfg.batch_size], tok.pad_token_id)
               for i in range(steps)]
    model.train()
    sft_step(model, optimizer, batches[0], cfg.grad_clip)  # warm-up: first-call allocations
    start = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for batch in batches[1:]:
            sft_step(model, optimizer, batch, cfg.grad_clip)
    per_step = (time.perf_counter() - start) / (steps - 1)
    tokens = sum(int(b["attention_mask"].sum()) for b in batches[1:]) / (steps - 1)
    width = sum(int(b["input_ids"].shape[1]) for b in batches[1:]) / (steps - 1)
    print(f"batch {cfg.batch_size}: {per_step * 1e3:.1f} ms/step (profiled), {tokens:.0f} real "
          f"tokens/step, mean padded width {width:.0f}, threads {torch.get_num_threads()}")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--label", default="default", help="Recipe name for the table.")
    parser.add_argument("--log", type=Path, help="JSON-lines file to append the outcome to.")
    parser.add_argument("--profile", type=int, default=0, help="Profile N steps instead.")
    parser.add_argument("--stage2", action="store_true",
                        help="Also train stage 2 and evaluate the RL start held out.")
    parser.add_argument("--rl", action="store_true", help="With --stage2: GRPO from the start.")
    parser.add_argument("--eval-seeds", type=int, default=1,
                        help="With --stage2: also the start's mean held-out over N eval seeds.")
    parser.add_argument("--keep", type=Path, help="Write the models here, not to a temp dir.")
    args, extra = parser.parse_known_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    cfg = stage1_config(args.seed, extra)
    if args.profile:
        profile(cfg, args.profile)
        return
    row = {
        "label": args.label, "seed": args.seed, "overrides": extra,
        "aten_cpu_capability_env": os.environ.get("ATEN_CPU_CAPABILITY", ""),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu": cpu_model(), "torch": torch.__version__, "threads": torch.get_num_threads(),
        "sft_config": {k: v for k, v in dataclasses.asdict(cfg).items() if k != "model"},
    }
    try:
        with tempfile.TemporaryDirectory() as tmp_dir:
            tmp = args.keep or Path(tmp_dir)
            m = run_sft(cfg, Path(tmp) / "model")
            if args.stage2:
                row |= rl_start(Path(tmp) / "model", Path(tmp), seed=0,
                                eval_seeds=args.eval_seeds) | {"eval_seed": 0}
                if args.rl:
                    row |= rl_gain(Path(tmp) / "stage2", Path(tmp), seed=0)
    except GateMissed as err:  # a row all the same: the miss is the outcome
        row["gate_missed"] = str(err)
    else:
        reward = m["train_reward"]
        row |= {
            "train_reward": reward["mean"], "reward_per_task": reward["per_task"],
            "forms": reward["forms"], "steps_run": m["steps_run"],
            "gate_checks": m["gate_checks"], "reward_curve": m["reward_curve"],
            "loss_final": m["loss"]["final"],
            "loss_curve": m["loss"]["curve"], "train_time_s": m["train_time_s"],
            "wall_time_s": m["wall_time_s"], "tokens_per_s": m["tokens_per_s"],
        }
    print(json.dumps({k: v for k, v in row.items() if k != "loss_curve"}))
    if args.log:
        with args.log.open("a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
