"""The shrunk-shape rehearsal of the paper presets (issue 42 item 4): config/overlays/
rehearse-cpu.yaml over each preset replaces only the model's shape, the hardware, lengths, steps,
seeds, the rollout/evaluation engine and the data; the model `source: init` builds is the
preset's architecture, and `repro plan`'s parameter count of it equals the built model's; the
offline mirror serves every benchmark the presets read; end to end, each preset's workflow runs
to its tables (slow).
"""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from repro.bench.rehearse import PRESETS, ROOT, configfiles, failures_of, run_rehearsal
from repro.pipeline.checks import train_block
from repro.pipeline.jobs import Jobs
from repro.plan import load_config, model_shape

BASE = ROOT / "config" / "config.yaml"


def config_of(*files: str) -> dict:
    return load_config(BASE, [ROOT / f for f in files])


def leaves(tree: dict, prefix: str = "") -> dict[str, object]:
    """Every leaf of a nested mapping as dotted key -> value (lists are leaves)."""
    out: dict[str, object] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out |= leaves(value, path + ".")
        else:
            out[path] = value
    return out


# What the overlay may replace (the issue: model shape and hardware; the brief: lengths, steps,
# seeds, data, the vLLM stand-in). Any other key the overlay changes in a preset fails.
SHAPE_KEYS = {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "vocab_size", "linear_key_head_dim",
              "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads",
              "num_experts", "moe_intermediate_size", "shared_expert_intermediate_size"}
ALLOWED = {"results", "data_lock", "train.prompts_per_step", "train.max_new_tokens",
           "train.steps", "train.checkpoint_every", "train.trl_args.use_vllm",
           "hardware.train.nodes", "hardware.train.gpus_per_node", "hardware.eval.gpus",
           "run.seeds", "ablations.seeds", "ablations.group_sizes", "eval.engine", "eval.k",
           "eval.limit", "eval.batch_size", "eval.sampling.max_new_tokens", "theory.steps"}


@pytest.mark.parametrize("preset", PRESETS)
def test_the_overlay_replaces_only_shape_hardware_lengths_engines_and_data(preset):
    alone, over = leaves(config_of(f"config/presets/{preset}.yaml")), leaves(
        config_of(*configfiles(preset)))
    (key,) = config_of(f"config/presets/{preset}.yaml")["run"]["models"]
    entry = f"models.{key}."
    changed = {k for k in set(alone) | set(over) if alone.get(k) != over.get(k)}
    model = {k for k in changed if k.startswith(entry)}
    shape = {f"{entry}config.{s}" for s in SHAPE_KEYS if f"{entry}config.{s}" in alone}
    assert entry + "source" in model and model - {entry + "source"} <= shape, model - shape
    assert {f"{entry}config.hidden_size", f"{entry}config.num_hidden_layers"} <= model
    others = {k for k in changed - model if not k.startswith("models.")}
    assert others <= ALLOWED, others - ALLOWED
    # the preset's engine, objectives, layout, accumulation and evaluation design stay
    for kept in ("train.engine", "train.group_size", "train.minibatches", "train.lr",
                 "train.trl_args.gradient_accumulation_steps",
                 "train.trl_args.gradient_checkpointing", "eval.benchmarks", "eval.fractions",
                 "run.algorithms", f"{entry}config.model_type", f"{entry}config.dtype"):
        assert over.get(kept) == alone.get(kept), kept


@pytest.mark.parametrize("preset", PRESETS)
def test_repro_plan_counts_exactly_the_parameters_of_the_model_init_builds(preset, tmp_path):
    """The planner's count of the shrunk shape, as `repro plan` prints it, equals the built
    model's sum(p.numel()); the model is the preset's architecture at that shape, in bf16."""
    from transformers import AutoModelForCausalLM

    from repro.cli import app
    from repro.models.from_config import build_from_config

    config = config_of(*configfiles(preset))
    (key,) = config["run"]["models"]
    printed = CliRunner().invoke(app, ["plan", "--base", str(BASE), *[
        a for f in configfiles(preset) for a in ("--configfile", str(ROOT / f))]])
    assert printed.exit_code == 0, printed.output
    line = re.search(rf"model {key} \(\w+\): ([\d,]+) parameters", printed.output)
    planned = int(line.group(1).replace(",", ""))
    fields = config["models"][key]["config"]
    built = build_from_config(fields, tmp_path / "model")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    assert planned == built == sum(p.numel() for p in model.parameters())
    assert planned == model_shape(config, key).params
    cfg = model.config
    assert cfg.model_type == fields["model_type"] and str(cfg.dtype).endswith("bfloat16")
    assert next(model.parameters()).dtype.__repr__() == "torch.bfloat16"
    assert cfg.hidden_size == 64 and not cfg.tie_word_embeddings
    if fields["model_type"] == "qwen3_next":  # the 80B's layout, expert routing, shared expert
        assert cfg.layer_types == ["linear_attention"] * 3 + ["full_attention"]
        assert cfg.num_experts_per_tok == 10 and cfg.num_experts == 16
        assert cfg.shared_expert_intermediate_size == 32 and cfg.linear_key_head_dim == 16


def test_init_model_refuses_in_one_line(tmp_path):
    from repro.cli import app

    runner = CliRunner()
    small = runner.invoke(app, ["init-model", "--out", str(tmp_path / "m"), "--config", json.dumps(
        {"model_type": "qwen3", "vocab_size": 50, "hidden_size": 8})])
    assert small.exit_code == 2 and "vocab_size=50 is below the tiny tokenizer's 104 ids" in (
        small.output), small.output
    untyped = runner.invoke(app, ["init-model", "--out", str(tmp_path / "m"), "--config", "{}"])
    assert untyped.exit_code == 2 and "lacks 'model_type'" in untyped.output
    assert not (tmp_path / "m").exists()


def test_a_selected_init_model_without_a_shape_the_planner_counts_fails_at_parse_time():
    config = config_of(*configfiles("paper-qwen3-32b"))
    Jobs(config).check()  # as the overlay writes it
    del config["models"]["qwen3-32b"]["config"]
    with pytest.raises(ValueError, match=r"models\.qwen3-32b has source init but no 'config'"):
        Jobs(config).check()
    config = config_of(*configfiles("paper-qwen3-32b"))
    del config["models"]["qwen3-32b"]["config"]["head_dim"]
    with pytest.raises(ValueError, match=r"models\.qwen3-32b\.config lacks 'head_dim'"):
        Jobs(config).check()


def test_the_mirror_serves_every_benchmark_the_presets_read_through_the_lock(tmp_path):
    """Real AIME25/HMMT25, the real LCB record in lcb-train's window with its pickled tests
    decoded (the lock pins its shard), synth rows for the v6 window and for OpenR1-Math."""
    from real_data import real_dir

    from repro.bench.rehearse_data import BENCHMARKS, write_mirror_and_lock
    from repro.benchmarks import get_benchmark
    from repro.benchmarks.loaders import load_problems
    from repro.benchmarks.pins import pins_for, read_lock

    lock = read_lock(write_mirror_and_lock(real_dir(), tmp_path))
    for name in ("paper-qwen3-32b", "paper-qwen3-next-80b"):
        config = config_of(f"config/presets/{name}.yaml")
        tasks = train_block(config)["tasks"]
        assert {*config["eval"]["benchmarks"], *tasks} == set(BENCHMARKS), tasks
    counts = {}
    for name in BENCHMARKS:
        spec = get_benchmark(name)
        problems, _ = load_problems(spec, data_dir=lock["data_dir"],
                                    sha256_pins=pins_for(spec, lock), limit=64)
        counts[name] = len(problems)
        if name == "lcb-train":
            real = [p for p in problems if p.problem_id == "1873_A"]
            assert len(real) == 1 and len(problems) == 8, [p.problem_id for p in problems]
            tests = real[0].tests  # 1 public, then the 4 pickled private ones decoded
            assert len(tests.inputs) == 5 and ("1\nabc\n", "YES\n") in zip(
                tests.inputs, tests.outputs, strict=True), tests
    assert counts["aime25"] == counts["hmmt25"] == 30 and counts["livecodebench"] >= 2, counts


# The 80B preset's rehearsal (2 train jobs, 20 jobs in all) took 5.7 min on 2 shared cores; the
# 32B preset's (16 train jobs: all its ablation arms, ~70 jobs) is `repro bench rehearse
# --preset paper-qwen3-32b`, past CI's budget (docs/gpu.md).
@pytest.mark.slow
def test_the_rehearsal_of_the_80b_preset_runs_to_its_tables(tmp_path):
    """`repro bench rehearse --preset paper-qwen3-next-80b`: the preset's workflow to its tables
    on CPU, the planned parameter count equal to the built model's, bf16 exports."""
    from real_data import real_dir

    preset = "paper-qwen3-next-80b"
    report = run_rehearsal(tmp_path, (preset,), real_dir(), cores=2)
    assert report["failures"] == [], report["failures"]
    result = report["presets"][preset]
    assert failures_of(result) == [] and result["train_runs"] >= 2, result
    assert {"main.md", "compute.md", "budget.md", "paper.md"} <= set(result["tables"]), result


@pytest.mark.parametrize("preset", PRESETS)
def test_the_paper_presets_train_on_their_own_prompt_sets_alone(preset):
    """A preset's train.tasks merges over config.yaml's {synth-rule: 1.0} (mappings merge): the
    presets drop it with null, and a mix of generated and hub sets is refused at parse time."""
    from types import SimpleNamespace

    config = config_of(f"config/presets/{preset}.yaml")
    (model,) = config["run"]["models"]
    run = SimpleNamespace(algo="gspo", model=model, group_size=16, seed=0)
    assert Jobs(config).run_config(run)["tasks"] == {"openr1-math": 0.75, "lcb-train": 0.25}
    config["train"]["tasks"]["synth-rule"] = 1.0  # the merge as it was before the null
    with pytest.raises(ValueError, match=r"train\.tasks mixes generated sets \['synth-rule'\] "
                       r"with hub prompt sets \['lcb-train', 'openr1-math'\]"):
        Jobs(config).check()


def test_an_arm_that_needs_whole_groups_per_micro_step_is_refused_at_parse_time():
    """dfpo_min_nosg under the 32B preset's 16 accumulation steps (one row per micro-step) failed
    its train job after the first rollout in the rehearsal; now the parse refuses it, naming the
    run and the key. Without accumulation (or on the native engine) it stays allowed."""
    config = config_of("config/presets/paper-qwen3-32b.yaml")
    Jobs(config).check_run_configs()
    config["ablations"]["algorithms"] = ["dfpo_min_nosg"]
    with pytest.raises(ValueError, match=r"run algo=dfpo_min_nosg/model=qwen3-32b/group_size=16"
                       r"/seed=0: objective stop_gradient=false .*gradient_accumulation_steps"
                       r"=16 leaves 1 row\(s\) per micro-step"):
        Jobs(config).check_run_configs()
    config["train"]["trl_args"]["gradient_accumulation_steps"] = 1
    config["ablations"]["group_sizes"] = [16]
    Jobs(config).check_run_configs()
