"""Tiny randomly initialised Qwen3 models for fast, offline tests.

The tiny model has the real architecture of its family (`TinyModelConfig.architecture`):
``Qwen3ForCausalLM`` (GQA, q/k norm, RoPE), ``Qwen3MoeForCausalLM`` (top-k routed experts) or
``Qwen3NextForCausalLM`` (Gated DeltaNet linear attention, routed and shared experts), so
anything that works on it exercises the same code as a real checkpoint of that family loaded
through `repro.models.load`. On CPU transformers runs Qwen3-Next's causal conv1d and gated
delta rule with its reference PyTorch kernels (it says so on stderr); the same model code uses
the fast kernels on GPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from transformers import (
    GenerationConfig,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
    Qwen3NextConfig,
    Qwen3NextForCausalLM,
)

from repro.atomic import atomic_dir
from repro.models.tiny_config import TinyModelConfig  # torch-free home, re-exported
from repro.models.tokenizer import build_tokenizer

_CLASSES: dict[str, tuple[type[PretrainedConfig], type[PreTrainedModel]]] = {
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),
    "qwen3_moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM),
    "qwen3_next": (Qwen3NextConfig, Qwen3NextForCausalLM),
}


def _moe_fields(cfg: TinyModelConfig) -> dict:
    """The architecture-specific config fields (none for dense Qwen3). Qwen3-Next's linear
    attention gets head dims equal to `head_dim` and its 1:2 key:value head ratio (the 80B's
    16:32), with `num_key_value_heads` key heads."""
    if cfg.architecture == "qwen3":
        return {}
    moe = {"num_experts": cfg.num_experts, "num_experts_per_tok": cfg.num_experts_per_tok,
           "moe_intermediate_size": cfg.moe_intermediate_size, "decoder_sparse_step": 1,
           "router_aux_loss_coef": float(cfg.router_aux_loss_coef), "norm_topk_prob": True}
    if cfg.architecture == "qwen3_moe":
        return moe
    return moe | {
        "shared_expert_intermediate_size": cfg.shared_expert_intermediate_size,
        "layer_types": ["full_attention" if (i + 1) % cfg.full_attention_interval == 0
                        else "linear_attention" for i in range(cfg.num_hidden_layers)],
        "linear_key_head_dim": cfg.head_dim, "linear_value_head_dim": cfg.head_dim,
        "linear_num_key_heads": cfg.num_key_value_heads,
        "linear_num_value_heads": 2 * cfg.num_key_value_heads,
    }


def _qwen3_config(cfg: TinyModelConfig, tok: PreTrainedTokenizerFast) -> PretrainedConfig:
    """Translate cfg into its architecture's config, vocab and special ids matching tok."""
    return _CLASSES[cfg.architecture][0](
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
        **_moe_fields(cfg),
    )


def build_tiny(
    cfg: TinyModelConfig, out_dir: str | Path | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """Build a seeded random tiny Qwen3 (dense, MoE or Next) and its tokenizer (float32, eval).

    The caller's global torch RNG state is left untouched. If ``out_dir`` is
    given, model, tokenizer and generation config are saved there atomically,
    replacing any previous contents.
    """
    tok = build_tokenizer(model_max_length=cfg.max_position_embeddings)
    config = _qwen3_config(cfg, tok)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = _CLASSES[cfg.architecture][1](config).to(torch.float32)
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


def main(argv: list[str]) -> int:
    """`python -m repro.models.tiny OUT`: write the default tiny Qwen3 to OUT, offline (for a
    TRL or verl user's first run; needs torch and transformers only, not the pipeline)."""
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m repro.models.tiny OUT  (a folder to write the tiny Qwen3 to)",
              file=sys.stderr)
        return 2
    model, _ = build_tiny(TinyModelConfig(), argv[0])
    print(f"{argv[0]}: tiny random qwen3, {model.num_parameters()} parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
