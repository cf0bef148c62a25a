"""Study 3's presets against its pre-registration (docs/preregistration-3.md) and its predictions
file: independent starts that follow the default's stage-1 recipe, every label naming its
off-policy source (repro/training/sources.py), every arm a prediction names run under every source's
label, and pilot units that no confirmatory run uses."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from presets import resolved

from repro.pipeline.jobs import Jobs
from repro.reporting.verdict_spec import START, load_spec

ROOT = Path(__file__).resolve().parents[1]
RUN_KEYS = ("algo", "model", "group_size", "seed")
SPEC = load_spec(ROOT / "repro" / "reporting" / "predictions" / "preregistration-3.yaml")


@pytest.fixture(scope="module")
def study() -> dict:
    return resolved("offpolicy-study.yaml")


@pytest.fixture(scope="module")
def pilot() -> dict:
    return resolved("offpolicy-pilot.yaml")


def stage1_seeds(config: dict, model: str) -> tuple[int, int]:
    """(SFT seed, model seed) of the stage-1 model that a run model's chain starts from."""
    entry = config["models"][model]
    while entry.get("base"):
        entry = config["models"][entry["base"]]
    sft = entry["sft"]
    return sft.get("seed", 0), sft.get("model", {}).get("seed", 0)


def test_the_starts_are_the_default_stage1_recipe_with_their_own_seeds(study):
    default = resolved("mechanism-study.yaml")
    recipe = default["models"]["tiny-base"]["sft"]
    stage2 = default["models"]["tiny-preamble-0"]["sft"]
    seeds = []
    for model in study["run"]["models"]:
        stage1 = study["models"][study["models"][model]["base"]]
        assert study["models"][model]["sft"] == stage2, model
        sft = {k: v for k, v in stage1["sft"].items() if k not in ("seed", "model")}
        assert sft == {k: v for k, v in recipe.items() if k not in ("seed", "model")}, model
        seeds.append(stage1_seeds(study, model))
    assert len(seeds) == 3 and len(set(seeds)) == 3 and all(s == m for s, m in seeds)


def labels_of(config: dict) -> list[str]:
    return config["run"]["algorithms"] + config["ablations"]["algorithms"]


@pytest.mark.parametrize("preset", ["offpolicy-study.yaml", "offpolicy-pilot.yaml"])
def test_every_label_names_a_source_its_label_spells(preset):
    """Each run label's entry names its source (no label is parsed to find it), one of the
    predictions file's subsets, and the label is that subset's label for some arm, so the
    verdict engine's subsets hold exactly the runs of their source."""
    config = resolved(preset)
    subsets = {s.name: s for s in SPEC.subsets}
    for label in labels_of(config):
        entry = config["algorithms"][label]
        assert entry.get("source") in subsets and not entry["train"], label
        pattern = re.escape(subsets[entry["source"]].label).replace(re.escape("{arm}"), ".+")
        assert re.fullmatch(pattern, label), label


def test_the_pilot_measures_the_studys_sources(study, pilot):
    def sources(config: dict) -> set[str]:
        return {config["algorithms"][label]["source"] for label in labels_of(config)}

    assert sources(pilot) == sources(study) == {s.name for s in SPEC.subsets}


def test_every_arm_the_predictions_name_runs_under_every_source(study):
    jobs = Jobs(study)
    jobs.check()
    runs = {(r["algo"], r["model"], r["seed"]) for r in jobs.run_keys()}
    for row in (*SPEC.gates, *SPEC.predictions):
        for arm in (row.A, row.B):
            if arm in (None, START):
                continue
            for subset in SPEC.subsets:
                label = subset.label.format(arm=arm)
                units = {(m, s) for a, m, s in runs if a == label}
                assert len(units) >= 3, (row.id, label)  # every start at RL seed 0 at least
                assert {m for m, _ in units} == set(study["run"]["models"]), (row.id, label)


def test_the_pilot_units_are_not_confirmatory_units(study, pilot):
    pilot_starts = {stage1_seeds(pilot, m) for m in pilot["run"]["models"]}
    study_starts = {stage1_seeds(study, m) for m in study["run"]["models"]}
    assert not pilot_starts & study_starts
    study_seeds = set(study["run"]["seeds"]) | set(study["ablations"]["seeds"])
    assert not set(pilot["run"]["seeds"]) & study_seeds


@pytest.mark.parametrize("preset", ["offpolicy-study.yaml", "offpolicy-pilot.yaml"])
def test_every_run_trains_on_the_preamble_task_alone(preset):
    """The pre-registration's task: config.yaml's synth-rule must not merge into `train.tasks`
    (a mapping: the mechanism study's preset merged it, docs/results.md says what that did)."""
    jobs = Jobs(resolved(preset))
    for r in jobs.run_keys():
        config = jobs.run_config(SimpleNamespace(**{k: r[k] for k in RUN_KEYS}))
        assert config["tasks"] == {"synth-preamble": 1.0}, r
