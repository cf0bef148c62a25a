"""The presets' `models.*.config` blocks are refused at parse time by the tiny catalogue's rules
(issue 48, item 6): MoE keys on a dense model, top-k above the experts, a Qwen3-Next layout with
no full-attention layer, and any field transformers' config class does not know, each in one
line naming the key. Without the check each passed `repro plan` and failed on the GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from repro.cli import app
from repro.models.hub_config import check_config_fields, known_fields
from repro.plan import load_config, plan_jobs

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "config" / "config.yaml"
P32 = ROOT / "config" / "presets" / "paper-qwen3-32b.yaml"
P80 = ROOT / "config" / "presets" / "paper-qwen3-next-80b.yaml"

BAD = [  # (preset, model key, config overlay, the key the refusal names, its message)
    (P32, "qwen3-32b", {"num_experts": 8}, "num_experts",
     "is a qwen3_moe/qwen3_next option, not one of architecture 'qwen3'"),
    (P32, "qwen3-32b", {"full_attention_interval": 4}, "full_attention_interval",
     "is a qwen3_next option"),
    (P32, "qwen3-32b", {"hidden_sise": 5120}, "hidden_sise",
     "is not a field of transformers' config class for qwen3"),
    (P80, "qwen3-next-80b", {"num_experts_per_tok": 600}, "num_experts_per_tok",
     "(600) must be <= num_experts (512)"),
    (P80, "qwen3-next-80b", {"full_attention_interval": 64}, "full_attention_interval",
     "(64) must be <= num_hidden_layers (48)"),
    (P80, "qwen3-next-80b", {"linear_num_key_head": 16}, "linear_num_key_head",
     "is not a field of transformers' config class for qwen3_next"),
]
IDS = ["moe-key-on-dense", "next-key-on-dense", "typo-dense", "topk-above-experts",
       "next-no-full-layer", "typo-next"]


@pytest.mark.parametrize(("preset", "key", "overlay", "field", "message"), BAD, ids=IDS)
def test_repro_plan_refuses_the_key_in_one_line(tmp_path, preset, key, overlay, field, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"models": {key: {"config": overlay}}}))
    with pytest.raises(ValueError, match=rf"^config models\.{key}\.config\.{field} "):
        plan_jobs(load_config(BASE, [preset, bad]))
    result = CliRunner().invoke(app, ["plan", "--configfile", str(preset), "--configfile",
                                      str(bad), "--base", str(BASE)])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert result.output.startswith(f"repro plan: config models.{key}.config.{field} ")
    assert message in result.output, result.output


@pytest.mark.parametrize("preset", [P32, P80], ids=["32b", "80b"])
def test_the_presets_own_configs_pass(preset):
    key, entry = next(iter(yaml.safe_load(preset.read_text())["models"].items()))
    check_config_fields(entry["config"], f"config models.{key}.config")


def test_consumed_legacy_keys_are_known():
    """config.json's own legacy spellings (torch_dtype, rope_theta) are read by transformers."""
    check_config_fields({"model_type": "qwen3", "torch_dtype": "bfloat16", "rope_theta": 1e6},
                        "x")


def test_tiny_catalogue_and_presets_share_the_rule():
    """The same routing rule refuses the tiny catalogue's model and a preset's config."""
    from repro.models.tiny_config import TinyModelConfig

    with pytest.raises(ValueError, match=r"^TinyModelConfig\.num_experts_per_tok \(5\) must be"):
        TinyModelConfig(architecture="qwen3_moe", num_experts=4, num_experts_per_tok=5)
    with pytest.raises(ValueError, match=r"^cfg\.num_experts_per_tok \(5\) must be <= num_"):
        check_config_fields({"model_type": "qwen3_moe", "num_experts": 4,
                             "num_experts_per_tok": 5}, "cfg")


def test_next_layer_types_need_a_full_attention_layer():
    """An explicit layout is checked as transformers reads it; beside it the interval is ignored
    by transformers, so it is refused as unknown."""
    cfg = {k: v for k, v in next(iter(yaml.safe_load(P80.read_text())["models"].values()))[
        "config"].items() if k != "full_attention_interval"}
    with pytest.raises(ValueError, match=r"^m\.layer_types has no 'full_attention' layer"):
        check_config_fields(cfg | {"layer_types": ["linear_attention"] * 48}, "m")
    check_config_fields(cfg | {"layer_types": ["linear_attention", "full_attention"] * 24}, "m")
    with pytest.raises(ValueError, match=r"^m\.full_attention_interval is not a field"):
        check_config_fields(cfg | {"layer_types": ["full_attention"] * 48,
                                   "full_attention_interval": 4}, "m")


@pytest.mark.parametrize("model_type", ["qwen3", "qwen3_moe", "qwen3_next"])
def test_fields_read_from_source_are_the_classes(model_type):
    """The parse reads transformers' source (no import, no torch); its reading equals the
    classes' own dataclass fields and defaults, and every key it calls consumed is consumed."""
    import dataclasses

    from transformers import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    known, consumed = known_fields(model_type)
    real = {f.name: f.default for f in dataclasses.fields(cls)}
    assert set(real) | set(cls.attribute_map) == set(known)
    for name in ("num_experts", "num_experts_per_tok", "num_hidden_layers"):
        if name in real:
            assert known[name] == real[name]
    for key in {"torch_dtype", "rope_theta"} | ({"full_attention_interval"}
                                                if model_type == "qwen3_next" else set()):
        assert key in consumed
        assert key not in vars(cls(**{key: {"torch_dtype": "float32"}.get(key, 4)}))
