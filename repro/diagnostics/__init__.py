"""Cancellation diagnostics: per-token coefficients, shared nodes, and the paper's metrics.

Everything starts from c_{i,t} = -dL/dlogp_{i,t}, taken by one autograd call on whatever loss
the objectives module produced, so no algorithm is re-derived here.
"""

from repro.diagnostics.cancellation import (
    CANCELLATION_KEYS,
    asym,
    cancellation_metrics,
    cancellation_sums,
    freq_energy,
    metrics_from_sums,
    residual_full,
    shared_frac,
)
from repro.diagnostics.coefficients import token_coefficients
from repro.diagnostics.curves import jitter2, moving_average, steps_to_threshold
from repro.diagnostics.shared_nodes import SharedNodes, find_shared_nodes
from repro.diagnostics.update import UpdateDiagnostics

__all__ = [
    "CANCELLATION_KEYS",
    "SharedNodes",
    "UpdateDiagnostics",
    "asym",
    "cancellation_metrics",
    "cancellation_sums",
    "find_shared_nodes",
    "freq_energy",
    "jitter2",
    "metrics_from_sums",
    "moving_average",
    "residual_full",
    "shared_frac",
    "steps_to_threshold",
    "token_coefficients",
]
