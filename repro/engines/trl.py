"""`repro train engine=trl`: the run driver around ReproGRPOTrainer.

Writes exactly what the native engine writes, through the bookkeeping both share
(`repro.training.run`): the scratch layout (`checkpoints/step_NNNNNN/{policy/,
trainer_state.pt, run.json}`, `final/`, `train_log.parquet`, `manifest.json`), one TRAIN_LOG
row per rollout step (`step_row`), the budget-fraction checkpoints (`checkpoint_due`) that
`export_run` copies, and resume from the newest checkpoint. The prompt stream is the native
`PromptStream(seed, step)`, materialised in order (TRL's dataset shuffle is off), so both
engines train on the same prompts.

Under several processes (accelerate launch + config/accelerate/fsdp2.yaml, or the CPU twin) the
policy trains as float32 masters sharded by FSDP2 with bf16 compute (`repro.engines.fsdp`);
checkpoints and the final policy are written file by file by the process owning each file
(`repro.engines.policy_files`, one decoder layer at a time; no process gathers the whole model),
the optimizer shards by every process (torch.distributed.checkpoint), and the main process alone
moves them into place; each update's metrics and the probes cover all processes.

A resumed TRL run continues the step count, the counters and the log, but is not bit-identical
to an uninterrupted one (TRL's sampler and RNG are re-created; the native engine's SIGKILL test
stays native-only).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import gather_object
from transformers import PrinterCallback, TrainerCallback

from repro.engines.fsdp import (
    enable_cpu_fsdp2,
    mixed_precision,
    ram_efficient_loading,
    recipe_policy,
)
from repro.engines.trl_args import build_grpo_config, check_layout, check_sources
from repro.engines.trl_dfpo import merge_micro_steps
from repro.models import load
from repro.models.loader import MASTER_DTYPE, load_for_sharding
from repro.training.checkpoint import RunState, load_trainer_state, save_checkpoint
from repro.training.config import TrainConfig
from repro.training.rollout import PromptStream, Rewarder
from repro.training.run import (
    checkpoint_due,
    finish_run,
    initial_state,
    open_run,
    probe_row,
    prompts_and_probes,
    step_row,
    write_log,
)

# repro train's declaration of this engine (read by repro.training.trainers, not imported)
ENGINE = {"name": "trl", "trainer": "train_trl", "launch": "accelerate", "env": "gpu",
          "help": "TRL 1.16's GRPOTrainer with the same objectives, for GPUs, FSDP2 and vLLM "
                  "rollouts through `accelerate launch`"}


class ProblemReward:
    """TRL reward function: grades each completion against its problem with the project's
    graders (`Rewarder`), through the dataset's `problem_key` column."""

    __name__ = "repro_reward"

    def __init__(self, rewarder: Rewarder, problems: list[Any]) -> None:
        self.rewarder, self.problems = rewarder, problems
        self.failures = 0  # grader errors/timeouts of the latest call (this process's rows)

    def __call__(self, prompts, completions, problem_key, **_: Any) -> list[float]:
        rewards = self.rewarder([(self.problems[k], c)
                                 for k, c in zip(problem_key, completions, strict=True)])
        self.failures = self.rewarder.last_failures
        return rewards


def prompt_dataset(stream: PromptStream, tok, first: int, last: int):
    """Rows of steps first..last in stream order (P per step), chat-templated as the native
    rollout does, plus the list of problems the reward function looks up by `problem_key`."""
    from datasets import Dataset

    from repro.benchmarks import build_messages

    rows, problems = [], []
    for step in range(first, last + 1):
        for name, problem in stream.at(step):
            text = tok.apply_chat_template(build_messages(stream.specs[name], problem),
                                           tokenize=False, add_generation_prompt=True)
            rows.append({"prompt": text, "problem_key": len(problems)})
            problems.append(problem)
    return Dataset.from_list(rows), problems


class RunLog(TrainerCallback):
    """Collects one rollout step's records from the trainer and, once its K updates and their
    grad norms are in, appends the TRAIN_LOG row, runs the probes and saves due checkpoints."""

    def __init__(self, cfg: TrainConfig, out: Path, state: RunState, identity, probes,
                 label: str, n_params: int) -> None:
        self.cfg, self.out, self.state, self.identity = cfg, out, state, identity
        self.probes, self.label, self.n_params = probes, label, n_params
        self.trainer: Any = None
        self.resume_from: Path | None = None
        self.baselines_due = state.step == 0  # a fresh run measures them at its first rollout
        self._reset()

    def _reset(self) -> None:
        self.roll: dict[str, Any] | None = None
        self.micro: list[dict[str, float]] = []  # micro-steps of the optimizer step under way
        self.updates: list[dict[str, float]] = []
        self.entropy = [0.0, 0]
        self.t_end_rollout = 0.0

    def rollout(self, **record: Any) -> None:
        if self.baselines_due:
            self._baselines()
            self.baselines_due = False
        self.roll = record
        self.t_end_rollout = time.perf_counter()

    def _baselines(self) -> None:
        """A fresh run's probe baselines, measured on the policy as it trains (prepared: sharded,
        mixed precision), on every process, before the first update. Not earlier: FSDP2 needs
        a first forward of the root module (the rollout's) before `response_logprobs` calls
        the backbone alone."""
        model = self.trainer.model
        model.eval()
        start = initial_state(self.probes, model)
        model.train()
        self.state.logodds0, self.state.prev_ctx = start.logodds0, start.prev_ctx
        self.state.preamble0 = start.preamble0

    def update(self, metrics: dict[str, float], entropy_sum: float, entropy_n: int) -> None:
        self.micro.append(metrics)
        self.entropy[0] += entropy_sum
        self.entropy[1] += entropy_n

    def on_train_begin(self, args, state, control, **kwargs):
        if self.resume_from is not None:  # the optimizer exists only now (sharded, on each rank)
            load_trainer_state(self.resume_from, self.trainer.optimizer, restore_optimizer=(
                lambda folder: restore_optimizer(self.trainer, folder)))

    def on_log(self, args, state, control, logs=None, **kwargs):
        """Called after each optimizer step (logging_steps=1) with its grad norm, on every
        process: the update's metrics merge the micro-steps of all processes (defect 6)."""
        if not logs or "grad_norm" not in logs or not self.micro:
            return control
        micro = [m for part in gather_object([self.micro]) for m in part]
        self.updates.append(merge_micro_steps(micro) | {"grad_norm": float(logs["grad_norm"])})
        self.micro = []
        if len(self.updates) == self.cfg.minibatches * self.cfg.epochs:
            self._finish_step(control)
        return control

    def _finish_step(self, control) -> None:
        cfg, st, trainer = self.cfg, self.state, self.trainer
        acc = trainer.accelerator
        step = st.step + 1
        model = acc.unwrap_model(trainer.model)  # FSDP2: the sharded module itself
        roll = self.roll
        ent_sum, ent_n = map(sum, zip(*gather_object([tuple(self.entropy)]), strict=True))
        entropy = ent_sum / max(ent_n, 1)
        row = step_row(cfg, st, self.n_params, cfg.kl_coef > 0, roll["lengths"], roll["reward"],
                       roll["truncated"], entropy, roll["zero_adv_frac"], self.updates,
                       roll["seconds"], time.perf_counter() - self.t_end_rollout,
                       roll["grader_errors"])
        row |= probe_row(self.probes, model, st)  # every process: FSDP2 gathers the weights
        row |= {"algorithm": self.label, "objective": cfg.algorithm, "seed": cfg.seed,
                "step": step}
        st.log.append(row)
        st.step = step
        self._reset()
        if checkpoint_due(cfg, st):
            save_sharded_checkpoint(trainer, self.out, step, st, self.identity)
            if acc.is_main_process:
                write_log(self.out, st.log, cfg)
            acc.wait_for_everyone()
        if cfg.token_budget is not None and st.gen_cum >= cfg.token_budget:
            control.should_training_stop = True


def save_sharded_checkpoint(trainer, out: Path, step: int, state: RunState,
                            identity: dict[str, Any]) -> None:
    """Checkpoint of a (possibly FSDP2-sharded) trainer; every process calls it (defect 4: on
    one rank, `save_pretrained` and `optimizer.state_dict()` see only that rank's shards). The
    policy is written file by file by the processes that own the files (`write_policy`) and
    each process writes its optimizer shards with torch.distributed.checkpoint, both into
    staging folders that the main process then moves into the checkpoint."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    acc = trainer.accelerator
    staging = out / "checkpoints" / f".optimizer_{step:06d}"
    if acc.is_main_process and staging.exists():
        shutil.rmtree(staging)  # a killed run's leftovers
    acc.wait_for_everyone()
    policy = write_policy(trainer, out / "checkpoints" / f".policy_{step:06d}")
    dcp.save(get_optimizer_state_dict(trainer.model, _inner(trainer.optimizer)),
             checkpoint_id=staging)
    acc.wait_for_everyone()
    if acc.is_main_process:
        save_checkpoint(out, step, acc.unwrap_model(trainer.model), trainer.processing_class,
                        None, state, identity, policy_dir=policy, optimizer_dir=staging,
                        keep=trainer.repro.keep_checkpoints)
    acc.wait_for_everyone()


def write_policy(trainer, staging: Path) -> Path | None:
    """Every process: under several processes, the policy written into `staging` file by file
    by the process owning each file (`repro.engines.policy_files`: no process gathers the whole
    model); in one process None, and the caller's `save_pretrained` writes it."""
    from repro.engines.policy_files import save_sharded_policy

    acc = trainer.accelerator
    if acc.num_processes == 1:
        return None
    if acc.is_main_process and staging.exists():
        shutil.rmtree(staging)  # a killed run's leftovers
    acc.wait_for_everyone()
    save_sharded_policy(trainer.model, staging)
    return staging


def restore_optimizer(trainer, folder: Path) -> None:
    """Load the optimizer shards `save_sharded_checkpoint` wrote into this process's optimizer
    (torch.distributed.checkpoint reshards when the process count changed)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    model, optimizer = trainer.model, _inner(trainer.optimizer)
    state = get_optimizer_state_dict(model, optimizer)  # this process's layout, as a template
    dcp.load(state, checkpoint_id=folder)
    set_optimizer_state_dict(model, optimizer, state)


def _inner(optimizer):
    return getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer


def train_trl(cfg: TrainConfig, out: Path, *, label: str | None = None, resume: bool = False,
              fingerprint: str = "") -> Path:
    """Train with TRL into `out` (same outputs as the native engine). Under several
    processes every file operation is the main process's, then all wait (defect 5)."""
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list

    from repro.engines.trl_trainer import ReproGRPOTrainer

    out = Path(out)
    dist = PartialState()
    world = dist.num_processes
    check_layout(cfg, world)
    check_sources(cfg, world)
    opened = [open_run(cfg, out, label, resume, fingerprint) if dist.is_main_process else None]
    label, identity, ckpt = broadcast_object_list(opened)[0]
    torch.manual_seed(cfg.seed)
    # float32 masters whatever the checkpoint's dtype; bf16 compute is FSDP2's (defect 2).
    # Under FSDP with cpu_ram_efficient_loading only the main process holds the weights on
    # CPU; the others build the model on the meta device (no full copy per rank).
    source = ckpt / "policy" if ckpt else cfg.model
    if world > 1 and ram_efficient_loading():
        model, tok = load_for_sharding(source, main_process=dist.is_main_process,
                                       dtype=MASTER_DTYPE)
    else:
        model, tok = load(source, dtype=MASTER_DTYPE)
    stream, probes = prompts_and_probes(cfg, tok)
    # counters and log now; optimizer, RNG and a fresh run's probe baselines once TRL has
    # built the optimizer and prepared (sharded) the model
    state = (RunState(**torch.load(ckpt / "trainer_state.pt", weights_only=False)["state"])
             if ckpt is not None else RunState())
    done = state.step
    if done >= cfg.steps or (cfg.token_budget is not None and state.gen_cum >= cfg.token_budget):
        if dist.is_main_process:
            finish_run(out, model, tok, state, identity, cfg)
        dist.wait_for_everyone()
        return out / "final"
    n_params = sum(p.numel() for p in model.parameters())
    log = RunLog(cfg, out, state, identity, probes, label, n_params)
    log.resume_from = ckpt
    dataset, problems = prompt_dataset(stream, tok, done + 1, cfg.steps)
    rewarder = Rewarder({stream.specs[n].kind for n in stream.names})
    args = build_grpo_config(cfg, out=out, world_size=world, steps=cfg.steps - done,
                             half_precision=mixed_precision() != "no",
                             use_cpu=not torch.cuda.is_available())
    enable_cpu_fsdp2()  # after GRPOConfig: TrainingArguments resets accelerate's state
    model.train()
    # TRL builds the KL reference (kl_coef > 0) from the policy's name_or_path: the initial
    # model, also when the policy was resumed from a checkpoint (as the native engine does).
    model.config._name_or_path = str(cfg.model)
    trainer = ReproGRPOTrainer(model=model, processing_class=tok, args=args,
                               reward_funcs=[ProblemReward(rewarder, problems)],
                               train_dataset=dataset, callbacks=[log], repro=cfg,
                               rollout_step0=done, sink=log, lagged=state.lagged)
    trainer.remove_callback(PrinterCallback)  # the TRAIN_LOG Parquet is the log
    recipe_policy(trainer.accelerator)
    log.trainer = trainer
    if ckpt is not None and dist.is_main_process:
        print(f"repro train: resuming from {ckpt} (step {done})")
    try:
        trainer.train()
    finally:
        rewarder.close()
    policy = write_policy(trainer, out / ".final_policy")  # collective
    if dist.is_main_process:
        finish_run(out, trainer.accelerator.unwrap_model(trainer.model), tok, state, identity,
                   cfg, policy_dir=policy)
    dist.wait_for_everyone()
    return out / "final"
