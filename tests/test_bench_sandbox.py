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


def test_ratios_and_verdict_are_reported(result: dict) -> None:
    assert set(result["ratios"]) == set(KINDS)
    for kind, ratio in result["ratios"].items():
        bwrap = result["cases"][f"{kind}/bwrap"]["s_per_generation"]
        unsafe = result["cases"][f"{kind}/unsafe"]["s_per_generation"]
        assert ratio == pytest.approx(bwrap / unsafe)
    assert result["max_ratio"] == 2.0 and isinstance(result["passed"], bool)
    assert result["sandbox"]["mode"] == "bwrap" and result["all_passed"]
    assert result["config"]["workers"] == 2


def test_report_prints(result: dict, capsys: pytest.CaptureFixture[str]) -> None:
    from repro.bench.sandbox import print_sandbox_report

    print_sandbox_report(result)
    out = capsys.readouterr().out
    assert "sandboxed / unsandboxed" in out and ("PASS" in out or "FAIL" in out)


@pytest.mark.parametrize(("field", "value"), [("workers", 0), ("rounds", 0), ("warmup", -1),
                                              ("generations", 1.5)])
def test_config_errors_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"SandboxBenchConfig.{field}"):
        SandboxBenchConfig(**{field: value})
