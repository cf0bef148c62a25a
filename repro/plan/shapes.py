"""Model shapes for the memory planner, from a Hugging Face `config.json` (read offline, or
declared in a preset): parameter counts, activation bytes per token and KV-cache bytes per token.

The architectures the paper trains, dense Qwen3 (`qwen3`) and Qwen3-Next (`qwen3_next`: hybrid
Gated DeltaNet / gated attention, sparse MoE with a shared expert), and Qwen3-MoE (`qwen3_moe`,
the tiny-moe models' class: Qwen3 attention, routed experts). Counts follow transformers' modules
(tests/test_plan.py checks them against models built on the meta device).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BF16 = 2  # bytes: the compute, vLLM and checkpoint dtype
ARCHS = ("qwen3", "qwen3_moe", "qwen3_next")


@dataclass(frozen=True)
class Shape:
    """What the planner needs of a model. Sizes in parameters or bytes per token."""

    params: int  # all parameters
    layer_params: int  # the largest decoder layer (one FSDP unit)
    embed_params: int  # input embedding (its own FSDP unit; the head is another of equal size)
    layers: int
    hidden: int
    heads: int  # attention heads (vLLM's tensor parallel size must divide them)
    kv_heads: int  # KV heads (vLLM replicates them when TP exceeds their number)
    act_bytes_per_token: int  # saved activations of all layers for backward, bf16, no checkpointing
    layer_act_bytes_per_token: int  # the same for the largest layer (recomputed one at a time)
    kv_bytes_per_token: int  # vLLM KV cache, bf16, all full-attention layers, whole model
    state_bytes_per_seq: int  # linear-attention recurrent + conv state per sequence (Qwen3-Next)
    max_position_embeddings: int


def read_config(where: str | Path) -> dict[str, Any]:
    """A local model folder's (or file's) config.json."""
    path = Path(where)
    path = path / "config.json" if path.is_dir() else path
    return json.loads(path.read_text())


def shape_of(cfg: dict[str, Any], where: str = "config") -> Shape:
    """Shape of a qwen3 / qwen3_next config; `where` names it in errors."""
    arch = cfg.get("model_type")
    if arch not in ARCHS:
        raise ValueError(f"{where}.model_type is {arch!r}; the planner knows {list(ARCHS)}")
    try:
        return {"qwen3": _dense, "qwen3_moe": _next, "qwen3_next": _next}[arch](cfg)
    except KeyError as err:
        raise ValueError(f"{where} lacks {err.args[0]!r}, needed by the planner") from None


def _attention(cfg: dict[str, Any]) -> tuple[int, int, int]:
    """(params, saved activation bytes per token, KV bytes per token) of a softmax-attention block
    with its input norm. Qwen3-Next's gated attention doubles q_proj (query and gate)."""
    h, d = cfg["hidden_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * d, cfg["num_key_value_heads"] * d
    gate = 2 if cfg["model_type"] == "qwen3_next" else 1
    params = h * q * gate + 2 * h * kv + q * h + 2 * d + h  # q(+gate), k, v, o, q/k norms, norm
    # saved for backward: norm in/out, q(+gate), k, v, attention out, o_proj in: bf16 each
    act = BF16 * (2 * h + q * gate + 2 * kv + 2 * q)
    return params, act, BF16 * 2 * kv


def _linear_attention(cfg: dict[str, Any]) -> tuple[int, int, int]:
    """(params, saved activation bytes per token, recurrent + conv state bytes per sequence) of a
    Gated DeltaNet block with its input norm (transformers' Qwen3NextGatedDeltaNet)."""
    h = cfg["hidden_size"]
    k = cfg["linear_num_key_heads"] * cfg["linear_key_head_dim"]
    v = cfg["linear_num_value_heads"] * cfg["linear_value_head_dim"]
    nv, conv = cfg["linear_num_value_heads"], 2 * k + v
    params = (h * (conv + v) + h * 2 * nv + conv * cfg["linear_conv_kernel_dim"] + 2 * nv
              + cfg["linear_value_head_dim"] + v * h + h)  # in_proj qkvz, ba, conv, dt/A, norm, out
    act = BF16 * (2 * h + 3 * conv + 2 * v + 2 * nv + v)
    state = BF16 * (nv * cfg["linear_key_head_dim"] * cfg["linear_value_head_dim"]
                    + conv * (cfg["linear_conv_kernel_dim"] - 1))
    return params, act, state


def _mlp(h: int, inter: int) -> tuple[int, int]:
    """(params, saved activation bytes per token) of a SwiGLU MLP: gate, up, act(gate), product."""
    return 3 * h * inter, BF16 * 4 * inter


def _dense(cfg: dict[str, Any]) -> Shape:
    h, n = cfg["hidden_size"], cfg["num_hidden_layers"]
    attn, attn_act, kv = _attention(cfg)
    mlp, mlp_act = _mlp(h, cfg["intermediate_size"])
    layer = attn + mlp + h  # + post-attention norm
    layer_act = attn_act + mlp_act + BF16 * 2 * h
    return _whole(cfg, [layer] * n, [layer_act] * n, kv * n, 0)


def _next(cfg: dict[str, Any]) -> Shape:
    """Qwen3-Next, or Qwen3-MoE: every layer full attention, no shared expert."""
    h, n = cfg["hidden_size"], cfg["num_hidden_layers"]
    hybrid = cfg["model_type"] == "qwen3_next"
    types = ["full_attention"] * n if not hybrid else cfg.get("layer_types") or [
        "full_attention" if (i + 1) % cfg.get("full_attention_interval", 4) == 0
        else "linear_attention" for i in range(n)]
    full, full_act, kv = _attention(cfg)
    lin, lin_act, state = _linear_attention(cfg) if hybrid else (0, 0, 0)
    experts, k = cfg["num_experts"], cfg["num_experts_per_tok"]
    expert, expert_act = _mlp(h, cfg["moe_intermediate_size"])
    shared, shared_act = _mlp(h, cfg["shared_expert_intermediate_size"]) if hybrid else (0, 0)
    dense, dense_act = _mlp(h, cfg["intermediate_size"])
    # experts, shared expert, router, the shared expert's gate (Next only)
    moe = experts * expert + shared + h * experts + (h if hybrid else 0)
    moe_act = k * expert_act + shared_act + 4 * experts  # routed tokens' MLPs, fp32 router logits
    sparse = [i not in cfg.get("mlp_only_layers", []) and (i + 1) % cfg.get(
        "decoder_sparse_step", 1) == 0 for i in range(n)]
    params, acts = [], []
    for t, s in zip(types, sparse, strict=True):
        mixer, mixer_act = (full, full_act) if t == "full_attention" else (lin, lin_act)
        mlp, mlp_act = (moe, moe_act) if s else (dense, dense_act)
        params.append(mixer + mlp + h)
        acts.append(mixer_act + mlp_act + BF16 * 2 * h)
    full_layers = types.count("full_attention")
    return _whole(cfg, params, acts, kv * full_layers, state * (n - full_layers))


def _whole(cfg: dict[str, Any], layers: list[int], acts: list[int], kv: int, state: int) -> Shape:
    h, vocab = cfg["hidden_size"], cfg["vocab_size"]
    embed = vocab * h
    head = 0 if cfg.get("tie_word_embeddings", False) else vocab * h
    return Shape(params=sum(layers) + embed + head + h, layer_params=max(layers),
                 embed_params=embed, layers=len(layers), hidden=h,
                 heads=cfg["num_attention_heads"], kv_heads=cfg["num_key_value_heads"],
                 act_bytes_per_token=sum(acts), layer_act_bytes_per_token=max(acts),
                 kv_bytes_per_token=kv, state_bytes_per_seq=state,
                 max_position_embeddings=cfg["max_position_embeddings"])
