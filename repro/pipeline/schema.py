"""config/schema.yaml and docs/config-reference.md, generated from the config dataclasses.

Decision (issue 51): the dataclasses are the one definition of a config key (name, type,
default, bounds in `metadata`, description in `metadata["help"]`). The workflow keeps a JSON
schema because Snakemake's `validate` fills the defaults and refuses a bad value in one line
at parse time; that file is this module's output, never edited by hand. After changing a field,
run `python -m repro.pipeline.schema` (writes both files); `--check` prints what a rerun would
change and exits 1, and tests/test_config_schema.py runs it, so a stale file fails CI the way
`repro report --check` does.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from repro.config_fields import field_defaults

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = Path("config/schema.yaml")
REFERENCE = Path("docs/config-reference.md")
HEADER = ("# Generated from the config dataclasses (repro/pipeline/config.py and the classes it "
          "names)\n# by `python -m repro.pipeline.schema`: edit those, not this file.\n")
_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", Path: "string"}
_BOUNDS = {"min": "minimum", "max": "maximum", "exclusive_min": "exclusiveMinimum",
           "exclusive_max": "exclusiveMaximum", "min_length": "minLength"}


def _plain(value: Any) -> Any:
    """A default as YAML spells it (tuples as lists, paths as strings, dataclasses as {})."""
    if dataclasses.is_dataclass(value):
        return {}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return str(value) if isinstance(value, Path) else value


def _rules(meta: typing.Mapping[str, Any], is_object: bool) -> dict[str, Any]:
    out = {_BOUNDS[k]: v for k, v in meta.items() if k in _BOUNDS}
    if "choices" in meta:
        out["enum"] = list(meta["choices"])
    if "min_items" in meta:
        out["minProperties" if is_object else "minItems"] = meta["min_items"]
    if "required" in meta:
        out["required"] = list(meta["required"])
    if "forbidden" in meta:
        out["not"] = {"anyOf": [{"required": [k]} for k in meta["forbidden"]]}
    return out


def type_schema(hint: Any, meta: typing.Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON schema of an annotation, with the bounds of `meta` (a field's metadata)."""
    meta = meta or {}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        out = type_schema(rest[0], meta)
        if "type" in out:
            out["type"] = [out["type"], "null"]
            if "enum" in out:
                out["enum"] = [*out["enum"], None]
        return out
    if dataclasses.is_dataclass(hint):
        return object_schema(hint)
    if origin in (list, tuple):
        out = {"type": "array", "items": type_schema(args[0], meta.get("items"))}
        return out | _rules(meta, False)
    if origin is dict:
        out: dict[str, Any] = {"type": "object"}
        if args and args[1] is not Any:
            out["additionalProperties"] = type_schema(args[1])
        return out | _rules(meta, True)
    if hint in _TYPES:
        return {"type": _TYPES[hint]} | _rules(meta, False)
    return {}


def object_schema(cls: type) -> dict[str, Any]:
    """A dataclass as a closed object: one property per field, its help, type, bounds and
    default (none for a field without one, which is then required, or an `unset` one)."""
    hints, defaults = typing.get_type_hints(cls), field_defaults(cls)
    props: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        text = " ".join(f.metadata["help"].split())
        prop = {"description": text} | type_schema(hints[f.name], f.metadata)
        if f.name in defaults and not f.metadata.get("unset"):
            prop["default"] = _plain(defaults[f.name])
        props[f.name] = prop
    out: dict[str, Any] = {"type": "object", "additionalProperties": False}
    required = [f.name for f in dataclasses.fields(cls) if f.name not in defaults]
    return out | ({"required": required} if required else {}) | {"properties": props}


def pipeline_schema() -> dict[str, Any]:
    """The schema Snakemake validates the pipeline config with (rules/common.smk)."""
    from repro.pipeline.config import PipelineConfig

    body = object_schema(PipelineConfig)
    doc = " ".join((PipelineConfig.__doc__ or "").split())
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "description": doc} | body


def schema_text() -> str:
    return HEADER + yaml.safe_dump(pipeline_schema(), sort_keys=False, width=88,
                                   allow_unicode=True)


def _type_name(hint: Any) -> str:
    """`int | None`, `dict[str, ModelEntry]`: the annotation without module paths."""
    text = getattr(hint, "__name__", None) if typing.get_origin(hint) is None else None
    text = text or str(hint).replace("NoneType", "None")
    return re.sub(r"\b(?:[a-z_]+\.)+(?=[A-Za-z_]+)", "", text)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _rows(cls: type, prefix: str) -> list[str]:
    """One Markdown row per field (nested dataclasses flattened to dotted keys)."""
    hints, defaults = typing.get_type_hints(cls), field_defaults(cls)
    rows = []
    for f in dataclasses.fields(cls):
        hint, key = hints[f.name], f"{prefix}{f.name}"
        if dataclasses.is_dataclass(hint) and "chosen_by" not in f.metadata:
            rows.append(f"| `{key}` | mapping | | | {_cell(f.metadata['help'])} |")
            rows += _rows(hint, f"{key}.")
            continue
        rules = {k: v for k, v in f.metadata.items()
                 if k not in ("help", "like", "unset", "forbidden", "chosen_by")}
        if "chosen_by" in f.metadata:  # a tagged union: the class is named by another key
            hint = f"{_type_name(hint)} chosen by {f.metadata['chosen_by']}"
        bounds = ", ".join(f"{k} {list(v) if isinstance(v, tuple) else v}"
                           for k, v in rules.items())
        default = "" if f.name not in defaults or f.metadata.get("unset") else \
            f"`{json.dumps(_plain(defaults[f.name]), default=str)}`"
        same = f" (= `{f.metadata['like']}`)" if "like" in f.metadata else ""
        rows.append(f"| `{key}` | `{_cell(_type_name(hint))}` | {_cell(default)} | "
                    f"{_cell(bounds)} | {_cell(f.metadata['help'])}{same} |")
    return rows


def _table(title: str, intro: str, cls: type, prefix: str = "") -> list[str]:
    return [f"## {title}", "", intro, "", "| key | type | default | bounds | meaning |",
            "|---|---|---|---|---|", *_rows(cls, prefix), ""]


def reference_text() -> str:
    """docs/config-reference.md: every key of the pipeline config and of the dataclass blocks."""
    from repro.objectives import algorithm_names, get_algorithm
    from repro.pipeline.config import PipelineConfig
    from repro.training.config import TrainConfig
    from repro.training.sft_config import SFTConfig

    lines = ["# Config reference", "",
             "Generated by `python -m repro.pipeline.schema` from the config dataclasses (with "
             "config/schema.yaml); edit the dataclass, not this file. `(= Class.field)`: the key "
             "stands for that field. A preset sets only what differs from config/config.yaml.", ""]
    lines += _table("The pipeline config", "config/config.yaml and every preset "
                    "(`repro/pipeline/config.py`).", PipelineConfig)
    lines += _table("`train:` (TrainConfig)", "Shared by every run; also `repro train`'s "
                    "KEY=VALUE overrides (`repro/training/config.py`).", TrainConfig, "train.")
    for name in algorithm_names():
        cls = get_algorithm(name).config_cls
        lines += _table(f"`objective:` of algorithm {name} ({cls.__name__})",
                        "Keys of a catalogue entry's `objective:` with this `algorithm:`.",
                        cls, "objective.")
    lines += _table("`models.*.sft` (SFTConfig)", "`repro sft`'s options "
                    "(`repro/training/sft_config.py`).", SFTConfig, "sft.")
    return "\n".join(lines)


def outputs() -> dict[Path, str]:
    return {SCHEMA: schema_text(), REFERENCE: reference_text()}


def check(root: Path = ROOT) -> str:
    """The unified diff a rerun would make to the committed files ('' when none)."""
    diff = []
    for rel, text in outputs().items():
        path = root / rel
        old = path.read_text() if path.is_file() else ""
        diff += difflib.unified_diff(old.splitlines(True), text.splitlines(True),
                                     str(rel), f"{rel} (generated)")
    return "".join(diff)


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        diff = check()
        print(diff or "config/schema.yaml and docs/config-reference.md are up to date")
        return 1 if diff else 0
    if argv:
        print("usage: python -m repro.pipeline.schema [--check]", file=sys.stderr)
        return 2
    from repro.atomic import atomic_file

    for rel, text in outputs().items():
        atomic_file(ROOT / rel, lambda tmp, text=text: tmp.write_text(text))
        print(f"wrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
