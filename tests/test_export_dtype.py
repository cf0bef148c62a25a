"""Exports in the dtype the run started from (issue 42, item 5): the TRL engine trains float32
masters, and `export_run` writes each budget-fraction policy as `save_pretrained` of the start's
architecture in the start's dtype writes it (tensor names and dtypes), shard by shard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from train_helpers import hashed_rewards

from repro.engines.registry import train
from repro.models import TinyModelConfig, build_tiny, load
from repro.training import rollout
from repro.training.config import TrainConfig
from repro.training.export import export_run


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
def test_export_matches_save_pretrained_of_the_start(arch, dtype, tmp_path, monkeypatch):
    pytest.importorskip("trl")
    monkeypatch.setattr(rollout.Rewarder, "__call__", hashed_rewards)
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
