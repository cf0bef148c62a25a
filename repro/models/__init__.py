"""Models for the repro suite: tiny offline Qwen3 models and the one loader.

`build_tiny` makes a seeded random Qwen3 with a character-level tokenizer for
fast tests; `load` loads that or any real causal LM through the same
``transformers`` Auto classes.

Only `TinyModelConfig` is imported eagerly: the rest load torch and transformers, so they are
imported on first use (PEP 562), and the workflow's parse-time checks, which read
`TinyModelConfig`, stay free of both.
"""

from __future__ import annotations

from typing import Any

from repro.models.tiny_config import TinyModelConfig

__all__ = ["TinyModelConfig", "build_tiny", "build_tokenizer", "load", "load_for_sharding"]


def __getattr__(name: str) -> Any:
    """`load`, `load_for_sharding`, `build_tiny`, `build_tokenizer` on first use. Plain import
    statements, not importlib: repro.pipeline.sources finds a job's modules by reading them."""
    if name in ("load", "load_for_sharding"):
        from repro.models import loader

        return getattr(loader, name)
    if name == "build_tiny":
        from repro.models.tiny import build_tiny

        return build_tiny
    if name == "build_tokenizer":
        from repro.models.tokenizer import build_tokenizer

        return build_tokenizer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
