"""Two-process check of `load_for_sharding`, run as
`torchrun --nproc_per_node 2 tests/fsdp_meta_loading.py MODEL_DIR OUT.json PRECISION` (gloo,
CPU; PRECISION: accelerate's mixed_precision, "no" or "bf16" = fp32 masters, bf16 compute).

Rank 0 loads the checkpoint, rank 1 builds the model on the meta device; accelerate's FSDP2
prepare with `cpu_ram_efficient_loading` then broadcasts rank 0's weights into the shards.
Measured per rank: parameter devices and the bytes of parameter storage on CPU, parameters
after prepare (DTensor shards), the gathered state dict against the checkpoint, and a sharded
forward against a plain single-process model. Accelerate refuses FSDP on CPU, so its state is
set to FSDP before `prepare` (the CPU shim of issue 17; the FSDP2 code path is accelerate's own).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist


def main(model_dir: Path, out: Path, precision: str) -> None:
    from accelerate import Accelerator, PartialState
    from accelerate.state import AcceleratorState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
    from safetensors.torch import load_file
    from torch.distributed.tensor import DTensor

    from repro.models import load, load_for_sharding

    state = PartialState(cpu=True)  # MULTI_CPU over gloo under torchrun
    model, _ = load_for_sharding(model_dir, main_process=state.is_main_process)
    mine = {"cpu_param_bytes": sum(p.untyped_storage().nbytes() for p in model.parameters()
                                   if p.device.type == "cpu"),
            "devices": sorted({p.device.type for p in model.parameters()}),
            "buffers": sorted({b.device.type for b in model.buffers()}),
            "dtypes": sorted({str(p.dtype) for p in model.parameters()})}
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2, cpu_ram_efficient_loading=True, auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["Qwen3DecoderLayer"], state_dict_type="FULL_STATE_DICT")
    accelerator = Accelerator(cpu=True, mixed_precision=precision)
    if precision != "no":  # what AcceleratorState does when it sets up FSDP itself
        plugin.set_mixed_precision(precision)
    shared = AcceleratorState()  # the CPU shim
    shared.distributed_type, shared.fsdp_plugin = DistributedType.FSDP, plugin
    assert accelerator.is_fsdp2
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)  # FSDP2 prepares them together
    model, optimizer = accelerator.prepare(model, optimizer)
    params = list(model.parameters())
    mine["dtensor"] = all(isinstance(p, DTensor) for p in params)
    mine["after_prepare"] = sorted({p.to_local().device.type for p in params})
    mine["masters"] = sorted({str(p.dtype) for p in params})
    full = {name: p.full_tensor() for name, p in model.named_parameters()}  # collective
    ref, _ = load(model_dir)
    want = load_file(str(model_dir / "model.safetensors"))
    mine["state_dict_max_diff"] = max(float((full[k] - w.to(full[k].dtype)).abs().max())
                                      for k, w in want.items())
    mine["state_dict_keys_equal"] = set(want) == set(full)
    ids = torch.arange(3, 19).view(2, 8)
    with torch.no_grad():
        sharded = model(input_ids=ids).logits
        plain = ref.float()(input_ids=ids).logits
    mine["logits_max_diff"] = float((sharded - plain).abs().max())
    mine["logits_max"] = float(plain.abs().max())
    ranks: list = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, mine)
    if state.is_main_process:
        out.write_text(json.dumps({"num_processes": state.num_processes, "ranks": ranks}))


if __name__ == "__main__":
    from repro.engines.fsdp import close_process_group

    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
    close_process_group()
