"""Models for the repro suite: tiny offline Qwen3 models and the one loader.

`build_tiny` makes a seeded random Qwen3 with a character-level tokenizer for
fast tests; `load` loads that or any real causal LM through the same
``transformers`` Auto classes.
"""

from __future__ import annotations

from repro.models.loader import load, load_for_sharding
from repro.models.tiny import TinyModelConfig, build_tiny
from repro.models.tokenizer import build_tokenizer

__all__ = ["TinyModelConfig", "build_tiny", "build_tokenizer", "load", "load_for_sharding"]
