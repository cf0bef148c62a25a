"""The run catalogue (`algorithms:` of config/config.yaml): label -> algorithm and objective
overrides. Code that names objectives by label outside the workflow (the verl plugin's loss
modes, the theory experiment's arms) reads its entries here, so a label means one objective
everywhere. The project is installed editable from a clone (docs/integrations.md), so the file
sits beside the package.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

CATALOGUE = Path(__file__).resolve().parents[1] / "config" / "config.yaml"


@functools.cache
def _entries() -> dict[str, Any]:
    return yaml.safe_load(CATALOGUE.read_text())["algorithms"]


def objective_of(label: str) -> tuple[str, dict[str, Any]]:
    """(algorithm, objective overrides) of catalogue entry `label`; unknown: names the file."""
    try:
        entry = _entries()[label]
    except KeyError:
        raise ValueError(f"{CATALOGUE}: algorithms has no entry {label!r}") from None
    return entry["algorithm"], dict(entry.get("objective", {}))
