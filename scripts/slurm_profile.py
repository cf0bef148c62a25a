"""Write a Snakemake profile folder: profiles/slurm/config.yaml with overlay files merged in
(docs/slurm.md, "A small cluster"). A profile cannot include another, and a second profile's
`set-resources` would replace the first's wholesale; this merges per rule, key by key.

Usage: python3 scripts/slurm_profile.py OVERLAY.yaml [MORE.yaml ...] OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

BASE = Path(__file__).resolve().parents[1] / "profiles" / "slurm" / "config.yaml"


def merged(profile: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """`profile` with `overlay` on top: per-rule blocks merged rule by rule and key by key,
    other mappings key by key, anything else replaced."""
    out = dict(profile)
    for key, value in overlay.items():
        if key == "set-resources":
            rules = dict(out.get(key) or {})
            for rule, res in value.items():
                rules[rule] = {**(rules.get(rule) or {}), **res}
            out[key] = rules
        elif isinstance(value, dict):
            out[key] = {**(out.get(key) or {}), **value}
        else:
            out[key] = value
    return out


def write_profile(overlays: list[Path | dict[str, Any]], out_dir: Path) -> Path:
    """profiles/slurm merged with each overlay (a YAML file or a mapping) into
    out_dir/config.yaml."""
    profile = yaml.safe_load(BASE.read_text())
    for overlay in overlays:
        extra = overlay if isinstance(overlay, dict) else yaml.safe_load(Path(overlay).read_text())
        if not isinstance(extra, dict):
            raise SystemExit(f"{overlay}: not a YAML mapping of profile settings")
        profile = merged(profile, extra)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    return out_dir


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit("usage: python3 scripts/slurm_profile.py OVERLAY.yaml [...] OUT_DIR")
    out = write_profile([Path(a) for a in sys.argv[1:-1]], Path(sys.argv[-1]))
    print(f"{out}/config.yaml: profiles/slurm with {', '.join(sys.argv[1:-1])}")
