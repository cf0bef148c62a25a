"""A randomly initialised model of any shape transformers knows, from a `config.json`'s fields,
with the tiny character tokenizer: the start of a rehearsal (config `models.KEY.source: init`).

The paper presets declare their hub model's config.json fields for the planner; a rehearsal
overlay shrinks the shape keys, and this builds exactly that config with transformers' own
classes (`AutoConfig.for_model`, `AutoModelForCausalLM.from_config`), so what trains is the
paper model's architecture (Qwen3, Qwen3-Next: layer layout, experts, top-k, shared expert) at
the planner's shape: its parameter count is the one `repro plan` prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

from repro.atomic import atomic_dir
from repro.models.tokenizer import build_tokenizer


def build_from_config(fields: dict[str, Any], out_dir: str | Path, seed: int = 0) -> int:
    """Write a seeded random model of `fields` (a config.json's fields, `model_type` included)
    and the tiny tokenizer to `out_dir`, in the dtype `fields` records (`dtype` or the older
    `torch_dtype`; float32 when none, transformers' default). Returns its parameter count.

    Raises ValueError (one line naming the key) when the vocabulary cannot hold the tokenizer's
    ids or transformers refuses the config.
    """
    fields = dict(fields)
    dtype = str(fields.pop("dtype", None) or fields.pop("torch_dtype", None) or "float32")
    model_type = fields.pop("model_type", None)
    if model_type is None:
        raise ValueError("config lacks 'model_type' (the architecture to build)")
    tok = build_tokenizer(model_max_length=int(fields.get("max_position_embeddings", 1024)))
    if int(fields.get("vocab_size", 0)) < len(tok):
        raise ValueError(f"config vocab_size={fields.get('vocab_size')} is below the tiny "
                         f"tokenizer's {len(tok)} ids; set it to {len(tok)}")
    special = {"pad_token_id": tok.pad_token_id, "eos_token_id": tok.eos_token_id,
               "bos_token_id": None}
    try:
        config = AutoConfig.for_model(model_type, **fields, **special, dtype=dtype)
    except (ValueError, TypeError, KeyError) as err:
        raise ValueError(f"config (model_type {model_type!r}): {err}") from None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.generation_config = GenerationConfig(**special)

    def save(folder: Path) -> None:
        model.save_pretrained(folder)
        tok.save_pretrained(folder)

    atomic_dir(Path(out_dir), save)
    return sum(p.numel() for p in model.parameters())
