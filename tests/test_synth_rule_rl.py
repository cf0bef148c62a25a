"""RL on `synth-rule` learns what the task was built for: a short GRPO run on its train prompts
raises the held-out reward, measured in pairs (same problems, same sampling seed) against the
start. The start is the tiny default's SFT policy, committed as a fixture
(tests/fixtures/synth_rule_start/README.md says why and how it was built)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from repro.engines.registry import train
from repro.evaluation.config import EvalConfig
from repro.evaluation.runner import run_eval
from repro.models import TinyModelConfig, build_tiny, load
from repro.training.config import TrainConfig

START = Path(__file__).parent / "fixtures" / "synth_rule_start"
HELD_OUT = 128  # of the 256 eval-split problems: avg@4 has a standard error of ~2 points here


def _held_out(model: Path, out: Path) -> dict[str, float]:
    """problem id -> avg@4 on the first HELD_OUT held-out problems, at eval seed 0."""
    paths = run_eval(EvalConfig(model=str(model), benchmarks=["synth-rule"], out=out, k=4,
                                limit=HELD_OUT, seed=0, sampling={"max_new_tokens": 64},
                                workers=1))["synth-rule"]
    table = pq.read_table(paths["problems"], columns=["problem_id", "avg"]).to_pylist()
    return {row["problem_id"]: row["avg"] for row in table}


def test_the_committed_start_is_a_current_tiny_policy(tmp_path) -> None:
    """The fixture still is what `repro sft` builds today: the tiny config's shape and the
    current tokenizer's vocabulary (else it must be rebuilt, as its README says)."""
    model, tok = load(START)
    _, fresh_tok = build_tiny(TinyModelConfig(), tmp_path / "fresh")
    assert tok.get_vocab() == fresh_tok.get_vocab()
    cfg, want = model.config, TinyModelConfig()
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size) == (
        want.hidden_size, want.num_hidden_layers, len(fresh_tok))
    with torch.no_grad():
        ids = tok("Compute 12+34.", return_tensors="pt").input_ids
        assert model(input_ids=ids).logits.shape[-1] == len(fresh_tok)


@pytest.mark.slow
def test_a_short_grpo_run_raises_held_out_reward(tmp_path) -> None:
    """20 GRPO steps at the default's settings (P = 8, G = 8, K = 4, lr 5e-5, seed 0) on train
    prompts; the held-out problems were never trained on. Measured when written: start 0.479,
    gain +17.4 points (on the fixture rebuilt for issue 22's stage-1 recipe: start 0.512, gain
    +21.5); the same run at lr 1e-9 gains exactly 0.0 (common random numbers), so
    the check can fail. The margin asked is +5 points, and the start must leave room for it (a
    start that already solved the task would prove nothing)."""
    train(TrainConfig(model=str(START), algorithm="grpo", tasks={"synth-rule": 1.0}, steps=20,
                      seed=0, checkpoint_every=0, probe_n=2), tmp_path / "rl")
    before = _held_out(START, tmp_path / "eval_start")
    after = _held_out(tmp_path / "rl" / "final", tmp_path / "eval_rl")
    assert before.keys() == after.keys() and len(before) == HELD_OUT
    start = sum(before.values()) / HELD_OUT
    gain = sum(after[p] - before[p] for p in before) / HELD_OUT
    assert start < 0.6, f"start {start:.3f}: the wrong rule should still cost accuracy"
    assert gain >= 0.05, f"held-out avg@4 {start:.3f} -> {start + gain:.3f} (gain {gain:+.3f})"
