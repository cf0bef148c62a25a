"""`TinyModelConfig`, the size and seed of a tiny Qwen3, apart from the model code.

The workflow's parse-time checks validate `models.*.sft.model` blocks against it, and importing
`repro.models.tiny` would load torch and transformers for that; `repro.models.tiny` re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_POSITIVE_INTS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "max_position_embeddings",
)


@dataclass
class TinyModelConfig:
    """Size and seed of a tiny Qwen3 model (defaults: ~81k parameters).

    Every field carries TRL-style ``help`` metadata for argument parsers.
    """

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
        default=128, metadata={"help": "Hidden width of the SwiGLU MLP."}
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

    def __post_init__(self) -> None:
        for name in _POSITIVE_INTS:
            value = getattr(self, name)
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
