"""Run by torchrun from tests/test_export_dtype.py: load START in float32 on every process,
shard it with FSDP2 (one unit per decoder layer, then the root, as the paper preset wraps) over
gloo, run a no-grad forward (the engine's probes do before a checkpoint) and write it with
`save_sharded_policy` into OUT; each process records the files it wrote in OUT/written-RANK.json."""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from repro.engines.policy_files import save_sharded_policy
from repro.models import load

start, out = Path(sys.argv[1]), Path(sys.argv[2])
dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
model = load(start, dtype=torch.float32)[0]
for layer in model.model.layers:
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
assert all(hasattr(p, "to_local") for p in model.parameters())  # sharded: DTensors
with torch.no_grad():  # as the engine's probes run before a checkpoint: FSDP2 leaves the root
    model(input_ids=torch.arange(8).view(1, -1))  # module's parameters unsharded after this
written = save_sharded_policy(model, out)
(out / f"written-{dist.get_rank()}.json").write_text(json.dumps(written))
dist.destroy_process_group()
