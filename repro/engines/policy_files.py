"""A sharded (FSDP2) policy written as a Hugging Face folder by every process, file by file
(issue 42, item 5), instead of gathered whole on one process and written by it.

What a process holds under FSDP2 is a slice of every tensor; a Hugging Face file holds whole
tensors under the names `save_pretrained` writes (transformers reverses its load-time
conversions on save: Qwen3-MoE / Qwen3-Next keep their experts fused in memory, `mlp.experts.
gate_up_proj`, and save them one by one, `mlp.experts.E.gate_proj.weight`). So the folder is cut
into one file per decoder layer plus one for the rest (embeddings, final norm, head), and each
file has an owning process (file i: process i mod world). For each file in turn every process
takes part in gathering its tensors (one decoder layer at a time, what FSDP2 gathers for a
forward anyway); the owner alone keeps them, on CPU, reverses transformers' conversions with
transformers' own `revert_weight_conversion` (as `save_pretrained` does) and writes the file;
the main process then writes `config.json` and the index. No process ever holds more than one
layer's full tensors, and the writing is spread over the processes.

Why not torch.distributed.checkpoint's `HuggingFaceStorageWriter` (torch 2.13 ships it, with
consolidation into safetensors on every rank): it writes the module's own tensor names (the
fused experts), not the per-expert names `save_pretrained` writes and Hub checkpoints carry, and
its consolidation copies bytes with no hook to reverse transformers' conversions; a second
read-convert-write pass would double the I/O of the experts (~97% of the 80B's bytes). Why not
accelerate's `save_model` / `get_state_dict`: under FSDP2 it gathers the full state dict, the
whole model on the main process, which is what this replaces.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import torch

LAYER = re.compile(r"^model\.layers\.(\d+)\.")
INDEX = "model.safetensors.index.json"


def file_of(name: str, layers: int) -> str:
    """The file a state-dict key goes to: one per decoder layer, the rest in the last one."""
    found = LAYER.match(name)
    index = int(found.group(1)) if found else layers
    return f"model-{index + 1:05d}-of-{layers + 1:05d}.safetensors"


def save_sharded_policy(model: torch.nn.Module, folder: Path) -> list[str]:
    """Every process calls this (the gathers are collective): `model` (FSDP2-sharded, or whole
    on every process) written to `folder` as `save_pretrained` would, in its parameters' dtype,
    each file by its owning process; `folder` is complete when every process has returned.
    Returns the weight files this process wrote."""
    import torch.distributed as dist
    from safetensors.torch import save_file
    from torch.distributed.checkpoint.state_dict import get_model_state_dict
    from torch.distributed.tensor import DTensor
    from transformers.core_model_loading import revert_weight_conversion
    from transformers.modeling_utils import remove_tied_weights_from_state_dict

    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = remove_tied_weights_from_state_dict(get_model_state_dict(model), model)
    layers = model.config.num_hidden_layers
    files: dict[str, list[str]] = {}
    for name in state:  # the same order on every process: the module's
        files.setdefault(file_of(name, layers), []).append(name)
    weight_map, total, written = {}, 0, []
    for i, (filename, names) in enumerate(sorted(files.items())):
        owner = i % world == rank
        whole = {}
        for name in names:
            tensor = state[name]
            full = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor  # collective
            if owner:
                whole[name] = full.detach().to("cpu").contiguous()
            del full
        if not owner:
            continue
        whole = {k: v.contiguous() for k, v in revert_weight_conversion(model, whole).items()}
        save_file(whole, str(folder / filename), metadata={"format": "pt"})
        weight_map |= dict.fromkeys(whole, filename)
        written.append(filename)
        total += sum(v.numel() * v.element_size() for v in whole.values())
        del whole
    parts: list[Any] = [None] * world if world > 1 else [(weight_map, total)]
    if world > 1:
        dist.all_gather_object(parts, (weight_map, total))
    if rank == 0:
        write_config(model, folder, state)
        index = {"metadata": {"total_size": sum(t for _, t in parts)},
                 "weight_map": dict(sorted(m for part, _ in parts for m in part.items()))}
        (folder / INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    if world > 1:
        dist.barrier()
    return written


def write_config(model: torch.nn.Module, folder: Path, state: dict[str, Any]) -> None:
    """config.json (its dtype: the weights') and generation_config.json, as save_pretrained."""
    dtypes = {t.dtype for t in state.values() if t.is_floating_point()}
    config = copy.deepcopy(model.config)  # the training model's own stays as it is
    if len(dtypes) == 1:
        config.dtype = dtypes.pop()
    config.save_pretrained(folder)
    if getattr(model, "generation_config", None) is not None and model.can_generate():
        model.generation_config.save_pretrained(folder)
