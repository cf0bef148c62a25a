"""lm-eval's hf backend runs our tasks end to end on the tiny model (fixture data for aime25)."""

from __future__ import annotations

import os

import pytest
from fixtures_hub import write_aime

import repro.lmeval
from repro.models import TinyModelConfig, build_tiny

lm_eval = pytest.importorskip("lm_eval")
pytest.importorskip("accelerate")


@pytest.mark.slow
def test_simple_evaluate_hf_backend_on_tiny_model(tmp_path):
    from lm_eval.tasks import TaskManager

    model_dir = tmp_path / "tiny"
    build_tiny(TinyModelConfig(), model_dir)
    data_dir = tmp_path / "data"
    write_aime(data_dir)
    manager = TaskManager(include_path=os.path.dirname(repro.lmeval.__file__),
                          include_defaults=False, metadata={"data_dir": str(data_dir)})
    results = lm_eval.simple_evaluate(
        model="hf",
        model_args=f"pretrained={model_dir},dtype=float32",
        tasks=["synth_aime_repro", "aime25_repro"],
        task_manager=manager,
        limit=2,
        apply_chat_template=True,
        gen_kwargs="max_gen_toks=8",
        device="cpu",
        batch_size=8,
    )
    for task in ("synth_aime_repro", "aime25_repro"):
        score = results["results"][task]["avg@k,all_samples"]
        assert 0.0 <= score <= 1.0
    assert results["configs"]["aime25_repro"]["repeats"] == 32
