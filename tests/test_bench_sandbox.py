"""`repro bench sandbox` runs end to end on a tiny config and returns a complete result.

Structure only: the ratio is measured side by side in one run; no timing threshold is asserted
(a loaded CI machine would make it flaky and prove nothing).
"""

from __future__ import annotations

import math
import shutil

import pytest

from repro.bench.sandbox import KINDS, MODES, SandboxBenchConfig, run_sandbox_bench

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None,
                                reason="bubblewrap is not installed (apt-get install bubblewrap)")
TINY = dict(generations=3, tests_per_generation=4, rounds=2, warmup=0, typical_n=500)


@pytest.fixture(scope="module")
def result() -> dict:
    return run_sandbox_bench(SandboxBenchConfig(**TINY), show=False)


def test_every_case_is_timed_and_graded(result: dict) -> None:
    assert set(result["cases"]) == {f"{kind}/{mode}" for kind in KINDS for mode in MODES}
    for name, case in result["cases"].items():
        assert len(case["rounds_s_per_generation"]) == TINY["rounds"], name
        assert case["s_per_generation"] > 0 and math.isfinite(case["tests_per_s"]), name
        assert case["all_passed"] and case["failures"] == [], (name, case["failures"])


def test_ratios_are_measured_under_bubblewrap(result: dict) -> None:
    assert set(result["ratios"]) == set(KINDS)
    assert all(math.isfinite(r) and r > 0 for r in result["ratios"].values())
    assert result["sandbox"]["mode"] == "bwrap" and result["all_passed"]
    assert result["config"]["workers"] == 2


@pytest.mark.parametrize(("ratio_of_max", "graded", "shown_verdict"),
                         [(0.9, True, "PASS"), (1.1, True, "FAIL"), (0.9, False, "FAIL")])
def test_verdict_follows_ratio_and_grading(result: dict, capsys: pytest.CaptureFixture[str],
                                           ratio_of_max: float, graded: bool,
                                           shown_verdict: str) -> None:
    """The printed verdict is PASS only when every ratio is within the limit and all graded pass."""
    from repro.bench.sandbox import MAX_RATIO, print_sandbox_report, verdict

    ratios = dict.fromkeys(KINDS, MAX_RATIO * ratio_of_max)
    shown = {**result, "ratios": ratios, "passed": verdict(ratios, graded)}
    print_sandbox_report(shown)
    last = capsys.readouterr().out.strip().splitlines()
    assert any(line.startswith(f"{shown_verdict}:") for line in last)
    other = "FAIL" if shown_verdict == "PASS" else "PASS"
    assert not any(line.startswith(f"{other}:") for line in last)


@pytest.mark.parametrize(("field", "value"), [("workers", 0), ("rounds", 0), ("warmup", -1),
                                              ("generations", 1.5)])
def test_config_errors_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"SandboxBenchConfig.{field}"):
        SandboxBenchConfig(**{field: value})
