"""The software and hardware a job ran on, recorded in every manifest and in the aggregate.

A rerun reproduces the committed numbers bit for bit only with the same packages and the same
CPU kernels: ATen picks its vectorised kernels (AVX512, AVX2, ...) at run time from the CPU and
`ATEN_CPU_CAPABILITY`, and their rounding differs, which long sampled runs amplify (issue 22).
So each job states what it ran on, and the tables' footers say it.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

# The packages whose code computes or reads the numbers (absent ones are recorded as null).
PACKAGES = ("torch", "transformers", "tokenizers", "safetensors", "trl", "accelerate",
            "datasets", "numpy", "pyarrow", "math-verify", "snakemake", "vllm")
# Variables that change which kernels run or how many threads they use.
ENV_VARS = ("ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
            "CUBLAS_WORKSPACE_CONFIG", "CUDA_VISIBLE_DEVICES")
_BUILD_KEYS = ("BLAS_INFO", "LAPACK_INFO", "BUILD_TYPE", "USE_CUDA", "USE_MKLDNN", "USE_OPENMP")


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def cpu_model() -> str:
    """The CPU's marketing name (Linux /proc/cpuinfo, else what `platform` knows)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        found = re.search(r"^(?:model name|Hardware|cpu model)\s*:\s*(.+)$",
                          cpuinfo.read_text(errors="replace"), re.MULTILINE)
        if found:
            return found.group(1).strip()
    return platform.processor() or platform.machine() or "unknown"


def torch_record() -> dict[str, Any]:
    """The torch build and the kernels and threads it uses in this process."""
    import torch

    settings = dict(re.findall(r"(\w+)=([^,]*)", torch.__config__.show().split(
        "Build settings:")[-1]))
    gpus = ([torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            if torch.cuda.is_available() else [])
    return {
        "version": torch.__version__,
        "git_version": torch.version.git_version,
        "cuda": torch.version.cuda,
        "build": {key: settings[key].strip() for key in _BUILD_KEYS if key in settings},
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "gpus": gpus,
    }


def environment() -> dict[str, Any]:
    """What this process runs on: packages, torch build and kernels, threads, CPU, Python.
    `torch` is None in a job that never imported it (aggregate, tables): importing it only to
    describe it would cost seconds and say nothing about that job's numbers."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "packages": package_versions(),
        "torch": torch_record() if "torch" in sys.modules else None,
        "env": {name: os.environ[name] for name in ENV_VARS if name in os.environ},
    }


def summary(env: dict[str, Any]) -> str:
    """One line for a table's footer: the fields a reader needs to judge a mismatch."""
    t, p = env["torch"], env["packages"]
    others = ", ".join(f"{name} {p[name]}" for name in PACKAGES[1:] if p.get(name))
    if t is None:
        return f"torch not imported, {others}; Python {env['python']}; {env['cpu_model']}"
    gpus = f", GPU {', '.join(sorted(set(t['gpus'])))}" if t.get("gpus") else ""
    return (f"torch {t['version']} (CPU kernels {t['cpu_capability']}, {t['threads']} "
            f"thread{'s' if t['threads'] != 1 else ''}, BLAS {t['build'].get('BLAS_INFO', '?')})"
            f", {others}; Python {env['python']}; {env['cpu_model']}{gpus}")
