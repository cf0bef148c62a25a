"""`repro bench gpu --tiny`: the preflight's every stage on CPU (2 gloo processes, FSDP2 with
the precision recipe), on both paper architectures (tiny dense Qwen3 and tiny Qwen3-Next) in one
call. In the main venv the vLLM stages are skipped with their reason; .ci/run runs this file
again in its vLLM venv (REPRO_REQUIRE_VLLM=1), where they must run (or, on an architecture the
vLLM build cannot run, fail with vLLM's own error while the other stages run with HF generate).
Nothing here measures a GPU: MFU and peak memory are NaN / absent on CPU.

The checks can fail: an lr rounded away (end to end), a corrupted save (the reload worker on a
tampered file), a stage past its budget (a stand-in worker), and each other defect fed to
`failures` as a report.
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("trl")

from typer.testing import CliRunner

from repro.bench.gpu import NOISE_FACTOR, STALE_FACTOR, vllm_available
from repro.bench.preflight_checks import failures
from repro.cli import app

HAS_VLLM = vllm_available() is None
if not HAS_VLLM and os.environ.get("REPRO_REQUIRE_VLLM") == "1":
    pytest.fail("REPRO_REQUIRE_VLLM=1: the preflight's vLLM stages must run here",
                pytrace=False)


def preflight(out, *extra: str) -> tuple[int, dict, str]:
    result = CliRunner().invoke(app, ["bench", "gpu", "--tiny", "--out", str(out), *extra])
    report = json.loads((out / "preflight.json").read_text())
    return result.exit_code, report, result.output


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("preflight")
    return out, *preflight(out)


@pytest.mark.slow
@pytest.mark.parametrize(("shape", "model_type"), [("tiny", "qwen3"),
                                                   ("tiny-next", "qwen3_next")])
def test_every_stage_runs_on_two_processes_and_passes(tiny, shape, model_type):
    _, code, top, output = tiny
    assert list(top["shapes"]) == ["tiny", "tiny-next"]  # both architectures in one call
    assert top["measured_on_gpu"] is False and top["processes"] == 2
    report = top["shapes"][shape]
    assert report["model_type"] == model_type
    stages = report["stages"]
    vllm_refused = HAS_VLLM and stages["vllm_sync"]["status"] == "failed"
    if vllm_refused:  # this vLLM build cannot run the architecture: one line, vLLM's own
        assert stages["vllm_sync"]["reason"].startswith(f"vLLM on {model_type}: exit ")
        assert report["failures"] == [
            f"vllm_sync: failed ({stages['vllm_sync']['reason'][:300]})"], output
    else:
        assert report["failures"] == [], output
    assert top["failures"] == [f"{name}: {line}" for name, one in top["shapes"].items()
                               for line in one["failures"]]
    assert code == (1 if top["failures"] else 0), output
    for name in ("build", "startup", "rollout", "update", "param_change", "save", "reload"):
        assert stages[name]["status"] == "ok", (name, stages[name])
    change = stages["param_change"]
    assert change["sharded"] and change["distributed_type"] == "DistributedType.FSDP"
    assert change["master_dtypes"] == ["torch.float32"] and change["elements_changed_frac"] > 0.5
    # the share is over the elements with a gradient (every one, on the tiny models; not on
    # Qwen3-Next's width: embedding rows of absent tokens, experts nothing was routed to)
    assert 0 < change["elements_with_gradient_frac"] <= 1
    assert 0 < change["elements_changed_frac_all"] <= 1
    assert stages["update"]["lr"] == 1e-6  # the paper preset's
    assert stages["update"]["model_flops"] > 6 * stages["update"]["tokens"]
    assert stages["reload"]["tensors_differ"] == [] and stages["reload"]["tensors"] > 0
    assert stages["save"]["writers"] == 2 and stages["save"]["files"] >= 2  # each its own
    assert math.isnan(report["mfu"])  # no GPU peak on CPU
    assert set(report["predicted_gb"]) >= {"rollout", "update"}  # repro.plan ran on the shapes
    if HAS_VLLM and not vllm_refused:
        assert stages["rollout"]["engine"] == "vllm"
        sync = stages["vllm_sync"]
        tol = NOISE_FACTOR * sync["noise"]
        assert sync["synced"] <= tol < sync["stale"] / STALE_FACTOR, sync
        assert stages["vllm_resync"]["trained"] <= tol
    else:
        assert stages["rollout"]["engine"] == "hf"
        for name in ("vllm_sync", "vllm_resync"):
            assert stages[name]["status"] == ("failed" if vllm_refused and name == "vllm_sync"
                                              else "skipped")
            if not HAS_VLLM:
                assert "vllm is not installed" in stages[name]["reason"]


@pytest.mark.slow
def test_a_corrupted_save_fails_the_reload(tiny):
    """The reload worker on the saved folder with one tensor changed in its file."""
    from safetensors.torch import load_file, save_file

    out = tiny[0] / "tiny"
    path = sorted((out / "saved").glob("*.safetensors"))[0]
    tensors = load_file(str(path))
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] * 1.001
    save_file(tensors, str(path), metadata={"format": "pt"})
    done = subprocess.run([sys.executable, "-m", "repro.bench.preflight_worker", "reload",
                           str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    stage = json.loads((out / "progress_reload.json").read_text())["stages"]["reload"]
    report = {"processes": 2, "stages": {"reload": stage}, "predicted_gb": {}}
    assert stage["tensors_differ"] == [name]
    assert any("reload: 1 of" in line for line in failures(report, 1e-6, STALE_FACTOR,
                                                          NOISE_FACTOR))


@pytest.mark.slow
@pytest.mark.skipif(HAS_VLLM, reason="run in the main venv only (CI time)")
def test_an_lr_rounded_away_fails_the_parameter_change_check(tmp_path):
    """lr 1e-12: AdamW's step (~lr) is below float32's spacing at the weights' size, so no
    master moves, as bf16 masters at the preset's 1e-6 (defect 2)."""
    code, report, output = preflight(tmp_path, "--lr", "1e-12", "--shapes", "tiny")
    assert code == 1, output
    assert list(report["shapes"]) == ["tiny"]
    change = report["shapes"]["tiny"]["stages"]["param_change"]
    assert change["elements_changed_frac"] < 0.01  # weights near 0 move
    assert [line for line in report["failures"] if line.startswith("tiny: param_change:")]


def passing() -> dict:
    ok = {"status": "ok"}
    return {"processes": 2, "predicted_gb": {"rollout": 10.0, "update": 20.0}, "stages": {
        "build": ok, "startup": ok,
        "vllm_sync": ok | {"noise": 0.01, "stale": 1.0, "synced": 0.02},
        "rollout": ok | {"peak_gb": 8.0}, "update": ok | {"peak_gb": 19.0, "reserved_gb": 20.5,
                                                          "device_used_gb": 22.0},
        "param_change": ok | {"elements_changed_frac": 0.99, "master_dtypes": ["torch.float32"],
                              "sharded": True, "distributed_type": "DistributedType.FSDP"},
        "save": ok | {"writers": 2, "files": 3}, "vllm_resync": ok | {"trained": 0.03},
        "reload": ok | {"tensors": 10, "tensors_differ": []}}}


@pytest.mark.parametrize(("stage", "key", "value", "says"), [
    ("param_change", "master_dtypes", ["torch.bfloat16"], "master dtypes"),  # bf16 masters
    ("param_change", "elements_changed_frac", 0.02, "with a gradient moved"),  # lr rounded away
    ("param_change", "sharded", False, "not DTensors"),  # FSDP2 did not shard
    ("vllm_sync", "synced", 0.5, "after a sync"),  # the sync left vLLM stale
    ("vllm_sync", "stale", 0.05, "cannot tell"),  # the check itself is blind
    ("vllm_sync", "noise", 0.5, "before training"),  # vLLM computes another model
    ("vllm_resync", "trained", 0.3, "trained policy"),  # the sync after FSDP2 updates fails
    ("update", "peak_gb", 25.0, "over repro.plan"),  # the planner underestimates
    ("update", "device_used_gb", 30.0, "more than the 6 GB"),  # context/NCCL/fragments > margin
    ("reload", "tensors_differ", ["lm_head.weight"], "differ"),
    ("save", "writers", 1, "want 2 (each writes"),  # one process wrote everything
    ("rollout", "status", "stopped", "rollout: stopped"),  # overran its budget
])
def test_each_defect_is_a_failure(stage, key, value, says):
    assert failures(passing(), 1e-6, STALE_FACTOR, NOISE_FACTOR) == []
    report = copy.deepcopy(passing())
    report["stages"][stage][key] = value
    got = failures(report, 1e-6, STALE_FACTOR, NOISE_FACTOR)
    assert got and any(says in line for line in got), got


def test_a_stage_records_the_allocators_peaks_and_the_devices_use(tmp_path, monkeypatch):
    """What only a GPU shows, recorded per stage so the next GPU minutes measure the margin:
    the allocated and reserved peaks and the device's used memory (CUDA's counters stood in
    for; one process, so no reduce)."""
    import torch

    from repro.bench import preflight_worker

    counters = {"max_memory_allocated": lambda: 19e9, "max_memory_reserved": lambda: 20.5e9,
                "mem_get_info": lambda: (119e9, 141e9), "is_available": lambda: True,
                "synchronize": lambda: None, "reset_peak_memory_stats": lambda: None}
    for name, fn in counters.items():
        monkeypatch.setattr(torch.cuda, name, fn)
    monkeypatch.setattr(preflight_worker, "_world", lambda: 1)
    progress = preflight_worker.Progress(tmp_path / "progress.json", True, {})
    progress.start("update")
    progress.done("update", rows=4)
    stage = json.loads((tmp_path / "progress.json").read_text())["stages"]["update"]
    assert (stage["peak_gb"], stage["reserved_gb"], stage["device_used_gb"]) == (19, 20.5, 22)
    report = passing()
    report["stages"]["update"] = stage
    assert failures(report, 1e-6, STALE_FACTOR, NOISE_FACTOR) == []


def test_a_skipped_stage_with_its_reason_is_not_a_failure():
    report = passing()
    report["stages"]["vllm_sync"] = {"status": "skipped", "reason": "vllm is not installed"}
    assert failures(report, 1e-6, STALE_FACTOR, NOISE_FACTOR) == []


def test_a_stage_past_its_budget_is_stopped_and_the_ones_before_it_kept(tmp_path):
    """`watch` on a stand-in worker: stage a finishes, stage b sleeps past its 1 s budget."""
    from repro.bench.gpu import merge, watch

    progress = tmp_path / "progress.json"
    script = f"""
import json, os, time
def write(current, stages):
    tmp = {str(progress)!r} + '.tmp'
    open(tmp, 'w').write(json.dumps({{'current': current, 'stages': stages}}))
    os.replace(tmp, {str(progress)!r})
a = {{'status': 'ok', 'seconds': 0.0}}
write('a', {{'a': {{'status': 'running', 'started': time.time()}}}})
write(None, {{'a': a}})
write('b', {{'a': a, 'b': {{'status': 'running', 'started': time.time()}}}})
time.sleep(60)
"""
    t0 = time.perf_counter()
    ended = watch([sys.executable, "-c", script], dict(os.environ), tmp_path / "log",
                  progress, {"startup": 30, "a": 30, "b": 1, "c": 30}, time.time() + 50)
    assert time.perf_counter() - t0 < 20
    assert ended == {"stage": "b", "status": "stopped", "reason": "ran past its 1 s budget"}
    stages: dict = {}
    merge(stages, ("a", "b", "c"), progress, ended)
    assert [stages[n]["status"] for n in ("startup", "a", "b", "c")] == [
        "ok", "ok", "stopped", "not run"]
    assert any(line.startswith("b: stopped") for line in failures(
        {"processes": 1, "stages": stages, "predicted_gb": {}}, 1e-6, STALE_FACTOR,
        NOISE_FACTOR))


@pytest.mark.parametrize("shape", ["qwen3-32b-4l", "qwen3-next-80b-2l"])
def test_the_planner_refuses_a_preflight_that_would_not_fit(shape, tmp_path):
    """What makes `run_preflight` skip every train stage with the reason: repro.plan on each GPU
    shape (config.json only, no weights) with sequences too long for one 141 GB GPU."""
    from transformers import AutoConfig

    from repro.bench.gpu import predicted, train_config
    from repro.bench.options import PreflightConfig, gpu_shape
    from repro.plan import PlanRefusal

    fields = gpu_shape(shape)
    AutoConfig.for_model(fields.pop("model_type"), **fields).save_pretrained(tmp_path)
    fits = PreflightConfig(out=tmp_path, processes=1, lr=1e-6).resolved()
    for use_vllm in (False, True):
        got = predicted(fits, tmp_path, train_config(fits, tmp_path, use_vllm))
        assert 0 < got["update"] < 141 and 0 < got["rollout"] < 141, got
    huge = PreflightConfig(out=tmp_path, processes=1, lr=1e-6, max_new_tokens=400_000).resolved()
    with pytest.raises(PlanRefusal, match=r"^config train\.trl_args\.\w+: the "):
        predicted(huge, tmp_path, train_config(huge, tmp_path, use_vllm=False))


def test_the_gpu_shapes_are_both_paper_architectures_at_their_widths():
    """Qwen3-Next's shape is its preset's config.json fields with 2 layers, one Gated DeltaNet
    and one gated-attention layer; each shape's config is built from the very arguments
    `build_model` passes (`shape_fields`: the 2026-12-04 H200 run crashed on Qwen3-Next's own
    `dtype` field passed twice) and its model on the meta device by transformers' own class."""
    import torch
    import yaml
    from transformers import AutoConfig, AutoModelForCausalLM

    from repro.bench.gpu import shape_fields
    from repro.bench.options import NEXT_PRESET, SHAPES, PreflightConfig, gpu_shape
    from repro.models.tokenizer import build_tokenizer

    assert PreflightConfig().shapes == ("qwen3-32b-4l", "qwen3-next-80b-2l") == SHAPES
    assert PreflightConfig(tiny=True).shapes == ("tiny", "tiny-next")
    paper = yaml.safe_load(NEXT_PRESET.read_text())["models"]["qwen3-next-80b"]["config"]
    fields = gpu_shape("qwen3-next-80b-2l")
    for key in ("hidden_size", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
                "linear_num_value_heads", "head_dim", "vocab_size"):
        assert fields[key] == paper[key], key
    tok = build_tokenizer(model_max_length=4096)
    built = {}
    for shape in SHAPES:
        config = AutoConfig.for_model(**shape_fields(shape, tok))
        assert (config.max_position_embeddings, config.pad_token_id) == (4096, tok.pad_token_id)
        with torch.device("meta"):
            built[shape] = AutoModelForCausalLM.from_config(config)
        assert 3e9 < built[shape].num_parameters() < 5e9  # ~3.5B to 3.9B: one H200 each
    model = built["qwen3-next-80b-2l"]
    assert model.config.layer_types == ["linear_attention", "full_attention"]
    assert type(model).__name__ == "Qwen3NextForCausalLM"


def test_a_shape_that_crashes_is_a_failure_and_the_report_is_written_after_each_shape(
        tmp_path, monkeypatch):
    from repro.bench import gpu
    from repro.bench.options import PreflightConfig

    seen = []

    def run_shape(cfg, shape, out, deadline, on_gpu):
        seen.append(json.loads((tmp_path / "preflight.json").read_text())["shapes"]
                    if (tmp_path / "preflight.json").exists() else None)
        if shape == "tiny":
            raise TypeError("for_model() got multiple values for keyword argument 'dtype'")
        return {"model_type": "qwen3_next", "stages": {"build": {"status": "ok"}},
                "failures": []}

    monkeypatch.setattr(gpu, "run_shape", run_shape)
    report = gpu.run_preflight(PreflightConfig(tiny=True, out=tmp_path))
    assert seen[0] is None and list(seen[1]) == ["tiny"]  # written before the next shape ran
    assert report["failures"] == [
        "tiny: crashed: TypeError: for_model() got multiple values for keyword argument 'dtype'"]
    assert json.loads((tmp_path / "preflight.json").read_text())["shapes"]["tiny-next"][
        "model_type"] == "qwen3_next"


@pytest.mark.parametrize(("shapes", "tiny"), [(("tiny",), False), (("qwen3-32b-4l",), True),
                                              (("tiny", "tiny"), True)])
def test_an_unknown_or_repeated_shape_is_one_line_at_parse_time(shapes, tiny):
    from repro.bench.options import PreflightConfig

    with pytest.raises(ValueError, match=r"^PreflightConfig.shapes: .* are not distinct"):
        PreflightConfig(shapes=shapes, tiny=tiny)


def test_mfu_counts_the_experts_a_token_meets():
    """matmul_params: the dense model's count is the hand formula from its config; on Qwen3-Next
    each extra expert per token adds one expert's three matrices per MoE layer."""
    from repro.bench.preflight_worker import matmul_params
    from repro.models import TinyModelConfig, build_tiny

    dense = build_tiny(TinyModelConfig(hidden_size=32, head_dim=8, intermediate_size=64))[0]
    c = dense.config
    d_attn, kv = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
    h = c.hidden_size
    per_layer = h * (2 * d_attn + 2 * kv) + 3 * h * c.intermediate_size
    assert matmul_params(dense) == c.num_hidden_layers * per_layer + h * c.vocab_size
    counts = []
    for k in (2, 3):
        model = build_tiny(TinyModelConfig(architecture="qwen3_next", hidden_size=32, head_dim=8,
                                           num_hidden_layers=4, num_experts_per_tok=k))[0]
        counts.append(matmul_params(model))
    c = model.config
    assert counts[1] - counts[0] == c.num_hidden_layers * 3 * h * c.moe_intermediate_size


def test_a_vllm_that_cannot_run_the_architecture_fails_its_stages_and_the_rest_still_run(
        tmp_path, monkeypatch):
    """`train_stages` with a stand-in worker whose vLLM start fails (the reason line is made up
    here; on a real refusal it is vLLM's own last error line): the vLLM stages fail with it, named
    by architecture, and the worker runs again with HF generate for the other stages."""
    from repro.bench import gpu
    from repro.bench.options import PreflightConfig

    refusal = "exit 1: ValueError: stand-in for vLLM's refusal of this architecture"
    runs = []

    def worker(cmd, env, log, progress, budgets, deadline):
        train = json.loads((tmp_path / "worker.json").read_text())["train"]
        runs.append(bool(train["trl_args"].get("use_vllm")))
        if runs[-1]:
            return {"stage": "startup", "status": "failed", "reason": refusal}
        progress.write_text(json.dumps({"current": None, "stages": {
            n: {"status": "ok"} for n in ("rollout", "update", "save")}}))
        return None

    monkeypatch.setattr(gpu, "watch", worker)
    cfg = PreflightConfig(tiny=True, out=tmp_path).resolved()
    stages: dict = {}
    gpu.train_stages(cfg, tmp_path, tmp_path, gpu.train_config(cfg, tmp_path, use_vllm=True),
                     {}, time.time() + 60, stages, "qwen3_next")
    assert runs == [True, False]
    assert stages["vllm_sync"] == {"status": "failed",
                                   "reason": f"vLLM on qwen3_next: {refusal}"}
    assert stages["vllm_resync"] == {"status": "skipped", "reason": "vllm_sync failed"}
    assert [stages[n]["status"] for n in ("startup", "rollout", "update", "save")] == ["ok"] * 4
    report = {"processes": 2, "stages": stages, "predicted_gb": {}}
    assert failures(report, 1e-6, STALE_FACTOR, NOISE_FACTOR)[0].startswith(
        "vllm_sync: failed (vLLM on qwen3_next: exit 1: ValueError: stand-in")


def test_the_preflight_predicts_its_update_in_fake_mode_beside_the_plan(tmp_path):
    """`predicted_fake` (torch's tracker in fake mode, the run's own configuration) is what each
    measured update peak is printed beside; on the dense shape it agrees with the arithmetic
    within 5% (no snapshot on the GPU any more: param_change keeps it on the host)."""
    from transformers import AutoConfig

    from repro.bench.gpu import predicted, predicted_fake, train_config
    from repro.bench.options import PreflightConfig, gpu_shape

    fields = gpu_shape("qwen3-32b-4l")
    AutoConfig.for_model(fields.pop("model_type"), **fields).save_pretrained(tmp_path)
    cfg = PreflightConfig(out=tmp_path, processes=1, lr=1e-6, max_new_tokens=32).resolved()
    train = train_config(cfg, tmp_path, use_vllm=False)
    fake, plan = predicted_fake(cfg, tmp_path, train), predicted(cfg, tmp_path, train)
    assert abs(fake["update"] / plan["update"] - 1) <= 0.05, (fake, plan)
