"""Exports in the dtype the run started from (issue 42, item 5): the TRL engine trains float32
masters, and `export_run` writes each budget-fraction policy as `save_pretrained` of the start's
architecture in the start's dtype writes it (tensor names and dtypes), shard by shard. Under
FSDP2 the policy folders themselves are written file by file by the processes owning the files
(`repro.engines.policy_files`), never gathered whole: on 2 gloo processes the folder equals the
1-process `save_pretrained` tensor by tensor, for the dense model and Qwen3-Next (whose fused
experts are saved one by one, as transformers does)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from repro.bench.twin import tiny_bf16_model
from repro.engines.registry import train
from repro.models import TinyModelConfig, build_tiny, load
from repro.training.config import TrainConfig
from repro.training.export import copy_policy, export_run


def tensors(folder: Path) -> dict[str, str]:
    """Tensor name -> safetensors dtype tag (BF16, F32) over the folder's shards."""
    out = {}
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(path, "pt") as f:
            out |= {name: f.get_slice(name).get_dtype() for name in f.keys()}  # noqa: SIM118
    return out


TAGS = {torch.bfloat16: "BF16", torch.float32: "F32"}


@pytest.mark.parametrize(("arch", "dtype"), [("qwen3", torch.bfloat16),
                                             ("qwen3_next", torch.float32)])
def test_export_matches_save_pretrained_of_the_start(arch, dtype, tmp_path, hashed):
    pytest.importorskip("trl")
    kw = {"num_hidden_layers": 4} if arch == "qwen3_next" else {}
    model, tok = build_tiny(TinyModelConfig(architecture=arch, hidden_size=32, head_dim=8, **kw))
    start = tmp_path / "start"
    model.to(dtype).save_pretrained(start)  # what a user's checkpoint of this dtype holds
    tok.save_pretrained(start)
    cfg = TrainConfig(model=str(start), engine="trl", steps=2, prompts_per_step=4, group_size=4,
                      minibatches=2, max_new_tokens=8, probe_n=2, checkpoint_every=0,
                      checkpoint_fractions=[0.5, 1.0], lr=1e-3)
    train(cfg, tmp_path / "scratch")
    dest = export_run(tmp_path / "scratch", tmp_path / "run")
    want = tensors(start)
    assert set(want.values()) == {TAGS[dtype]}
    final = load(tmp_path / "scratch" / "final")[0]
    assert final.dtype == torch.float32  # the masters, kept for resume
    for frac in ("0.5", "1.0"):
        policy = dest / "policy" / f"frac={frac}"
        assert tensors(policy) == want
        assert json.loads((policy / "config.json").read_text())["dtype"] == str(dtype)[6:]
        loaded = load(policy)[0]  # dtype="auto": from_pretrained reads the export's dtype
        assert loaded.dtype == dtype
    exported = dict(loaded.named_parameters())
    for name, param in final.named_parameters():
        assert torch.equal(exported[name], param.detach().to(dtype)), name


def values(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return {k: v for path in sorted(folder.glob("*.safetensors"))
            for k, v in load_file(path).items()}


@pytest.mark.slow
@pytest.mark.parametrize("model", ["tiny", "tiny-next"])
def test_two_processes_write_what_save_pretrained_writes(model, tmp_path):
    """tests/sharded_policy_worker.py: the model sharded by FSDP2 on 2 gloo processes, written by
    `save_sharded_policy`; against the same weights' 1-process `save_pretrained`."""
    from transformers import AutoModelForCausalLM

    start = tiny_bf16_model(tmp_path / "start", model=model)
    sharded = tmp_path / "sharded"
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[1]),
                                           os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
           "2", str(Path(__file__).with_name("sharded_policy_worker.py")), str(start), str(sharded)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    one = load(start, dtype=torch.float32)[0]  # the float32 masters, one process
    one.save_pretrained(tmp_path / "one")
    assert tensors(sharded) == tensors(tmp_path / "one")  # names and dtypes (F32)
    got, want = values(sharded), values(tmp_path / "one")
    for name, tensor in want.items():
        assert torch.equal(got[name], tensor), name
    if model == "tiny-next":  # the experts one by one, as save_pretrained and vLLM's loader want
        assert "model.layers.0.mlp.experts.7.gate_proj.weight" in got
    written = [set(json.loads((sharded / f"written-{r}.json").read_text())) for r in (0, 1)]
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    assert written[0] and written[1] and not written[0] & written[1]  # each file by one process
    assert written[0] | written[1] == set(index["weight_map"].values())
    assert set(index["weight_map"]) == set(want)
    reloaded = AutoModelForCausalLM.from_pretrained(sharded, dtype="auto")
    assert reloaded.dtype == torch.float32
    mine = one.state_dict()
    for name, tensor in reloaded.state_dict().items():
        assert torch.equal(tensor, mine[name]), name
    (tmp_path / "export").mkdir()
    copy_policy(sharded, tmp_path / "export", "bfloat16")  # what export_run makes of it
    one.to(torch.bfloat16).save_pretrained(tmp_path / "one-bf16")
    assert tensors(tmp_path / "export") == tensors(tmp_path / "one-bf16")
    got, want = values(tmp_path / "export"), values(tmp_path / "one-bf16")
    assert all(torch.equal(got[name], tensor) for name, tensor in want.items())
