"""scripts/power_study4.py reproduces the numbers docs/preregistration-4.md prints: study 3's
spreads (fast) and the power of G2 per design (slow: 3,000 nested bootstraps, about a minute),
and the registered number of starts is the smallest design with power >= 0.8."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROSE = " ".join((ROOT / "docs" / "preregistration-4.md").read_text(encoding="utf-8").split())


def script():
    spec = importlib.util.spec_from_file_location("power", ROOT / "scripts" / "power_study4.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_study3_spreads_are_the_ones_the_preregistration_prints():
    spreads = script().study3_spreads()
    printed = (f"GRPO's mean gain {spreads['mean']:.1f} points, between-start sd "
               f"{spreads['between']:.1f}, within-start sd {spreads['within']:.1f}")
    assert printed in PROSE, printed
    assert f"per-problem sd {spreads['problem']:.1f}" in PROSE


def test_the_gate_the_script_simulates_is_the_registered_one():
    power = script()
    assert f"mean >= +{power.MEAN_BAR:g} points and a 95% lower bound > {power.LOWER_BAR:g}" \
        in PROSE
    assert power.SEEDS == 2 and "RL seeds 0 and 1" in PROSE


@pytest.mark.slow
def test_the_power_table_reproduces_and_sets_the_number_of_starts():
    power = script()
    spreads = power.study3_spreads()
    table = dict(re.findall(r"\| (\d+) x 2 \| (0\.\d\d) \|", PROSE))
    assert sorted(map(int, table)) == sorted(power.DESIGNS)
    got = {starts: power.power(spreads, starts) for starts in power.DESIGNS}
    for starts, value in got.items():
        assert f"{value:.2f}" == table[str(starts)], (starts, value)
    smallest = min(s for s, v in got.items() if v >= 0.8)
    assert f"the study uses {smallest} starts" in PROSE
