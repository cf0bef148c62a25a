"""Study 4's presets against its pre-registration (docs/preregistration-4.md) and its predictions
file, before anything runs: ten independent starts on the default's stage-1 recipe, the reuse
source shared by every arm, every arm at every unit (GRPO included), the denser clip grid
on pilot units that no confirmatory unit uses, nested units declared, and the admission band
the script applies equal to the registered one."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from committed import committed
from presets import resolved

from repro.pipeline.jobs import Jobs
from repro.reporting.verdict_spec import START, load_spec
from repro.training.sources import label_knobs

ROOT = Path(__file__).resolve().parents[1]
SPEC = load_spec(ROOT / "repro" / "reporting" / "predictions" / "preregistration-4.yaml")
PROSE = (ROOT / "docs" / "preregistration-4.md").read_text(encoding="utf-8")
RUN_KEYS = ("algo", "model", "group_size", "seed")


@pytest.fixture(scope="module")
def study() -> dict:
    return resolved("offpolicy4-study.yaml")


@pytest.fixture(scope="module")
def pilot() -> dict:
    return resolved("offpolicy4-pilot.yaml")


def stage1(config: dict, model: str) -> dict:
    entry = config["models"][model]
    while entry.get("base"):
        entry = config["models"][entry["base"]]
    return entry["sft"]


def test_ten_starts_each_its_own_stage1_on_the_default_recipe(study, pilot):
    recipe = resolved("mechanism-study.yaml")["models"]["tiny-base"]["sft"]
    stage2 = resolved("mechanism-study.yaml")["models"]["tiny-preamble-0"]["sft"]
    seeds = []
    for config in (study, pilot):
        for model in config["run"]["models"]:
            sft = stage1(config, model)
            assert {k: v for k, v in sft.items() if k not in ("seed", "model")} == {
                k: v for k, v in recipe.items() if k not in ("seed", "model")}, model
            assert config["models"][model]["sft"] == stage2, model
            assert sft["seed"] == sft["model"]["seed"], model
            seeds.append(sft["seed"])
    assert len(study["run"]["models"]) == 10 and len(pilot["run"]["models"]) == 2
    assert len(set(seeds)) == 12  # no start shared, pilot starts included
    assert "10 independent stage-1 models" in PROSE


def test_every_arm_at_every_unit_under_one_reuse_block(study):
    jobs = Jobs(study)
    jobs.check()
    runs = {(r["algo"], r["model"], r["seed"]) for r in jobs.run_keys()}
    units = {(m, s) for m in study["run"]["models"] for s in study["run"]["seeds"]}
    assert study["run"]["seeds"] == [0, 1] and not study["ablations"]["algorithms"]
    arms = {a for row in (*SPEC.gates, *SPEC.predictions) for a in (row.A, row.B)} - {None, START}
    assert arms | {"grpo"} == {label.rsplit("-", 1)[0] for label in study["run"]["algorithms"]}
    for arm in arms:
        assert {(m, s) for a, m, s in runs if a == f"{arm}-reuse"} == units, arm
    blocks = {tuple(sorted(label_knobs(study["algorithms"][a]).items()))
              for a in study["run"]["algorithms"]}
    assert blocks == {(("epochs", 2), ("minibatches", 4))}  # K = 4, 2 passes: the registered
    assert len(runs) == 140 and "140 runs" in PROSE


def test_the_registered_file_nests_units_in_their_start():
    assert (SPEC.cluster, SPEC.estimator) == ("run_model", "nested")
    assert SPEC.registered_for == "offpolicy4-study" and SPEC.subsets[0].name == "reuse"


def test_the_pilot_runs_the_denser_clip_grid_on_units_no_confirmatory_run_uses(study, pilot):
    eps = sorted(pilot["algorithms"][a]["objective"]["eps_low"] for a in pilot["run"]["algorithms"]
                 if a.startswith("gspo_e"))
    registered = re.search(r"symmetric eps from \{([^}]*)\}", " ".join(PROSE.split())).group(1)
    assert eps == sorted(float(x) for x in registered.split(","))
    assert {5e-4, 7e-4} <= set(eps)
    assert label_knobs(pilot["algorithms"]["dfpo_min_prod-reuse"]) == {"minibatches": 4,
                                                                       "epochs": 2}
    assert not set(pilot["run"]["seeds"]) & set(study["run"]["seeds"])


@pytest.mark.parametrize("preset", ["offpolicy4-study.yaml", "offpolicy4-pilot.yaml"])
def test_every_run_trains_on_the_preamble_task_alone(preset):
    jobs = Jobs(resolved(preset))
    keys = jobs.run_keys()
    config = jobs.run_config(SimpleNamespace(**{k: keys[0][k] for k in RUN_KEYS}))
    assert config["tasks"] == {"synth-preamble": 1.0}


def test_the_admission_script_applies_the_registered_band():
    spec = importlib.util.spec_from_file_location("admit", ROOT / "scripts" / "admit_study4.py")
    admit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(admit)
    lo, hi = (float(x) / 100 for x in re.search(r"band \*\*(\d+)% to (\d+)%\*\*",
                                                " ".join(PROSE.split())).groups())
    assert (lo, hi) == admit.BAND
    assert admit.admitted(lo) and admit.admitted(hi) and admit.admitted((lo + hi) / 2)
    assert not admit.admitted(lo - 1e-9) and not admit.admitted(hi + 1e-9)
    assert not admit.admitted(0.048)  # study 3's start that barely learned


def test_the_file_runs_through_the_engine_on_study3s_reuse_runs():
    """Before any study-4 run, its rules read study 3's aggregate (which has no geometric-mean
    arm and 3 starts): every gate and prediction is computed, the nested estimator is named,
    study 3's identity and Orth-Proj fail the stability check (their mean w_max 27 and 84) and
    the predictions they are in read "unstable", as the pre-registration expects."""
    from repro.reporting.load import load_aggregate
    from repro.reporting.verdict import verdict_tables_of

    table = verdict_tables_of(load_aggregate(committed("results/offpolicy-study/aggregate")),
                              SPEC)[0]
    rows = {r[0]: r for r in table.rows}
    assert list(rows) == [r.id for r in (*SPEC.gates, *SPEC.predictions)]
    assert {i: rows[i][-1] for i in ("S1", "S2", "S3", "N1", "N2", "N3")} == {
        "S1": "holds", "S2": "fails", "S3": "fails", "N1": "holds", "N2": "fails", "N3": "fails"}
    assert rows["S4"][-2] == "no paired units" and rows["Q3"][-1] == "unstable"
    assert {rows[q][-1] for q in ("Q2", "Q4", "Q5", "Q6", "Q8")} == {"unstable"}
    assert table.notes[-1].startswith("Estimator: nested bootstrap")
