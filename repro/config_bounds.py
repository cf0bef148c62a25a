"""A config field's default, help and bounds, written once in its dataclass's metadata.

Bounds (`BOUNDS`): min, max, exclusive_min, exclusive_max, choices, min_items, min_length,
items (the same for a list's items). `check_bounds` applies them in a dataclass's
`__post_init__`, and `repro.pipeline.schema` writes them into config/schema.yaml and
docs/config-reference.md, so a bound is written once. A module of its own, apart from
`repro.config_fields` (the key and type checks), so the SFT job, whose SamplingConfig uses it,
does not rerun when those checks change (tests/test_pipeline_sources.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

# `required`/`forbidden`: keys a mapping field must hold / may not hold; `unset`: the key has
# no default, absent unless given (the dataclass's default stands for "absent").
BOUNDS = ("min", "max", "exclusive_min", "exclusive_max", "choices", "min_items", "min_length",
          "items", "required", "forbidden", "unset")


def setting(default: Any, help_text: str, **bounds: Any) -> Any:
    """A dataclass field with its default, help and bounds (a list or dict default is copied
    per instance). Why: one call keeps the three together, where the schema reads them."""
    unknown = sorted(set(bounds) - set(BOUNDS))
    if unknown:
        raise TypeError(f"unknown bound(s) {unknown}; known: {list(BOUNDS)}")
    meta = {"help": help_text, **bounds}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta)
    if dataclasses.is_dataclass(default):
        return dataclasses.field(default_factory=lambda: dataclasses.replace(default),
                                 metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def like(cls: type, name: str, **changes: Any) -> Any:
    """A field with the default, help and bounds of `cls.name`, `changes` over its metadata: a
    pipeline key that stands for a dataclass field (report.baseline is Study.baseline) reads
    them there instead of copying them."""
    f = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    if f is None:
        raise TypeError(f"{cls.__name__} has no field {name!r}")
    meta = dict(f.metadata) | changes | {"like": f"{cls.__name__}.{name}"}
    if f.default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=f.default_factory, metadata=meta)
    return dataclasses.field(default=f.default, metadata=meta)


def bound_rules(meta: Mapping[str, Any]) -> list[tuple[Any, str]]:
    """(test, rule) pairs of a field's numeric bounds and choices, in the words of an error."""
    lo, hi = meta.get("min", meta.get("exclusive_min")), meta.get("max", meta.get("exclusive_max"))
    rules: list[tuple[Any, str]] = []
    if lo is not None and hi is not None:
        left, right = ("[" if "min" in meta else "("), ("]" if "max" in meta else ")")
        rules.append((lambda v: (v >= lo if "min" in meta else v > lo)
                      and (v <= hi if "max" in meta else v < hi),
                      f"must be in {left}{lo}, {hi}{right}"))
    elif lo is not None:
        rules.append(((lambda v: v >= lo), f"must be >= {lo}") if "min" in meta
                     else ((lambda v: v > lo), f"must be > {lo}"))
    elif hi is not None:
        rules.append(((lambda v: v <= hi), f"must be <= {hi}") if "max" in meta
                     else ((lambda v: v < hi), f"must be < {hi}"))
    if "choices" in meta:
        rules.append(((lambda v: v in meta["choices"]), f"must be one of {list(meta['choices'])}"))
    return rules


def check_bounds(obj: Any, spell: Callable[[str], str] | None = None) -> None:
    """Raise ValueError for the first field of `obj` outside its metadata bounds (None passes:
    an optional field unset). `spell` names the field (a CLI's `--name`); default `Cls.name`."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if value is None:
            continue
        for ok, rule in bound_rules(f.metadata):
            if not ok(value):
                name = spell(f.name) if spell else f"{type(obj).__name__}.{f.name}"
                raise ValueError(f"{name} {rule}, got {value!r}")
