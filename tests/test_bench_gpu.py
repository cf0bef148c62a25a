"""`repro bench gpu --tiny`: the GPU check's code path end to end on CPU (nothing measured on a
GPU here: the report says so)."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("trl")

from typer.testing import CliRunner  # noqa: E402

from repro.cli import app  # noqa: E402


@pytest.mark.slow
def test_tiny_gpu_bench_writes_its_report(tmp_path):
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(app, ["bench", "gpu", "--tiny", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["measured_on_gpu"] is False and report["device"] == "cpu"
    assert report["versions"]["trl"] == "1.16.0"
    assert [r["algorithm"] for r in report["runs"]] == ["gspo", "dfpo_min"]
    for run in report["runs"]:
        assert run["rollout_tokens_per_s"] > 0 and run["update_tokens_per_s"] > 0
        assert run["max_abs_logp_diff_trl_vs_response_logprobs"] < 1e-5  # float32 on CPU
        assert run["save_reload_max_abs_logit_diff"] == 0.0
        assert math.isnan(run["mfu_update"])  # no GPU peak to divide by
        assert run["prepass_overhead"] > 0
    dfpo = report["runs"][1]
    assert math.isnan(dfpo["asym"]) or dfpo["asym"] <= 1e-6
    assert report["fwdbwd"][0]["seconds"] > 0 and not report["skipped"]
