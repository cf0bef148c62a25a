"""The memory planner (repro/plan): shapes against transformers' own modules, the 32B weight and
AdamW figures against hand arithmetic, the paper presets fit, and each way of breaking them is
refused in one line naming the key, by `repro plan` and by the workflow at parse time."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from repro.cli import app
from repro.plan import PlanRefusal, load_config, plan_jobs
from repro.plan.shapes import shape_of

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "config" / "config.yaml"
P32 = ROOT / "config" / "presets" / "paper-qwen3-32b.yaml"
P80 = ROOT / "config" / "presets" / "paper-qwen3-next-80b.yaml"


def declared(preset: Path) -> dict:
    """The model shapes a paper preset declares."""
    return next(iter(yaml.safe_load(preset.read_text())["models"].values()))["config"]


def small(cfg: dict, **changes) -> dict:
    """A paper shape shrunk so a meta-device model builds in a blink (same architecture)."""
    return cfg | {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4,
                  "vocab_size": 300, "head_dim": 16} | changes


def meta_counts(cfg: dict) -> tuple[int, int]:
    """(all parameters, largest decoder layer) of transformers' model for `cfg`, on meta."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    kind = cfg["model_type"]
    config = AutoConfig.for_model(kind, **{k: v for k, v in cfg.items() if k != "model_type"})
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    layers = [sum(p.numel() for p in layer.parameters()) for layer in model.model.layers]
    return sum(p.numel() for p in model.parameters()), max(layers)


@pytest.mark.parametrize("cfg", [
    small(declared(P32)),
    small(declared(P32), tie_word_embeddings=True),
    small(declared(P80), num_experts=8, num_experts_per_tok=2, linear_num_key_heads=2,
          linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
          moe_intermediate_size=32, shared_expert_intermediate_size=48),
    small(declared(P80), num_experts=8, num_experts_per_tok=2, linear_num_key_heads=2,
          linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
          moe_intermediate_size=32, shared_expert_intermediate_size=48, mlp_only_layers=[0]),
    small(declared(P32), model_type="qwen3_moe", num_experts=8, num_experts_per_tok=2,
          moe_intermediate_size=32, decoder_sparse_step=2, mlp_only_layers=[0]),
], ids=["qwen3", "qwen3-tied", "qwen3_next", "qwen3_next-dense-layer", "qwen3_moe"])
def test_parameter_counts_equal_transformers_modules(cfg):
    shape = shape_of(cfg)
    assert (shape.params, shape.layer_params) == meta_counts(cfg)


def test_paper_shapes_are_the_published_sizes():
    assert round(shape_of(declared(P32)).params / 1e9, 1) == 32.8  # Qwen3-32B: 32.8B
    assert round(shape_of(declared(P80)).params / 1e9) == 80  # Qwen3-Next-80B-A3B
    # KV cache per token, bf16: 64 layers x (K, V) x 8 heads x 128 x 2 bytes = 256 KiB
    assert shape_of(declared(P32)).kv_bytes_per_token == 64 * 2 * 8 * 128 * 2 == 256 * 1024


def test_32b_masters_and_adamw_on_8_gpus_match_hand_arithmetic():
    # hand count of Qwen3-32B from its config.json, norms left out: embedding and untied head,
    # then per layer q (5120 x 64*128), k and v (5120 x 8*128 each), o, and the SwiGLU MLP
    h, vocab, layers, q, kv, inter = 5120, 151936, 64, 64 * 128, 8 * 128, 25600
    n = 2 * vocab * h + layers * (h * q + 2 * h * kv + q * h + 3 * h * inter)
    masters_gb, adam_gb = 4 * n / 8 / 1e9, 8 * n / 8 / 1e9  # fp32, AdamW m and v; 8 shards
    config = load_config(BASE, [P32])
    train = next(p for p in plan_jobs(config) if p.job == "train")
    update = next(ph for ph in train.phases if ph.name == "update")
    assert update.items["fp32 masters (sharded)"] == pytest.approx(masters_gb, rel=0.05)
    assert update.items["AdamW m, v fp32 (sharded)"] == pytest.approx(adam_gb, rel=0.05)
    assert masters_gb == pytest.approx(16.4, abs=0.1)  # 32.76e9 x 4 / 8


@pytest.mark.parametrize("preset", [P32, P80], ids=["32b", "80b"])
def test_paper_presets_fit_every_phase(preset):
    plans = plan_jobs(load_config(BASE, [preset]))
    assert {p.job for p in plans} == {"train", "evaluate"}
    for plan in plans:
        for phase in plan.phases:
            assert 0 < phase.total_gb <= phase.capacity_gb, (plan.job, phase)
    evaluate = next(p for p in plans if p.job == "evaluate")
    # (30 + 30 problems) x 32 x 38912 + 175 x 32 x 32768 response tokens at most
    assert evaluate.runtime_min * 60 >= (60 * 32 * 38912 + 175 * 32 * 32768) / (
        load_config(BASE, [preset])["hardware"]["eval"]["tokens_per_s"])


def test_repro_plan_prints_a_table_per_job():
    result = CliRunner().invoke(app, ["plan", "--configfile", str(P32), "--base", str(BASE)])
    assert result.exit_code == 0, result.output
    for line in ("train qwen3-32b: 1 node(s) x 8 GPUs", "evaluate qwen3-32b: 1 node(s) x 4 GPUs",
                 "rollout", "update", "DFPO pre-pass", "host memory per node",
                 "activations (checkpointed)", "vLLM (memory utilisation)"):
        assert line in result.output, result.output


MUTATIONS = [  # (preset, overlay, the key the refusal names)
    (P32, {"train": {"trl_args": {"gradient_checkpointing": False}}},
     "train.trl_args.gradient_checkpointing"),
    (P32, {"train": {"trl_args": {"use_vllm": False}}}, "train.trl_args.use_vllm"),
    (P80, {"train": {"prompts_per_step": 32}}, "train.prompts_per_step"),
    (P32, {"train": {"trl_args": {"vllm_gpu_memory_utilization": 0.95}}},
     "train.trl_args.vllm_gpu_memory_utilization"),
    (P32, {"train": {"staleness": 1}}, "train.staleness"),
]
IDS = ["no-checkpointing", "no-vllm", "80b-P32-on-16", "vllm-0.95", "stale-on-8"]


@pytest.mark.parametrize(("preset", "overlay", "key"), MUTATIONS, ids=IDS)
def test_repro_plan_refuses_naming_the_key(tmp_path, preset, overlay, key):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(overlay))
    with pytest.raises(PlanRefusal, match=rf"^config {key}[:=]"):
        plan_jobs(load_config(BASE, [preset, bad]))
    result = CliRunner().invoke(app, ["plan", "--configfile", str(preset), "--configfile",
                                      str(bad), "--base", str(BASE)])
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert result.output.startswith(f"repro plan: config {key}"), result.output


@pytest.mark.parametrize(("preset", "overlay", "key"), MUTATIONS, ids=IDS)
def test_workflow_refuses_at_parse_time_in_one_line(tmp_path, preset, overlay, key, lock):
    from test_workflow import snakemake

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(overlay))
    proc = snakemake("-n", "--nolock", "--configfile", str(preset.relative_to(ROOT)), str(bad),
                     "--config", f"data_lock={lock}")
    out = proc.stdout + proc.stderr
    own = [line for line in out.splitlines() if not line.startswith(
        ("Using workflow specific profile", "Config file config/config.yaml is extended"))]
    assert proc.returncode != 0 and len(own) == 1 and own[0].startswith(f"config {key}"), out


def test_gradient_checkpointing_reaches_grpo_config(tmp_path):
    pytest.importorskip("trl")
    from repro.engines.trl_args import build_grpo_config
    from repro.training.config import TrainConfig

    cfg = TrainConfig(model="m", engine="trl", prompts_per_step=4, group_size=2, minibatches=2,
                      trl_args={"gradient_checkpointing": True})
    args = build_grpo_config(cfg, out=tmp_path, world_size=1, steps=1, half_precision=False,
                             use_cpu=True)
    assert args.gradient_checkpointing is True


def test_kl_reference_is_planned_as_trl_instantiates_it(tmp_path):
    """kl_coef > 0: the planner's reference line (world 1) is the bytes of the reference TRL
    builds (`create_model_from_path` in the policy's fp32), on the tiny Qwen3-Next shape; with
    kl_coef 0, as in the paper presets, there is none."""
    import torch
    from trl.trainer.utils import create_model_from_path

    from repro.models import TinyModelConfig, build_tiny
    from repro.plan.hardware import Hardware
    from repro.plan.memory import REFERENCE, REFERENCE_HOST, train_plan
    from repro.plan.shapes import read_config

    build_tiny(TinyModelConfig(architecture="qwen3_next", num_hidden_layers=4), tmp_path / "m")
    ref = create_model_from_path(str(tmp_path / "m"), dtype=torch.float32)
    nbytes = sum(p.numel() * p.element_size() for p in ref.parameters())
    hw = Hardware.of({"gpu_memory_gb": 80, "host_memory_gb": 100,
                      "train": {"nodes": 1, "gpus_per_node": 1}})
    shape = shape_of(read_config(tmp_path / "m"))
    train = {"prompts_per_step": 8, "group_size": 8, "minibatches": 4}
    plan = train_plan("tiny-next", shape, train | {"kl_coef": 0.01}, hw, 1)
    update = next(ph for ph in plan.phases if ph.name == "update")
    assert update.items[REFERENCE] * 1e9 == nbytes
    assert plan.phases[-1].items[REFERENCE_HOST] * 1e9 == nbytes
    plain = train_plan("tiny-next", shape, train, hw, 1)
    assert all(REFERENCE not in ph.items for ph in plain.phases)
    for preset in (P32, P80):
        config = load_config(BASE, [preset])
        assert config["train"].get("kl_coef", 0) == 0
