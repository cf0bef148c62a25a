"""Where GPU jobs run (config `hardware:`): the defaults' one home, mirrored by config/schema.yaml
(tests/test_defaults.py keeps the two equal)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TrainLayout:
    nodes: int = 1  # nodes of a train job; several: one `accelerate launch` per node under srun
    gpus_per_node: int = 0  # one FSDP2 process per GPU; 0: a CPU job (python, nothing planned)

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class EvalLayout:
    gpus: int = 0  # one node; vLLM tensor parallel over all of them; 0: a CPU job
    tokens_per_s: float = 2000.0  # an estimate of one job's generation rate, for its walltime


@dataclass(frozen=True)
class Hardware:
    gpu_type: str | None = None  # GRES type: gres gpu:TYPE:N
    gpu_memory_gb: float = 141.0  # one GPU, 1e9 bytes (H200)
    host_memory_gb: float = 900.0  # what a train job may use per node
    prompt_tokens: int = 2048  # the longest prompt: sequences are sized at this + the budget
    train: TrainLayout = field(default_factory=TrainLayout)
    eval: EvalLayout = field(default_factory=EvalLayout)

    @classmethod
    def of(cls, block: dict[str, Any]) -> Hardware:
        """From the config's `hardware:` mapping (schema-checked; missing keys: the defaults)."""
        nested = {"train": TrainLayout(**block.get("train", {})),
                  "eval": EvalLayout(**block.get("eval", {}))}
        return cls(**{k: v for k, v in block.items() if k not in nested} | nested)
