"""Keys and value types of a config mapping checked against a config dataclass's fields.

One generic check for every place a user writes config (the pipeline's `train:`,
`algorithms.*.objective` and `models.*.sft` at Snakemake parse time, `repro train`/`repro sft`
KEY=VALUE): it reads the dataclass's fields and type hints, so a new field is covered the day it
is added. This check only makes sure a typo or a wrong type is a one-line error naming the key
before any compute.

A field's simple bounds live in its metadata beside its help (repro/config_bounds.py);
rules between fields stay in each dataclass's `__post_init__`.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any


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
