"""`repro bench objectives` runs end to end on a tiny config and returns a complete result.

Structure only: benchmarks report ratios measured side by side in one run; no timing
threshold is asserted here (a loaded CI machine would make it flaky and prove nothing).
"""

from __future__ import annotations

import math

import pytest
import torch

from repro.bench.objectives import (
    LOSS_ACCEPT_CASES,
    LOSS_CASES,
    LOSS_RATIO_MAX,
    SCALING_BAND,
    TRANSFORM_ACCEPT_CASES,
    TRANSFORM_CASES,
    WIDE_CASE,
    _acceptance,
    run_objectives_bench,
)
from repro.bench.options import ObjectivesBenchConfig
from repro.bench.report import print_objectives_report

TINY = dict(seqs=32, max_len=64, group_size=4, repeats=2, warmup=1, transform_groups=(8, 64))


@pytest.fixture(scope="module")
def result() -> dict:
    return run_objectives_bench(ObjectivesBenchConfig(**TINY), show=False)


def test_every_loss_case_is_timed(result: dict) -> None:
    cases = result["loss_backward"]["cases"]
    assert list(cases) == [label for label, _, _ in LOSS_CASES]
    for label, c in cases.items():
        assert len(c["times_s"]) == TINY["repeats"], label
        assert all(t > 0 for t in c["times_s"]), label
        assert c["median_s"] > 0 and c["min_s"] > 0, label
        for key in ("ratio_to_gspo", "min_ratio_to_gspo"):
            assert math.isfinite(c[key]) and c[key] > 0, (label, key)
        assert math.isfinite(c["loss"]), label
    assert result["loss_backward"]["shape"] == [TINY["seqs"], TINY["max_len"]]
    assert result["loss_backward"]["groups"] == TINY["seqs"] // TINY["group_size"]


def test_inputs_make_the_transforms_act(result: dict) -> None:
    """s != 1, so DFPO's weights are not all 1 (the transforms are not the identity)."""
    c = result["loss_backward"]["cases"]["dfpo+orth_proj_plain"]
    assert c["w_max"] - c["w_min"] > 0


def test_every_transform_is_timed_at_every_size(result: dict) -> None:
    tr = result["transforms"]
    assert tr["n_groups"] == list(TINY["transform_groups"])
    assert tr["size_ratio"] == 8
    assert set(tr["cases"]) == {*TRANSFORM_CASES, WIDE_CASE}
    for name, c in tr["cases"].items():
        assert set(c["median_s"]) == set(TINY["transform_groups"]), name
        assert all(t > 0 for t in c["median_s"].values()), name
        assert math.isfinite(c["scaling"]) and c["scaling"] > 0, name
    # The wide input exists to exercise orth_proj's bisection path.
    assert any(tr["cases"][WIDE_CASE]["active_set_path"].values())


def test_acceptance_is_reported_not_asserted(result: dict) -> None:
    checks = result["acceptance"]
    assert len(checks) == 4  # two DFPO loss ratios, two transform scalings
    for c in checks:
        assert isinstance(c["passed"], bool) and math.isfinite(c["value"]), c["name"]


def test_single_transform_size_has_no_scaling() -> None:
    before = torch.get_num_threads()
    cfg = ObjectivesBenchConfig(**{**TINY, "repeats": 1, "threads": 1, "transform_groups": (8,)})
    res = run_objectives_bench(cfg, show=False)
    assert res["env"]["threads"] == 1
    assert torch.get_num_threads() == before  # restored
    assert all(c["scaling"] is None for c in res["transforms"]["cases"].values())
    assert len(res["acceptance"]) == 2


def test_acceptance_verdicts_follow_the_thresholds() -> None:
    """A ratio just inside the limit passes and just outside fails; scaling likewise."""
    inside, outside = LOSS_RATIO_MAX * 0.99, LOSS_RATIO_MAX * 1.01
    ratios = dict(zip(LOSS_ACCEPT_CASES, (inside, outside), strict=True))
    loss = {"cases": {label: {"ratio_to_gspo": r, "min_ratio_to_gspo": r}
                      for label, r in ratios.items()}}
    lo, hi = SCALING_BAND
    scalings = dict(zip(TRANSFORM_ACCEPT_CASES, (16 * (lo + hi) / 2, 16 * hi * 1.01), strict=True))
    transforms = {"size_ratio": 16, "n_groups": [4, 64],
                  "cases": {name: {"scaling": v} for name, v in scalings.items()}}
    verdicts = [c["passed"] for c in _acceptance(loss, transforms)]
    assert verdicts == [True, False, True, False]
    transforms["size_ratio"] = 1  # one size: no scaling to judge
    assert [c["passed"] for c in _acceptance(loss, transforms)] == [True, False]


def test_printed_report_marks_each_check(result: dict, capsys: pytest.CaptureFixture[str]) -> None:
    shown = {**result, "acceptance": [{"name": "check-a", "value": 1.0, "passed": True},
                                      {"name": "check-b", "value": 2.0, "passed": False}]}
    print_objectives_report(shown)
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("PASS") and "check-a" in line for line in lines)
    assert any(line.startswith("FAIL") and "check-b" in line for line in lines)
    assert not any(line.startswith("PASS") and "check-b" in line for line in lines)
    assert any("dfpo+orth_proj" in line for line in lines)


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"seqs": 30}, "seqs"),  # not divisible by group_size=4
        ({"seqs": 0}, "seqs"),
        ({"max_len": 0}, "max_len"),
        ({"group_size": 1, "seqs": 32}, "group_size"),
        ({"repeats": 0}, "repeats"),
        ({"warmup": -1}, "warmup"),
        ({"transform_groups": ()}, "transform_groups"),
        ({"transform_groups": (8, 0)}, "transform_groups"),
        ({"device": "not-a-device"}, "device"),
        ({"seqs": 32.0}, "seqs"),
        ({"threads": 0}, "threads"),
    ],
)
def test_bad_config_names_the_field(override: dict, field: str) -> None:
    with pytest.raises(ValueError, match=rf"ObjectivesBenchConfig\.{field}\b"):
        ObjectivesBenchConfig(**{**TINY, **override})
