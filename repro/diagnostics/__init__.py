"""Cancellation diagnostics: per-token coefficients, shared nodes, and the paper's metrics.

Everything starts from c_{i,t} = -dL/dlogp_{i,t}, taken by one autograd call on whatever loss
the objectives module produced, so no algorithm is re-derived here.

The names below load on first use (PEP 562): all but `curves` need torch, and `repro tables` /
`repro figures` read only the curves, so they start without it (~2.5 s a process). Plain import
statements, not importlib: repro.pipeline.sources finds a job's modules by reading them.
"""

from __future__ import annotations

from typing import Any

_CANCELLATION = ("CANCELLATION_KEYS", "asym", "cancellation_metrics", "cancellation_sums",
                 "freq_energy", "metrics_from_sums", "residual_full", "shared_frac")
_CURVES = ("jitter2", "moving_average", "steps_to_threshold")
_SHARED_NODES = ("SharedNodes", "find_shared_nodes")

__all__ = sorted([*_CANCELLATION, *_CURVES, *_SHARED_NODES, "UpdateDiagnostics",
                  "token_coefficients"])


def __getattr__(name: str) -> Any:
    if name in _CANCELLATION:
        from repro.diagnostics import cancellation

        return getattr(cancellation, name)
    if name in _CURVES:
        from repro.diagnostics import curves

        return getattr(curves, name)
    if name in _SHARED_NODES:
        from repro.diagnostics import shared_nodes

        return getattr(shared_nodes, name)
    if name == "token_coefficients":
        from repro.diagnostics.coefficients import token_coefficients

        return token_coefficients
    if name == "UpdateDiagnostics":
        from repro.diagnostics.update import UpdateDiagnostics

        return UpdateDiagnostics
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
