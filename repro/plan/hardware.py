"""Where GPU jobs run (config `hardware:`): the defaults', help's and bounds' one home, from
which config/schema.yaml is generated (repro.pipeline.schema)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from repro.config_bounds import setting


@dataclass(frozen=True)
class TrainLayout:
    """Nodes and GPUs of a train job."""

    nodes: int = setting(1, "Nodes of a train job (several: one `accelerate launch` per node "
                         "under srun).", min=1)
    gpus_per_node: int = setting(0, "GPUs per node of a train job, one FSDP2 process each (0 = "
                                 "CPU, python).", min=0)

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class EvalLayout:
    """GPUs and throughput of an evaluation job."""

    gpus: int = setting(0, "GPUs of an evaluation job (one node; vLLM tensor parallel over all "
                        "of them).", min=0)
    tokens_per_s: float = setting(
        2000, "Generation throughput of one evaluation job, tokens per second: an estimate "
        "the planner turns into the job's walltime (response budget x samples / this); replace "
        "it with the rate a first evaluation job logs.", exclusive_min=0)


@dataclass(frozen=True)
class Hardware:
    """Where the GPU jobs run. The train and evaluate rules ask for these nodes and GPUs (SLURM:
    --nodes and a per-node --gres), and the memory planner (`repro plan`, also run at parse
    time) checks that each job fits them, refusing with the key to change. A deviation from
    "GPUs live in profiles" (spec/pipeline.md): how many processes share an update decides
    whether groups split evenly (train.prompts_per_step / minibatches) and whether the model
    fits, so the layout is part of the experiment. The profile keeps the site's settings
    (account, partition, CPUs, host memory to request, train runtime). No GPUs (the default):
    CPU jobs, nothing planned."""

    gpu_type: str | None = setting(
        None, "GRES GPU type (site-specific, e.g. h200): gres gpu:TYPE:N; null: gpu:N.")
    gpu_memory_gb: float = setting(141, "Memory of one GPU, GB (1e9 bytes); H200 141.",
                                   exclusive_min=0)
    host_memory_gb: float = setting(900, "Host memory a train job may use per node, GB (the "
                                    "profile's mem_mb per node).", exclusive_min=0)
    prompt_tokens: int = setting(
        2048, "Longest prompt, tokens: the planner sizes every sequence at this plus the "
        "response budget (TRL pads a micro-step to its longest row).", min=1)
    train: TrainLayout = setting(TrainLayout(), "Train jobs' layout.")
    eval: EvalLayout = setting(EvalLayout(), "Evaluation jobs' layout.")

    @classmethod
    def of(cls, block: dict[str, Any]) -> Hardware:
        """From the config's `hardware:` mapping (schema-checked; missing keys: the defaults)."""
        nested = {"train": TrainLayout(**block.get("train", {})),
                  "eval": EvalLayout(**block.get("eval", {}))}
        return cls(**{k: v for k, v in block.items() if k not in nested} | nested)
