"""Sandbox for untrusted generated code: bubblewrap per run, rlimits, optional pids cgroup."""

from repro.sandbox.bwrap import (
    HOWTO,
    JOB_DIR,
    MODES,
    Sandbox,
    SandboxConfig,
    SandboxError,
    SandboxUnavailable,
)
from repro.sandbox.process import SandboxResult

__all__ = [
    "HOWTO",
    "JOB_DIR",
    "MODES",
    "Sandbox",
    "SandboxConfig",
    "SandboxError",
    "SandboxResult",
    "SandboxUnavailable",
]
