"""The rollout-engine defaults `build_grpo_config` adds to TRL's (defects 3 and 7 of issue 17):
a missing `vllm_mode` is TRL's colocate, and colocate asks for vLLM's sleep mode only where
vLLM's platform has it (sleep mode is CUDA/ROCm/XPU-only: asking for it on CPU fails at start).
Config only; tests/test_vllm_colocate.py runs the CPU platform for real."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from repro.engines import trl_args
from repro.engines.trl_args import build_grpo_config, sleep_mode_available
from repro.training.config import TrainConfig


def grpo_args(tmp_path, **trl):
    cfg = TrainConfig(model="m", engine="trl", trl_args=trl)
    return build_grpo_config(cfg, out=tmp_path, world_size=1, steps=1, half_precision=False,
                             use_cpu=True)


@pytest.mark.parametrize("sleeps", [True, False])
def test_a_missing_vllm_mode_is_colocate_with_the_platforms_sleep_mode(sleeps, tmp_path,
                                                                       monkeypatch):
    monkeypatch.setattr(trl_args, "sleep_mode_available", lambda: sleeps)
    args = grpo_args(tmp_path, use_vllm=True)
    assert (args.vllm_mode, args.vllm_enable_sleep_mode) == ("colocate", sleeps)
    args = grpo_args(tmp_path, use_vllm=True, vllm_mode="colocate")
    assert (args.vllm_mode, args.vllm_enable_sleep_mode) == ("colocate", sleeps)


@pytest.mark.parametrize("sleeps", [True, False])
def test_server_mode_and_explicit_choices_are_left_alone(sleeps, tmp_path, monkeypatch):
    monkeypatch.setattr(trl_args, "sleep_mode_available", lambda: sleeps)
    assert grpo_args(tmp_path, use_vllm=True, vllm_mode="server").vllm_enable_sleep_mode is False
    assert grpo_args(tmp_path, use_vllm=True,
                     vllm_enable_sleep_mode=not sleeps).vllm_enable_sleep_mode is (not sleeps)
    assert grpo_args(tmp_path).vllm_enable_sleep_mode is False  # HF generate


def test_sleep_mode_is_vllms_own_answer_for_this_machine():
    """Without vLLM: False (TRL refuses use_vllm then); with it: its platform's answer."""
    try:
        from vllm.platforms import current_platform
    except ImportError:
        assert sleep_mode_available() is False
        return
    assert sleep_mode_available() is current_platform.is_sleep_mode_available()
