"""Pick an engine for a model: vLLM when a GPU and vllm are present, HF otherwise."""

from __future__ import annotations

import importlib.util

import torch

from repro.generation.base import Engine

ENGINES = ("auto", "hf", "vllm")


def resolve_engine(name: str) -> str:
    if name not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {name!r}")
    if name != "auto":
        return name
    has_vllm = importlib.util.find_spec("vllm") is not None
    return "vllm" if has_vllm and torch.cuda.is_available() else "hf"


def make_engine(
    model_path: str, name: str = "auto", *, batch_size: int = 8, seed: int = 0
) -> Engine:
    """Build the engine; the HF path loads through `repro.models.load` (tiny or hub models)."""
    resolved = resolve_engine(name)
    if resolved == "vllm":
        from repro.generation.vllm_engine import VLLMEngine

        return VLLMEngine(model_path, seed=seed)
    from repro.generation.hf import HFEngine
    from repro.models import load

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, tokenizer = load(model_path, device=device)
    return HFEngine(model, tokenizer, batch_size=batch_size)
