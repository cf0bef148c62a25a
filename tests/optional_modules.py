"""Optional stacks the tests run in their own venvs (.ci/run): import one, or skip with where it
runs, and fail instead under the venv's REPRO_REQUIRE_<NAME>=1, so CI never passes by skipping."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def require(module: str, flag: str, where: str) -> ModuleType:
    """`import module`, or skip with the reason (fail under `flag`=1); `where`: how to get it."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        reason = f"{module} is not installed ({err}); .ci/run runs these tests in {where}"
        if os.environ.get(flag) == "1":
            pytest.fail(f"{reason}; {flag}=1 requires them to run")
        pytest.skip(reason, allow_module_level=True)
