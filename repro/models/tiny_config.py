"""`TinyModelConfig`, the size, architecture and seed of a tiny Qwen3, apart from the model code.

The workflow's parse-time checks validate `models.*.sft.model` blocks against it, and importing
`repro.models.tiny` would load torch and transformers for that; `repro.models.tiny` re-exports it.

Three architectures, each transformers' own class (`repro.models.tiny.build_tiny`): dense
Qwen3 (the tiny default), Qwen3-MoE (top-k routed experts with a router load-balancing loss)
and Qwen3-Next (the paper's 80B-A3B: Gated DeltaNet linear attention with one full-attention
layer every `full_attention_interval`, routed experts plus a shared expert). The MoE fields are
None on a dense model and filled with `MOE_DEFAULTS` on the others, so an MoE key set on a dense
model, or a Next key on Qwen3-MoE, is an error rather than silently ignored.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

ARCHITECTURES = ("qwen3", "qwen3_moe", "qwen3_next")

_POSITIVE_INTS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "max_position_embeddings",
)

# The MoE fields, the architectures that take each, and their tiny defaults: 8 experts of
# width 32, top-2, the 80B's router coefficient 0.001 and its layer layout (3 linear-attention
# layers, then a full-attention one).
MOE_DEFAULTS: dict[str, tuple[tuple[str, ...], int | float]] = {
    "num_experts": (("qwen3_moe", "qwen3_next"), 8),
    "num_experts_per_tok": (("qwen3_moe", "qwen3_next"), 2),
    "moe_intermediate_size": (("qwen3_moe", "qwen3_next"), 32),
    "router_aux_loss_coef": (("qwen3_moe", "qwen3_next"), 0.001),
    "shared_expert_intermediate_size": (("qwen3_next",), 32),
    "full_attention_interval": (("qwen3_next",), 4),
}


@dataclass
class TinyModelConfig:
    """Size, architecture and seed of a tiny Qwen3 model (defaults: dense, ~81k parameters).

    Every field carries TRL-style ``help`` metadata for argument parsers.
    """

    architecture: str = field(default="qwen3", metadata={
        "help": "qwen3 (dense), qwen3_moe (routed experts) or qwen3_next (linear attention + "
                "routed and shared experts, the paper's 80B-A3B)."})
    hidden_size: int = field(default=64, metadata={"help": "Width of the residual stream."})
    num_hidden_layers: int = field(default=2, metadata={"help": "Number of decoder layers."})
    num_attention_heads: int = field(default=4, metadata={"help": "Number of query heads."})
    num_key_value_heads: int = field(
        default=2, metadata={"help": "Key/value heads (GQA); must divide num_attention_heads."}
    )
    head_dim: int = field(
        default=16, metadata={"help": "Per-head dimension; must be even for RoPE."}
    )
    intermediate_size: int = field(
        default=128, metadata={"help": "Hidden width of the dense SwiGLU MLP (qwen3)."}
    )
    max_position_embeddings: int = field(
        default=1024, metadata={"help": "Longest sequence (prompt + completion) accepted."}
    )
    rope_theta: float = field(
        default=1_000_000.0, metadata={"help": "RoPE base frequency (Qwen3 uses 1e6)."}
    )
    tie_word_embeddings: bool = field(
        default=True, metadata={"help": "Share the input-embedding and LM-head weights."}
    )
    seed: int = field(default=0, metadata={"help": "Torch seed for the random weight init."})
    num_experts: int | None = field(default=None, metadata={
        "help": "qwen3_moe/qwen3_next: routed experts per layer (null = 8)."})
    num_experts_per_tok: int | None = field(default=None, metadata={
        "help": "qwen3_moe/qwen3_next: top-k experts per token, <= num_experts (null = 2)."})
    moe_intermediate_size: int | None = field(default=None, metadata={
        "help": "qwen3_moe/qwen3_next: hidden width of each expert's SwiGLU (null = 32)."})
    router_aux_loss_coef: float | None = field(default=None, metadata={
        "help": "qwen3_moe/qwen3_next: the architecture's router load-balancing coefficient, "
                "recorded in config.json (null = 0.001, Qwen3-Next-80B's); training reads it "
                "unless TrainConfig.router_aux_loss_coef overrides it."})
    shared_expert_intermediate_size: int | None = field(default=None, metadata={
        "help": "qwen3_next: hidden width of the shared expert every token goes through "
                "(null = 32)."})
    full_attention_interval: int | None = field(default=None, metadata={
        "help": "qwen3_next: every this-many-th layer is full attention, the others Gated "
                "DeltaNet linear attention; <= num_hidden_layers (null = 4)."})

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ValueError(f"TinyModelConfig.architecture must be one of {ARCHITECTURES}, "
                             f"got {self.architecture!r}")
        check_architecture_keys(self.architecture, {
            n: getattr(self, n) for n in MOE_DEFAULTS if getattr(self, n) is not None},
            "TinyModelConfig")
        for name, (takers, default) in MOE_DEFAULTS.items():
            if self.architecture in takers and getattr(self, name) is None:
                setattr(self, name, default)
        ints = [n for n in MOE_DEFAULTS if n != "router_aux_loss_coef"]
        for name in (*_POSITIVE_INTS, *ints):
            value = getattr(self, name)
            if value is None and name in MOE_DEFAULTS:
                continue
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"TinyModelConfig.{name} must be an int, got {value!r}")
            if value <= 0:
                raise ValueError(f"TinyModelConfig.{name} must be > 0, got {value}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"TinyModelConfig.num_key_value_heads ({self.num_key_value_heads}) must divide "
                f"TinyModelConfig.num_attention_heads ({self.num_attention_heads})"
            )
        if self.head_dim % 2:
            raise ValueError(
                f"TinyModelConfig.head_dim must be even (RoPE rotates pairs), got {self.head_dim}"
            )
        if not self.rope_theta > 0:
            raise ValueError(f"TinyModelConfig.rope_theta must be > 0, got {self.rope_theta}")
        if not isinstance(self.tie_word_embeddings, bool):
            raise TypeError(
                "TinyModelConfig.tie_word_embeddings must be a bool, "
                f"got {self.tie_word_embeddings!r}"
            )
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"TinyModelConfig.seed must be an int >= 0, got {self.seed!r}")
        if self.architecture != "qwen3":
            self._check_moe()

    def _check_moe(self) -> None:
        """Routing and layer-layout rules of the MoE architectures."""
        coef = self.router_aux_loss_coef
        if isinstance(coef, bool) or not isinstance(coef, (int, float)) or not 0 <= coef < 1e9:
            raise ValueError(f"TinyModelConfig.router_aux_loss_coef must be a finite number >= 0, "
                             f"got {coef!r}")
        check_moe_layout(vars(self), "TinyModelConfig")


def check_architecture_keys(architecture: str, keys: Iterable[str] | dict, where: str) -> None:
    """Refuse an MoE key (`MOE_DEFAULTS`) on an architecture that does not take it (transformers
    would keep it as an ignored attribute): the tiny catalogue's and the presets' one rule."""
    values = keys if isinstance(keys, dict) else dict.fromkeys(keys)
    for name, (takers, _) in MOE_DEFAULTS.items():
        if name in values and architecture not in takers:
            got = "" if values[name] is None else f", got {values[name]!r}"
            raise ValueError(f"{where}.{name} is a {'/'.join(takers)} option, not one of "
                             f"architecture {architecture!r}{got}")


def check_moe_layout(values: dict[str, Any], where: str) -> None:
    """Top-k within the experts, and at least one full-attention layer (Qwen3-Next): both pass
    transformers' config and fail at the first forward (`selected index k out of range`,
    `get_mask_sizes`). `values`: the config's fields with its defaults filled; `layer_types`,
    when set, is the layout, else every `full_attention_interval`-th layer is full attention."""
    k, experts = values.get("num_experts_per_tok"), values.get("num_experts")
    if k is not None and experts is not None and k > experts:
        raise ValueError(f"{where}.num_experts_per_tok ({k}) must be <= num_experts ({experts})")
    layers, interval = values.get("num_hidden_layers"), values.get("full_attention_interval")
    types = values.get("layer_types")
    if types is not None:
        if "full_attention" not in types:
            raise ValueError(f"{where}.layer_types has no 'full_attention' layer (the model's "
                             "masks and KV cache need one)")
    elif interval is not None and layers is not None and interval > layers:
        raise ValueError(
            f"{where}.full_attention_interval ({interval}) must be <= "
            f"num_hidden_layers ({layers}): else no layer is full attention")
