"""A preset's config as Snakemake builds it (repro.plan.load_config: config/config.yaml, then
each preset merged over it, validated with the schema's defaults), for the tests that read one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from repro.plan import load_config

ROOT = Path(__file__).resolve().parents[1]


def resolved(*presets: str, **overrides: dict[str, Any]) -> dict[str, Any]:
    """config/config.yaml with `presets` (file names under config/presets/) over it; each
    keyword then merges its mapping into that top-level section (`train={"steps": 4}`)."""
    config = load_config(ROOT / "config" / "config.yaml",
                         [ROOT / "config" / "presets" / name for name in presets])
    for key, value in overrides.items():
        config[key] = config[key] | value
    return config
