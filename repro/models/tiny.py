"""Tiny randomly initialised Qwen3 models for fast, offline tests.

The tiny model has the real ``Qwen3ForCausalLM`` architecture (GQA, q/k norm,
RoPE), so anything that works on it exercises the same code as a real Qwen3
checkpoint loaded through `repro.models.load`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from repro.atomic import atomic_dir
from repro.models.tiny_config import TinyModelConfig  # torch-free home, re-exported
from repro.models.tokenizer import build_tokenizer


def _qwen3_config(cfg: TinyModelConfig, tok: PreTrainedTokenizerFast) -> Qwen3Config:
    """Translate cfg into a Qwen3Config whose vocab and special ids match tok."""
    return Qwen3Config(
        vocab_size=len(tok),
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": float(cfg.rope_theta)},
        tie_word_embeddings=cfg.tie_word_embeddings,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
        dtype="float32",  # recorded in config.json so dtype="auto" reloads as float32
    )


def build_tiny(
    cfg: TinyModelConfig, out_dir: str | Path | None = None
) -> tuple[Qwen3ForCausalLM, PreTrainedTokenizerFast]:
    """Build a seeded random tiny Qwen3 model and its tokenizer (float32, eval mode).

    The caller's global torch RNG state is left untouched. If ``out_dir`` is
    given, model, tokenizer and generation config are saved there atomically,
    replacing any previous contents.
    """
    tok = build_tokenizer(model_max_length=cfg.max_position_embeddings)
    config = _qwen3_config(cfg, tok)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = Qwen3ForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None
    )
    model.eval()
    if out_dir is not None:

        def save(d: Path) -> None:
            model.save_pretrained(d)
            tok.save_pretrained(d)

        atomic_dir(Path(out_dir), save)
    return model, tok
