"""`load_for_sharding`: big models without a full CPU copy per process. Non-main processes
build the architecture on the meta device; accelerate's FSDP2 prepare
(`cpu_ram_efficient_loading`) fills their shards from the main process's weights."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from repro.models import TinyModelConfig, build_tiny, load, load_for_sharding


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tiny") / "model"
    build_tiny(TinyModelConfig(hidden_size=32, head_dim=8, intermediate_size=64), path)
    return path


@pytest.mark.parametrize("dtype", ["auto", torch.bfloat16])
def test_non_main_process_holds_no_weights_but_the_same_model(tiny, dtype):
    full, tok = load(tiny, dtype=dtype)
    empty, tok2 = load_for_sharding(tiny, main_process=False, dtype=dtype)
    assert {p.device.type for p in empty.parameters()} == {"meta"}
    want = {k: (v.shape, v.dtype) for k, v in full.state_dict().items()}
    assert {k: (v.shape, v.dtype) for k, v in empty.state_dict().items()} == want
    for (name, buf), (_, ref) in zip(empty.named_buffers(), full.named_buffers(), strict=True):
        assert buf.device.type == "cpu" and torch.equal(buf, ref), name  # e.g. RoPE inv_freq
    assert empty.lm_head.weight is empty.model.embed_tokens.weight  # tied as in the checkpoint
    assert empty.generation_config.to_dict() == full.generation_config.to_dict()
    assert empty.config.to_dict() == full.config.to_dict()
    assert not empty.training and tok2.get_vocab() == tok.get_vocab()
    main, _ = load_for_sharding(tiny, main_process=True, dtype=dtype)
    assert all(torch.equal(a, b) for a, b in zip(main.state_dict().values(),
                                                 full.state_dict().values(), strict=True))


def test_missing_path_is_named():
    with pytest.raises(FileNotFoundError, match="no/such/dir/x"):
        load_for_sharding("no/such/dir/x", main_process=False)


@pytest.mark.slow
def test_fsdp2_prepare_fills_the_meta_shards_from_rank_0(tmp_path):
    """torchrun, 2 CPU processes (gloo), accelerate's FSDP2 prepare through the CPU shim, with
    the paper presets' recipe: a bf16 checkpoint, fp32 masters, bf16 compute."""
    model, tok = build_tiny(TinyModelConfig(hidden_size=32, head_dim=8, intermediate_size=64))
    model.to(torch.bfloat16).config.dtype = torch.bfloat16
    tiny = tmp_path / "bf16"
    model.save_pretrained(tiny)
    tok.save_pretrained(tiny)
    here = Path(__file__).parent
    out = tmp_path / "loading.json"
    env = os.environ | {"OMP_NUM_THREADS": "1",
                        "PYTHONPATH": os.pathsep.join([str(here.parent), str(here)])}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_port", str(30500 + os.getpid() % 1000), str(here / "fsdp_meta_loading.py"),
         str(tiny), str(out), "bf16"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["num_processes"] == 2
    main, other = result["ranks"]
    size = (tiny / "model.safetensors").stat().st_size
    assert main["devices"] == ["cpu"] and main["cpu_param_bytes"] > 0.9 * size
    assert other["devices"] == ["meta"] and other["cpu_param_bytes"] == 0  # no CPU copy
    for rank in (main, other):
        assert rank["buffers"] == ["cpu"] and rank["dtypes"] == ["torch.bfloat16"]
        assert rank["dtensor"] and rank["after_prepare"] == ["cpu"]  # real shards everywhere
        assert rank["masters"] == ["torch.float32"]
        assert rank["state_dict_keys_equal"] and rank["state_dict_max_diff"] == 0.0
        # bf16 compute against the fp32 plain model: a few bf16 ulps (2^-8) of the logits
        assert rank["logits_max_diff"] <= 8 * 2**-8 * rank["logits_max"]
        assert rank["logits_max"] > 0.1
