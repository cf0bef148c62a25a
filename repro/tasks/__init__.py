"""Deterministic synthetic stand-ins for AIME25, HMMT Feb 2025 and LiveCodeBench, and
`synth-rule` (synth-aime's add/sub with a wrong-rule SFT bias: the task RL learns on a CPU)
and `synth-preamble` (synth-rule with a preamble of equally taught phrasings, >= 96 tokens).

Each task writes rows in its real twin's hub schema (so the same loader turns them into
`Problem`s and the same graders score them), SFT demonstrations that use two equally correct
surface forms in equal proportion, and a fixed probe set for `logodds_drift` / `kl_template`.
Train and eval problems are disjoint; everything is a pure function of (split, n, seed).

Every module of this package that defines a task `NAME` is one (`SYNTHETIC`, by name): a task
file dropped in is an SFT task with no other edit, and its benchmark spec
(repro/benchmarks/specs/NAME.yaml, `generator: repro.tasks.MODULE:rows`) makes it a benchmark
and an RL prompt set. tests/test_tasks.py holds the two in step.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import Any

from repro.tasks.base import Probe

SYNTHETIC: dict[str, ModuleType] = {}
for _info in pkgutil.iter_modules(__path__):
    _module = importlib.import_module(f"{__name__}.{_info.name}")
    if hasattr(_module, "NAME"):
        SYNTHETIC[_module.NAME] = _module

__all__ = [
    "SYNTHETIC", "Probe", "synthetic_demonstrations", "synthetic_probes", "synthetic_rows",
    "synthetic_size", "task_of",
]


def task_of(generator: str) -> str:
    """The task a benchmark spec's `generator` (`repro.tasks.MODULE:rows`) names: a spec may
    reuse a task's rows under its own name, and trains on that task's train split and probes."""
    module = generator.partition(":")[0]
    names = [name for name, task in SYNTHETIC.items() if task.__name__ == module]
    if not names:
        raise ValueError(f"generator {generator!r} is no task module of repro.tasks; known: "
                         f"{sorted(task.__name__ for task in SYNTHETIC.values())}")
    return names[0]


def _task(name: str) -> ModuleType:
    if name not in SYNTHETIC:
        raise ValueError(f"unknown synthetic task {name!r}; known: {sorted(SYNTHETIC)}")
    return SYNTHETIC[name]


def synthetic_rows(name: str, split: str, n: int, seed: int) -> list[dict[str, Any]]:
    """`n` hub-schema rows of task `name` (e.g. "synth-lcb") from `split` ("train" / "eval")."""
    return _task(name).rows(split, n, seed)


def synthetic_demonstrations(name: str, split: str, n: int, seed: int) -> list[dict[str, Any]]:
    """SFT chats for exactly the problems of `synthetic_rows(name, split, n, seed)`."""
    return _task(name).demonstrations(split, n, seed)


def synthetic_probes(name: str, n: int = 16, seed: int = 1234, split: str = "train") -> list[Probe]:
    """The fixed probe set of task `name`."""
    return _task(name).probes(n, seed, split)


def synthetic_size(name: str, split: str) -> int:
    """How many problems `split` of task `name` holds (the largest valid `n`)."""
    return _task(name).size(split)
