"""The tiny MoE architectures (issue 42): `build_tiny` makes transformers' own Qwen3-MoE and
Qwen3-Next classes with the paper model's options, and bad architecture keys are refused at
parse time in one line naming the key."""

from __future__ import annotations

import pytest
import torch
import yaml
from transformers import Qwen3MoeForCausalLM, Qwen3NextForCausalLM

from repro.models import TinyModelConfig, build_tiny, load
from repro.pipeline.checks import check_dataclass_blocks

NEXT = {"architecture": "qwen3_next", "num_hidden_layers": 4}


def test_qwen3_moe_builds_with_routing_and_aux_loss(tmp_path):
    model, tok = build_tiny(TinyModelConfig(architecture="qwen3_moe"), tmp_path / "m")
    assert isinstance(model, Qwen3MoeForCausalLM)
    c = model.config
    assert (c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size) == (8, 2, 32)
    assert c.router_aux_loss_coef == 0.001 and c.decoder_sparse_step == 1
    ids = tok(["<|im_start|>user\n12+7<|im_end|>\n"] * 3, return_tensors="pt")
    out = model(**ids, labels=ids["input_ids"], output_router_logits=True)
    assert out.aux_loss is not None and float(out.aux_loss) > 0
    out.loss.backward()
    router = model.model.layers[0].mlp.gate.weight
    assert router.grad is not None and float(router.grad.abs().sum()) > 0


def test_qwen3_next_layout_shared_expert_and_reload(tmp_path):
    model, tok = build_tiny(TinyModelConfig(**NEXT), tmp_path / "n")
    assert isinstance(model, Qwen3NextForCausalLM)
    c = model.config
    assert c.layer_types == ["linear_attention"] * 3 + ["full_attention"]
    assert c.shared_expert_intermediate_size == 32 and c.num_experts == 8
    assert hasattr(model.model.layers[0], "linear_attn")
    assert hasattr(model.model.layers[3], "self_attn")
    assert model.model.layers[0].mlp.shared_expert is not None
    ids = tok(["<|im_start|>user\n1+1<|im_end|>\n", "a"], return_tensors="pt", padding=True)
    with torch.no_grad():
        expected = model(**ids).logits
    loaded, _ = load(tmp_path / "n")
    assert isinstance(loaded, Qwen3NextForCausalLM) and loaded.dtype == torch.float32
    with torch.no_grad():  # the padded row differs at 1e-8 (another expert kernel order)
        torch.testing.assert_close(loaded(**ids).logits, expected, atol=1e-6, rtol=0)


def test_moe_seed_determinism():
    a, _ = build_tiny(TinyModelConfig(**NEXT))
    b, _ = build_tiny(TinyModelConfig(**NEXT))
    c, _ = build_tiny(TinyModelConfig(**NEXT, seed=1))
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_dense_default_unchanged():
    cfg = TinyModelConfig()
    assert cfg.architecture == "qwen3" and cfg.num_experts is None
    model, _ = build_tiny(cfg)
    assert sum(p.numel() for p in model.parameters()) == 80768  # the documented ~81k


@pytest.mark.parametrize(("model", "message"), [
    ({"num_experts": 8}, "TinyModelConfig.num_experts is a qwen3_moe/qwen3_next option, not one "
                         "of architecture 'qwen3'"),
    ({"architecture": "qwen3_moe", "full_attention_interval": 2},
     "TinyModelConfig.full_attention_interval is a qwen3_next option"),
    ({"architecture": "qwen3_moe", "num_experts": 4, "num_experts_per_tok": 5},
     "TinyModelConfig.num_experts_per_tok (5) must be <= num_experts (4)"),
    ({**NEXT, "full_attention_interval": 5},
     "TinyModelConfig.full_attention_interval (5) must be <= num_hidden_layers (4)"),
    ({"architecture": "qwen3_next"},  # 2 layers, interval 4: no full-attention layer
     "TinyModelConfig.full_attention_interval (4) must be <= num_hidden_layers (2)"),
    ({"architecture": "mixtral"}, "TinyModelConfig.architecture must be one of"),
    ({"architecture": "qwen3_moe", "router_aux_loss_coef": -1.0},
     "TinyModelConfig.router_aux_loss_coef must be a finite number >= 0"),
])
def test_bad_architecture_keys_refused_at_parse_time(model, message):
    config = yaml.safe_load(
        "train: {}\nalgorithms: {grpo: {algorithm: grpo}}\n"
        "models: {tiny-x: {source: sft, sft: {steps: 10, warmup: 1}}}\n")
    config["models"]["tiny-x"]["sft"]["model"] = model
    with pytest.raises(ValueError) as info:
        check_dataclass_blocks(config)
    text = str(info.value)
    assert text.startswith("config models.tiny-x.sft: ") and message in text, text
    assert "\n" not in text


def test_shipped_moe_entries_parse():
    from pathlib import Path

    config = yaml.safe_load((Path(__file__).parents[1] / "config" / "config.yaml").read_text())
    check_dataclass_blocks(config)
    models = config["models"]
    assert models["tiny-next-base"]["sft"]["model"]["architecture"] == "qwen3_next"
    assert models["tiny-moe-base"]["sft"]["model"]["architecture"] == "qwen3_moe"
    assert models["tiny-next"]["base"] == "tiny-next-base"
    assert models["tiny-next-base"]["sft"]["steps"] == models["tiny-base"]["sft"]["steps"]
