"""`BenchmarkSpec`: one benchmark declared as data (a YAML file), validated on load.

In the spirit of lm-eval task YAMLs: what to load (source, dataset id, revision, split, files),
how a hub row becomes a `Problem` (field mapping), how it is prompted and graded, and how it is
sampled. Every error names the YAML file and the offending key, so a typo fails at parse time.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from repro.benchmarks.lcb import shards_for_release
from repro.benchmarks.problem import COMPAT_MODES
from repro.generation.base import SamplingConfig

KINDS = ("math", "code")
SOURCES = ("hub", "lcb_jsonl", "synthetic")
TEMPLATES = {"math": "math", "math-integer": "math", "lcb-generic": "code"}  # template -> kind
GRADERS = ("math", "code")
PROBLEM_TARGETS = ("problem_id", "question", "answer", "starter_code")
TEST_TARGETS = ("tests.public", "tests.private", "tests.metadata")  # LCB JSON-string fields
REQUIRED_TARGETS = {
    "math": ("problem_id", "question", "answer"),
    "code": ("problem_id", "question", "tests.public", "tests.private"),
}

_COMMON = (
    "name", "description", "kind", "source", "template", "grader", "default_k", "sampling",
    "compat", "lm_eval",
)
_BY_SOURCE = {
    "hub": ("dataset", "revision", "split", "files", "fields", "expected_count"),
    "lcb_jsonl": (
        "dataset", "revision", "split", "fields", "expected_count", "shards", "release",
        "start_date", "end_date", "sha256",
    ),
    "synthetic": ("twin", "generator", "split", "n", "seed"),
}
_OPTIONAL = ("expected_count", "sha256", "compat", "lm_eval")


class BenchmarkSpecError(ValueError):
    """A benchmark YAML is invalid; the message starts with the file and names the key."""


@dataclass(frozen=True)
class BenchmarkSpec:
    name: str  # registry name, equal to the YAML file's stem
    description: str
    kind: str  # math | code
    source: str  # hub | lcb_jsonl | synthetic
    template: str  # math | math-integer | lcb-generic
    grader: str  # math | code
    default_k: int  # samples per problem for avg@k
    sampling: Mapping[str, float]  # SamplingConfig fields except n and seed (the run sets those)
    split: str
    compat: str = "default"  # grader convention (problem.COMPAT_MODES); results record it
    lm_eval: bool = False  # also an lm-eval task (repro/lmeval/generate.py writes its YAML)
    fields: Mapping[str, str] = field(default_factory=dict)  # hub field -> Problem target
    dataset: str | None = None  # hub dataset id
    revision: str = "main"  # branch, tag or commit; the loader records the resolved commit
    files: tuple[str, ...] = ()  # hub: glob patterns inside the dataset repo
    expected_count: int | None = None  # the full set's size, checked when loading it whole
    shards: tuple[str, ...] = ()  # LCB: release shard file names, in release order
    release: str | None = None  # LCB default tag: release_vN | vN | vA_vB | release_latest
    start_date: dt.date | None = None  # LCB default contest_date window, both bounds inclusive
    end_date: dt.date | None = None
    sha256: Mapping[str, str] = field(default_factory=dict)  # LCB: shard file name -> sha256
    twin: str | None = None  # synthetic: the real benchmark whose field mapping it reuses
    generator: str | None = None  # synthetic: "module:function" with rows(split, n, seed)
    n: int | None = None  # synthetic: problems generated
    seed: int | None = None  # synthetic: generator seed
    path: Path | None = None  # the YAML this spec came from (error messages)


def parse_spec(raw: Any, path: Path) -> BenchmarkSpec:
    """Validate one parsed YAML mapping; `fields` of a synthetic spec is filled in by its twin."""
    where = str(path)

    def fail(key: str, rule: str, value: Any = dataclasses.MISSING) -> BenchmarkSpecError:
        got = "" if value is dataclasses.MISSING else f", got {value!r}"
        return BenchmarkSpecError(f"{where}: key '{key}': {rule}{got}")

    if not isinstance(raw, dict):
        raise BenchmarkSpecError(f"{where}: expected a mapping of keys, got {type(raw).__name__}")
    source = raw.get("source")
    if source not in SOURCES:
        raise fail("source", f"must be one of {list(SOURCES)}", source)
    allowed = _COMMON + _BY_SOURCE[source]
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise fail(unknown[0], f"unknown key for source {source!r} (allowed: {sorted(allowed)})")
    missing = [key for key in allowed if key not in raw and key not in _OPTIONAL]
    if missing:
        raise fail(missing[0], "is required")

    def text(key: str) -> str:
        value = raw[key]
        if not isinstance(value, str) or not value:
            raise fail(key, "must be a non-empty string", value)
        return value

    def choice(key: str, options: tuple[str, ...] | dict[str, str]) -> str:
        if not isinstance(raw[key], str) or raw[key] not in options:
            raise fail(key, f"must be one of {list(options)}", raw[key])
        return raw[key]

    def integer(key: str, minimum: int) -> int:
        value = raw[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise fail(key, f"must be an integer >= {minimum}", value)
        return value

    def names(key: str) -> tuple[str, ...]:
        value = raw[key]
        if not isinstance(value, list) or not value or not all(
            isinstance(v, str) and v for v in value
        ):
            raise fail(key, "must be a non-empty list of strings", value)
        return tuple(value)

    def date(key: str) -> dt.date:
        value = raw[key]
        if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            return value
        try:
            return dt.date.fromisoformat(str(value))
        except ValueError:
            raise fail(key, "must be a date YYYY-MM-DD", value) from None

    name = text("name")
    if name != path.stem:
        raise fail("name", f"must equal the file name {path.stem!r}", name)
    kind = choice("kind", KINDS)
    template = choice("template", TEMPLATES)
    if TEMPLATES[template] != kind:
        raise fail("template", f"is a {TEMPLATES[template]} template but kind is {kind!r}",
                   template)
    grader = choice("grader", GRADERS)
    if grader != kind:
        raise fail("grader", f"must match kind {kind!r}", grader)
    default_k = integer("default_k", 1)
    modes = COMPAT_MODES[grader]
    compat = raw.get("compat", modes[0])
    if compat not in modes:
        raise fail("compat", f"must be one of {list(modes)} for the {grader} grader", compat)
    sampling = raw["sampling"]
    if not isinstance(sampling, dict):
        raise fail("sampling", "must be a mapping", sampling)
    known = {f.name for f in dataclasses.fields(SamplingConfig)} - {"n", "seed"}
    for key, value in sampling.items():
        if key not in known:
            raise fail(f"sampling.{key}", f"unknown sampling key (allowed: {sorted(known)})")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise fail(f"sampling.{key}", "must be a number", value)
    try:
        SamplingConfig(**sampling)
    except ValueError as exc:
        bad = next((key for key in sampling if f".{key} " in str(exc)), "?")
        raise fail(f"sampling.{bad}", str(exc)) from None

    lm_eval = raw.get("lm_eval", False)
    if not isinstance(lm_eval, bool):
        raise fail("lm_eval", "must be true or false", lm_eval)
    values: dict[str, Any] = dict(
        name=name, description=text("description"), kind=kind, source=source, template=template,
        grader=grader, default_k=default_k, sampling=dict(sampling), split=text("split"), path=path,
        compat=compat, lm_eval=lm_eval,
    )
    if source in ("hub", "lcb_jsonl"):
        values.update(dataset=text("dataset"), revision=text("revision"))
        values["fields"] = _fields(raw["fields"], kind, fail)
        if raw.get("expected_count") is not None:
            values["expected_count"] = integer("expected_count", 1)
    if source == "hub":
        values["files"] = names("files")
        if not all(pattern.endswith(".parquet") for pattern in values["files"]):
            raise fail("files", "must be parquet file patterns (*.parquet)", raw["files"])
    if source == "lcb_jsonl":
        values["shards"] = names("shards")
        values["release"] = text("release")
        try:
            shards_for_release(values["release"], values["shards"])
        except ValueError as exc:
            raise fail("release", str(exc)) from None
        values["start_date"], values["end_date"] = date("start_date"), date("end_date")
        if values["start_date"] > values["end_date"]:
            raise fail("end_date", "must not be before start_date", raw["end_date"])
        pins = raw.get("sha256") or {}
        if not isinstance(pins, dict):
            raise fail("sha256", "must be a mapping of shard file -> sha256", pins)
        for shard, digest in pins.items():
            if shard not in values["shards"]:
                raise fail(f"sha256.{shard}", f"not one of the shards {list(values['shards'])}")
            if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
                raise fail(f"sha256.{shard}", "must be 64 lowercase hex digits", digest)
        values["sha256"] = dict(pins)
    if source == "synthetic":
        values.update(twin=text("twin"), n=integer("n", 1), seed=integer("seed", 0))
        generator = text("generator")
        if not re.fullmatch(r"[\w.]+:\w+", generator):
            raise fail("generator", "must be 'module:function'", generator)
        values["generator"] = generator
    return BenchmarkSpec(**values)


def _fields(raw: Any, kind: str, fail: Any) -> dict[str, str]:
    if not isinstance(raw, dict) or not raw:
        raise fail("fields", "must be a mapping of hub field -> Problem target", raw)
    targets = PROBLEM_TARGETS + (TEST_TARGETS if kind == "code" else ())
    for hub_field, target in raw.items():
        ok = isinstance(target, str) and (
            target in targets or re.fullmatch(r"metadata\.\w+", target) is not None
        )
        if not ok:
            raise fail(f"fields.{hub_field}", f"target must be one of {list(targets)} or "
                       "'metadata.<name>'", target)
    mapped = list(raw.values())
    for target in REQUIRED_TARGETS[kind]:
        if target not in mapped:
            raise fail("fields", f"no hub field is mapped to {target!r}")
    duplicated = sorted({t for t in mapped if mapped.count(t) > 1})
    if duplicated:
        raise fail("fields", f"target {duplicated[0]!r} is mapped twice")
    return dict(raw)


def read_spec_yaml(path: Path) -> Any:
    """Parse a YAML file, reporting syntax errors with the file name."""
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise BenchmarkSpecError(f"{path}: invalid YAML: {exc}") from None
