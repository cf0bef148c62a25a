"""Keys and value types of a config mapping checked against a config dataclass's fields.

One generic check for every place a user writes config (the pipeline's `train:`,
`algorithms.*.objective` and `models.*.sft` at Snakemake parse time, `repro train`/`repro sft`
KEY=VALUE): it reads the dataclass's fields and type hints, so a new field is covered the day it
is added. This check only makes sure a typo or a wrong type is a one-line error naming the key
before any compute.

A field's simple bounds live in its metadata beside its help (`BOUNDS`: min, max, exclusive_min,
exclusive_max, choices, min_items, min_length, items for a list's items); `check_bounds` applies
them and `repro.pipeline.schema` writes them into config/schema.yaml and the config reference,
so a bound is written once. Rules between fields stay in each dataclass's `__post_init__`.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
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


def field_defaults(cls: type) -> dict[str, Any]:
    """Every field's default value (default_factory called), by name."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        elif f.default is not dataclasses.MISSING:
            out[f.name] = f.default
    return out


def check_fields(cls: type, data: Mapping[str, Any], where: str = "") -> None:
    """Raise ValueError naming the first unknown key (with the valid ones) or ill-typed value."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}{cls.__name__} settings must be a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(
            f"{where}unknown {cls.__name__} key(s) {unknown}; valid keys: {sorted(known)}")
    for key, value in data.items():
        options = (hints[key], *typing.get_args(hints[key]))
        nested = [h for h in options if dataclasses.is_dataclass(h)]
        if nested and isinstance(value, Mapping):  # a nested config: name the inner key
            check_fields(nested[0], value, f"{where}{cls.__name__}.{key}: ")
            continue
        if not _matches(hints[key], value):
            raise ValueError(f"{where}{cls.__name__}.{key} must be {_describe(hints[key])}, "
                             f"got {value!r}")


def _matches(hint: Any, value: Any) -> bool:
    """Whether `value` (as YAML or KEY=VALUE gives it) fits the annotation `hint`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_matches(a, value) for a in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if hint is Path:  # YAML and KEY=VALUE spell a path as a string
        return isinstance(value, (str, Path))
    if origin is typing.Literal:
        return value in args
    if dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            return True
        try:
            check_fields(hint, value)
        except ValueError:
            return False
        return True
    if origin is dict:
        key_t, val_t = args or (Any, Any)
        return isinstance(value, Mapping) and all(
            _matches(key_t, k) and _matches(val_t, v) for k, v in value.items())
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(map(_matches, args, value))
        return all(_matches(args[0], v) for v in value) if args else True
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # an annotation this check does not model: left to __post_init__


def _describe(hint: Any) -> str:
    """Human spelling of an annotation for the error message."""
    if dataclasses.is_dataclass(hint):
        return f"a mapping of {hint.__name__} fields"
    name = getattr(hint, "__name__", None)
    if typing.get_origin(hint) is None and name:
        return "null" if hint is type(None) else name
    return str(hint).replace("typing.", "").replace("NoneType", "null").replace("None", "null")
