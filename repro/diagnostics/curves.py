"""Metrics over a training curve m_1..m_n logged at a fixed interval."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def jitter2(curve: Sequence[float]) -> float:
    """Second-order jitter mean_t |m_{t+1} - 2 m_t + m_{t-1}| (0 for fewer than 3 points)."""
    m = np.asarray(curve, dtype=np.float64)
    if m.size < 3:
        return 0.0
    return float(np.abs(m[2:] - 2 * m[1:-1] + m[:-2]).mean())


def moving_average(curve: Sequence[float], window: int = 5) -> np.ndarray:
    """Trailing mean over full windows: element j averages curve[j : j + window]."""
    m = np.asarray(curve, dtype=np.float64)
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if m.size < window:
        return np.empty(0)
    c = np.cumsum(np.concatenate([[0.0], m]))
    return (c[window:] - c[:-window]) / window


def steps_to_threshold(
    reward: Sequence[float],
    kappa: float,
    *,
    window: int = 5,
    x: Sequence[float] | None = None,
) -> float | None:
    """First x (step by default, or e.g. cumulative generated tokens) where the trailing moving
    average of `reward` reaches kappa; None if it never does."""
    ma = moving_average(reward, window)
    hit = np.nonzero(ma >= kappa)[0]
    if hit.size == 0:
        return None
    xs = np.arange(len(reward), dtype=np.float64) if x is None else np.asarray(x, dtype=np.float64)
    if xs.size != len(reward):
        raise ValueError(f"x has {xs.size} points but reward has {len(reward)}")
    return float(xs[hit[0] + window - 1])
