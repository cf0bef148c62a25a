"""`repro bench coherence`: the statistics on gradients with known structure, and a run of the
whole path (rollouts, GRPO gradients) on a random tiny policy with a stand-in reward."""

from __future__ import annotations

import math

import pytest
import torch

from repro.bench.coherence import batch_gradients, coherence
from repro.bench.options import CoherenceConfig
from repro.models import TinyModelConfig, build_tiny


def test_coherence_of_known_gradients():
    eye = torch.eye(6, dtype=torch.float64)[:4] * 3.0  # orthogonal: nothing shared
    stats = coherence(eye)
    assert stats["cos_mean"] == 0 and stats["signal_share"] == 0
    assert math.isinf(stats["batches_for_snr1"])
    same = torch.ones(3, 5, dtype=torch.float64)
    assert coherence(same)["cos_mean"] == pytest.approx(1.0)
    assert coherence(same)["signal_share"] == pytest.approx(1.0)
    gen = torch.Generator().manual_seed(0)
    signal = torch.zeros(20000, dtype=torch.float64)
    signal[0] = 10.0  # ||E g||^2 = 100
    noise = torch.randn(16, 20000, generator=gen, dtype=torch.float64)  # E||n||^2 = 20000
    stats = coherence(signal + noise)
    assert stats["signal_share"] == pytest.approx(100 / 20100, rel=0.15)
    assert stats["batches_for_snr1"] == pytest.approx(200, rel=0.15)
    with pytest.raises(ValueError, match="zero"):
        coherence(torch.zeros(2, 3))


def test_batch_gradients_run_the_trainers_path(tmp_path, hashed):
    model, tok = build_tiny(TinyModelConfig(hidden_size=32, head_dim=8, intermediate_size=64))
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    cfg = CoherenceConfig(model=str(tmp_path), batches=3, prompts=2, group_size=4,
                          max_new_tokens=8)
    grads = batch_gradients(cfg)
    assert grads.shape == (3, sum(p.numel() for p in model.parameters()))
    assert bool((grads.norm(dim=1) > 0).all())
    again = batch_gradients(cfg)
    assert torch.equal(grads, again)  # seeded
    stats = coherence(grads)
    assert -1 <= stats["cos_min"] <= stats["cos_mean"] <= stats["cos_max"] <= 1
    with pytest.raises(ValueError, match="batches"):
        CoherenceConfig(model="m", batches=1)
