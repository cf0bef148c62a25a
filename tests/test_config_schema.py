"""One definition per config key: config/schema.yaml, docs/config-reference.md, the CLI options
and `repro train --help` are generated from the config dataclasses (repro/pipeline/schema.py),
so a new field is one edit; these tests prove it on a throwaway field."""

from __future__ import annotations

import dataclasses

import typer
import yaml
from typer.testing import CliRunner

import repro.pipeline.config as pipeline_config
import repro.training.config as train_config
from repro.cli_fields import config_options
from repro.config_bounds import setting
from repro.config_fields import field_defaults
from repro.pipeline import schema
from repro.pipeline.config import ReportSection
from repro.theory.config import TheoryConfig
from repro.training.config import TrainConfig

THROWAWAY = ("throwaway_knob", int, setting(3, "A throwaway key, for this test only.", min=1))


def test_the_committed_schema_and_reference_are_the_generated_ones():
    """As `repro report --check`: a field edited without `python -m repro.pipeline.schema`
    fails here, with the diff a rerun would make."""
    assert schema.check() == "", "run: python -m repro.pipeline.schema"


def test_a_new_pipeline_key_reaches_the_schema_and_the_reference(monkeypatch, tmp_path):
    extended = dataclasses.make_dataclass("ReportSection", [THROWAWAY], bases=(ReportSection,))
    monkeypatch.setattr(pipeline_config, "ReportSection", extended)
    prop = schema.pipeline_schema()["properties"]["report"]["properties"]["throwaway_knob"]
    assert prop == {"description": "A throwaway key, for this test only.", "type": "integer",
                    "minimum": 1, "default": 3}
    assert "| `report.throwaway_knob` | `int` | `3` | min 1 | A throwaway key" in \
        schema.reference_text()
    # and Snakemake's validation fills its default from it
    from snakemake.utils import validate

    config = {"models": {"m": {"source": "sft"}}, "algorithms": {"a": {"algorithm": "gspo"}},
              "train": {"prompts_per_step": 2, "group_size": 2, "minibatches": 1}}
    path = tmp_path / "schema.yaml"
    path.write_text(yaml.safe_dump(schema.pipeline_schema()))
    validate(config, str(path), set_default=True)
    assert config["report"]["throwaway_knob"] == 3


def test_a_new_train_field_reaches_the_reference_and_train_help(monkeypatch):
    extended = dataclasses.make_dataclass("TrainConfig", [THROWAWAY], bases=(TrainConfig,))
    monkeypatch.setattr(train_config, "TrainConfig", extended)
    assert "| `train.throwaway_knob` | `int` | `3` |" in schema.reference_text()
    assert "throwaway_knob [3]: A throwaway key" in train_config.fields_help()


def test_a_new_field_becomes_a_cli_option():
    extended = dataclasses.make_dataclass("TheoryConfig", [THROWAWAY], bases=(TheoryConfig,))
    app, seen = typer.Typer(), []

    @app.command()
    @config_options(extended)
    def run(settings: dict) -> None:
        seen.append(extended(**settings))

    runner = CliRunner()
    assert "--throwaway-knob" in runner.invoke(app, ["--help"], terminal_width=200).output
    result = runner.invoke(app, ["--throwaway-knob", "5"])
    assert result.exit_code == 0, result.output
    assert seen[0].throwaway_knob == 5


def test_a_bound_written_once_is_checked_by_the_dataclass_and_the_schema():
    """The schema's minimum and __post_init__'s refusal come from the same metadata."""
    import pytest

    with pytest.raises(ValueError, match=r"TheoryConfig.steps must be >= 1, got 0"):
        TheoryConfig(steps=0)
    theory = schema.pipeline_schema()["properties"]["theory"]["properties"]
    assert theory["steps"]["minimum"] == 1
    assert theory["steps"]["default"] == field_defaults(TheoryConfig)["steps"]


def test_train_help_comes_from_the_dataclass():
    """`repro train --help` lists TrainConfig's own defaults; no CLI copy exists to drift."""
    text = train_config.fields_help()
    for f in dataclasses.fields(TrainConfig):
        assert f"{f.name} [{field_defaults(TrainConfig)[f.name]!r}]" in text


def test_the_schema_file_parses_as_the_generator_wrote_it():
    text = (schema.ROOT / schema.SCHEMA).read_text()
    assert yaml.safe_load(text) == schema.pipeline_schema()


def test_an_objective_key_foreign_to_the_algorithm_is_refused_at_parse_time():
    """The objective's class is chosen by `algorithm`: GSPO has no `transform` (DFPO's)."""
    import pytest

    from repro.pipeline.checks import check_dataclass_blocks

    config = {"train": {}, "models": {},
              "algorithms": {"bad": {"algorithm": "gspo", "objective": {"transform": "x"}}}}
    with pytest.raises(ValueError) as err:
        check_dataclass_blocks(config)
    message = str(err.value)
    assert "\n" not in message and message.startswith("config algorithms.bad.objective: ")
    assert "['transform']" in message
    with pytest.raises(ValueError, match=r"objective: unknown GSPOConfig key\(s\) \['transform'\]"):
        train_config.load_train_config(None, ["model=m", "algorithm=gspo",
                                              "objective.transform=min_replace"])
