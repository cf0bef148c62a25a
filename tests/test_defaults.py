"""One home per default: the config dataclasses. Every default in config/schema.yaml equals the
dataclass field it stands for; a new schema default must be mapped here (or listed as the
pipeline's own selection), so drift fails this test. CLI options need no such map: they are
generated from the dataclasses (repro/cli_fields.py, tests/test_cli_fields.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from repro.config_fields import field_defaults
from repro.evaluation.config import EvalConfig
from repro.plan.hardware import EvalLayout, Hardware, TrainLayout
from repro.reporting.study import Study
from repro.theory.config import TheoryConfig
from repro.training.config import TrainConfig

SCHEMA = yaml.safe_load(
    (Path(__file__).resolve().parents[1] / "config" / "schema.yaml").read_text()
)

# schema key -> (dataclass, field) whose default it must equal
SCHEMA_FIELDS: dict[str, tuple[type, str]] = {
    "experiment": (Study, "experiment"),
    "run.algorithms": (Study, "main_algos"),
    "eval.k": (EvalConfig, "k"),
    "eval.limit": (EvalConfig, "limit"),
    "eval.engine": (EvalConfig, "engine"),
    "eval.batch_size": (EvalConfig, "batch_size"),
    "eval.data_dir": (EvalConfig, "data_dir"),
    "eval.sampling": (EvalConfig, "sampling"),
    "eval.fractions": (TrainConfig, "checkpoint_fractions"),
    "ablations.algorithms": (Study, "ablation_algos"),
    "ablations.group_algorithms": (Study, "group_algos"),
    "report.baseline": (Study, "baseline"),
    "report.proposed": (Study, "proposed"),
    "report.threshold": (Study, "threshold"),
    "report.smooth_window": (Study, "smooth_window"),
    "theory.steps": (TheoryConfig, "steps"),
    "theory.seed": (TheoryConfig, "seed"),
    "hardware.gpu_type": (Hardware, "gpu_type"),
    "hardware.gpu_memory_gb": (Hardware, "gpu_memory_gb"),
    "hardware.host_memory_gb": (Hardware, "host_memory_gb"),
    "hardware.prompt_tokens": (Hardware, "prompt_tokens"),
    "hardware.train.nodes": (TrainLayout, "nodes"),
    "hardware.train.gpus_per_node": (TrainLayout, "gpus_per_node"),
    "hardware.eval.gpus": (EvalLayout, "gpus"),
    "hardware.eval.tokens_per_s": (EvalLayout, "tokens_per_s"),
}
# Defaults that belong to the pipeline alone (no dataclass has them): selections of the grid,
# and empty override blocks.
PIPELINE_ONLY = {"run", "run.models", "run.seeds", "eval", "eval.benchmarks", "eval.init",
                 "ablations", "ablations.group_sizes", "ablations.seeds", "ablations.all_fractions",
                 "report", "theory",
                 "models.*.sft", "algorithms.*.objective", "algorithms.*.train", "results",
                 "data_lock",
                 "hardware", "hardware.train", "hardware.eval"}

def schema_defaults(node: dict, prefix: str = "") -> dict[str, Any]:
    """Every `default` in the schema, by dotted key (`*` for a catalogue entry)."""
    out = {}
    for key, sub in node.get("properties", {}).items():
        path = f"{prefix}{key}"
        if "default" in sub:
            out[path] = sub["default"]
        out |= schema_defaults(sub, f"{path}.")
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        out |= schema_defaults(extra, f"{prefix}*.")
    return out


def plain(value: Any) -> Any:
    """Tuples as lists, Paths as strings: how YAML and the CLI spell them."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return str(value) if isinstance(value, Path) else value


def test_every_schema_default_is_the_dataclass_default():
    defaults = schema_defaults(SCHEMA)
    unmapped = sorted(set(defaults) - set(SCHEMA_FIELDS) - PIPELINE_ONLY)
    assert unmapped == [], f"schema defaults with no dataclass field named here: {unmapped}"
    assert set(SCHEMA_FIELDS) <= set(defaults), sorted(set(SCHEMA_FIELDS) - set(defaults))
    for key, (cls, name) in SCHEMA_FIELDS.items():
        assert plain(defaults[key]) == plain(field_defaults(cls)[name]), (key, cls.__name__, name)


def test_train_and_sft_help_come_from_the_dataclasses():
    """`repro train --help` lists TrainConfig's own defaults; no CLI copy exists to drift."""
    from repro.training.config import fields_help

    text = fields_help()
    for f in dataclasses.fields(TrainConfig):
        assert f"{f.name} [{field_defaults(TrainConfig)[f.name]!r}]" in text
