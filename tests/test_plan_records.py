"""Tracked peaks as data (`repro.plan.records`, issue 48): `repro plan --measure --record` writes
what the tracker measured, the parse-time plan checks the job against it, a changed job finds no
record, and every paper preset's train job has one."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from repro.cli import app
from repro.plan import PlanRefusal, load_config, plan_jobs
from repro.plan.measure import job_spec
from repro.plan.records import RECORDS, find_record, fingerprint, record_path

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "config" / "config.yaml"
PAPER = ("paper-qwen3-32b", "paper-qwen3-next-80b")
# a 4-layer model at a tiny width on the 32B preset's layout: its trace takes seconds
SMALL = {"models": {"qwen3-32b": {"config": {
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 8,
    "num_key_value_heads": 4, "head_dim": 16, "vocab_size": 512}}},
    "train": {"max_new_tokens": 24, "trl_args": {"vllm_max_model_length": 32}},
    "hardware": {"prompt_tokens": 8}}


@pytest.fixture
def records(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "memory"
    monkeypatch.setattr("repro.plan.records.RECORDS", root)
    return root


def _small(tmp_path: Path, **train) -> list[Path]:
    overlay = tmp_path / "small.yaml"
    overlay.write_text(yaml.safe_dump(SMALL | {"train": SMALL["train"] | train}))
    return [ROOT / "config" / "presets" / "paper-qwen3-32b.yaml", overlay]


def _record(tmp_path: Path) -> Path:
    args = ["plan", "--measure", "--record", "--base", str(BASE)]
    for path in _small(tmp_path):
        args += ["--configfile", str(path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return Path(result.output.split("recorded: ")[1].split()[0])


def test_a_recorded_trace_joins_the_parse_time_plan(tmp_path, records):
    config = load_config(BASE, _small(tmp_path))
    note = "arithmetic only: no tracked record for this job"
    assert any(note in n for n in plan_jobs(config)[0].notes)  # nothing recorded yet
    path = _record(tmp_path)
    assert path.parent == records
    body = json.loads(path.read_text())
    assert body["fingerprint"] == fingerprint(job_spec(config, "qwen3-32b"))
    assert body["layers"] == 4 and body["extrapolated_from"] is None  # 4 layers: traced whole
    train = plan_jobs(config)[0]
    tracked = [p for p in train.phases if p.name.startswith("tracked ")]
    assert len(tracked) == 1 and not any(note in n for n in train.notes)
    stage = max(body["stages"], key=lambda s: body["stages"][s]["Total"])
    assert tracked[0].name.startswith(f"tracked {stage} (")
    vllm = train.phases[1].items["vLLM asleep"]  # the update's: the tracker does not see vLLM
    assert tracked[0].total_gb == pytest.approx(body["stages"][stage]["Total"] / 1e9 + vllm)


def test_a_changed_job_finds_no_record(tmp_path, records):
    _record(tmp_path)
    config = load_config(BASE, _small(tmp_path, max_new_tokens=16))
    assert find_record("qwen3-32b", job_spec(config, "qwen3-32b")) is None
    assert any("arithmetic only" in n for n in plan_jobs(config)[0].notes)
    spec = job_spec(config, "qwen3-32b")  # what a record does not depend on
    assert fingerprint(dataclasses.replace(spec, seed=3, real=True)) == fingerprint(spec)


def test_a_recorded_peak_over_the_gpu_is_refused_at_parse_time_naming_the_knob(tmp_path,
                                                                               records):
    path = _record(tmp_path)
    body = json.loads(path.read_text())
    for cats in body["stages"].values():  # the record says the step needs 200 GB per GPU
        cats["Activation"] += int(200e9)
        cats["Total"] += int(200e9)
    path.write_text(json.dumps(body))
    with pytest.raises(PlanRefusal, match=r"^config train\.trl_args\.gradient_accumulation_steps"
                       r"|^config hardware\.train\.nodes: the forward \+ backward peaks at"):
        plan_jobs(load_config(BASE, _small(tmp_path)))


def test_a_record_that_does_not_match_its_name_is_an_error_naming_it(tmp_path, records):
    path = _record(tmp_path)
    body = json.loads(path.read_text())
    path.write_text(json.dumps(body | {"fingerprint": "0" * 64}))
    with pytest.raises(ValueError, match=rf"^{path}: its fingerprint"):
        plan_jobs(load_config(BASE, _small(tmp_path)))


@pytest.mark.parametrize("preset", PAPER)
def test_every_paper_preset_train_job_has_a_record(preset):
    """A preset edited after its measurement fails here: re-record it (docs/gpu.md)."""
    config = load_config(BASE, [ROOT / "config" / "presets" / f"{preset}.yaml"])
    for key in config["run"]["models"]:
        spec = job_spec(config, key)
        assert find_record(key, spec) is not None, (
            f"no record {record_path(key, spec).relative_to(ROOT)}: run repro plan --measure "
            f"--record --configfile config/presets/{preset}.yaml")
    plans = [p for p in plan_jobs(config) if p.job == "train"]
    assert plans and all(any(ph.name.startswith("tracked ") for ph in p.phases) for p in plans)
    assert RECORDS == ROOT / "config" / "memory"
