"""Cancellation diagnostics: per-token coefficients, shared nodes, and the paper's metrics.

Everything starts from c_{i,t} = -dL/dlogp_{i,t}, taken by one autograd call on whatever loss
the objectives module produced, so no algorithm is re-derived here.
"""

from repro.diagnostics.cancellation import (
    CANCELLATION_KEYS,
    asym,
    cancellation_metrics,
    freq_energy,
    residual_full,
    shared_frac,
)
from repro.diagnostics.coefficients import token_coefficients
from repro.diagnostics.curves import jitter2, moving_average, steps_to_threshold
from repro.diagnostics.shared_nodes import SharedNodes, find_shared_nodes

__all__ = [
    "CANCELLATION_KEYS",
    "SharedNodes",
    "asym",
    "cancellation_metrics",
    "find_shared_nodes",
    "freq_energy",
    "jitter2",
    "moving_average",
    "residual_full",
    "shared_frac",
    "steps_to_threshold",
    "token_coefficients",
]
