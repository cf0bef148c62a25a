"""Command-line options generated from a config dataclass's fields (name, type, default, help).

Why: a command whose options copy a dataclass by hand drifts from it (a default, a help text, a
new field missing on the command line). `config_options` reads the fields instead, so every
field is an option the day it is added, with the field's default and `metadata["help"]`.

Spelling on the command line: `--field-name VALUE` for scalars and paths (bools as
`--name/--no-name`), `--name A,B,C` for a `tuple[X, ...]`, `--name KEY=VALUE` (repeatable, YAML
values) for a `dict`. A dict field can instead be `expand`ed into one option per key, each from
a field of another dataclass (`repro eval --temperature 0.6` fills `EvalConfig.sampling`).
Help is escaped for typer's Rich markup (`[max_len/4, max_len]` is text, not a style tag).
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.markup import escape

from repro.config_fields import check_fields
from repro.training.config import parse_overrides

T = TypeVar("T")

THREADS_HELP = (
    "torch CPU threads (default: torch's choice). Give each job no more threads than the cores "
    "it owns: an op spread over a core another job is using stalls (measured 10x slower)."
)


def build_config(command: str, cls: type[T], settings: dict[str, Any]) -> T:
    """`cls(**settings)`; a value its checks refuse is one line naming it, exit 2."""
    try:
        return cls(**settings)
    except ValueError as err:
        typer.echo(f"{command}: {err}", err=True)
        raise typer.Exit(2) from None


def set_threads(threads: int | None) -> None:
    """`--threads`: torch's CPU threads for this process (THREADS_HELP says why to give it)."""
    if threads is not None:
        import torch

        if threads < 1:
            raise typer.BadParameter(f"--threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)


SCALARS = (int, float, str, bool, Path)
CONFIG_ATTR = "__config_class__"  # the dataclass a generated command's options stand for


def config_options(
    cls: type,
    *,
    skip: Sequence[str] = (),
    expand: dict[str, tuple[type, Sequence[str]]] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a command taking `settings: dict`: every field of `cls` but `skip` becomes an
    option, and the command receives their values by field name (it builds `cls` itself, so its
    own options can join in). `expand` maps a dict field to (dataclass, keys): one option per key
    with that dataclass field's type and help; the field gets the keys that were given."""
    expand = expand or {}
    fields = [f for f in dataclasses.fields(cls) if f.name not in skip]
    hints = typing.get_type_hints(cls)

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
               for p in inspect.signature(func, eval_str=True).parameters.values()
               if p.name != "settings"]
        generated: list[inspect.Parameter] = []
        sub_keys: dict[str, list[str]] = {}
        for f in fields:
            if f.name in expand:
                sub_cls, keys = expand[f.name]
                sub_hints = typing.get_type_hints(sub_cls)
                subs = {s.name: s for s in dataclasses.fields(sub_cls)}
                sub_keys[f.name] = list(keys)
                generated += [_param(key, sub_hints[key] | None, None, _help(subs[key], sub_cls),
                                     panel=f.name) for key in keys]
            else:
                generated.append(_param(f.name, hints[f.name], _default(f), _help(f, cls), cls))
        names = [p.name for p in own + generated]
        clash = sorted({n for n in names if names.count(n) > 1})
        if clash:
            raise TypeError(f"{func.__name__}: options {clash} come from both "
                            f"{cls.__name__} and the command")
        own_names = {p.name for p in own}
        pairs = [f.name for f in fields if f.name not in expand
                 and typing.get_origin(_without_none(hints[f.name])) is dict]

        def command(**values: Any) -> Any:
            settings = {k: values.pop(k) for k in list(values) if k not in own_names}
            for name in pairs:
                settings[name] = dict(settings[name] or ())
            for name, keys in sub_keys.items():
                given = {k: settings.pop(k) for k in keys}
                settings[name] = {k: v for k, v in given.items() if v is not None}
            return func(settings=settings, **values)

        command.__name__, command.__qualname__ = func.__name__, func.__qualname__
        command.__module__, command.__doc__ = func.__module__, func.__doc__
        command.__signature__ = inspect.Signature(own + generated)  # type: ignore[attr-defined]
        setattr(command, CONFIG_ATTR, cls)
        return command

    return decorate


def given_options(ctx: typer.Context, settings: dict[str, Any]) -> dict[str, Any]:
    """The `settings` the command line gave (not a default): what overrides a `--config` file.
    An expanded field (no option of its own) holds only the keys given, so counts when not
    empty."""
    given = {}
    for name, value in settings.items():
        source = ctx.get_parameter_source(name)  # click's ParameterSource (typer vendors click)
        if value if source is None else source.name not in ("DEFAULT", "DEFAULT_MAP"):
            given[name] = value
    return given


def expanded_help(cls: type, expand: dict[str, tuple[type, Sequence[str]]]) -> str:
    """An epilog naming each expanded field, its help, and the options that fill it."""
    helps = {f.name: f.metadata["help"] for f in dataclasses.fields(cls)}
    return "\n\n".join(
        f"{name}: {escape(helps[name])} Set by " + ", ".join(_flag(k) for k in keys) + "."
        for name, (_, keys) in expand.items())


def field_help(cls: type, name: str) -> str:
    """The help of one field, for a command's own option that stands in for it."""
    return next(f.metadata["help"] for f in dataclasses.fields(cls) if f.name == name)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _help(f: dataclasses.Field, cls: type) -> str:
    if "help" not in f.metadata:
        raise TypeError(f"{cls.__name__}.{f.name} has no metadata['help'] for its CLI option")
    return f.metadata["help"]


def _default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default


def _param(name: str, hint: Any, default: Any, help_text: str, cls: type | None = None,
           panel: str | None = None) -> inspect.Parameter:
    """One keyword parameter in typer's `Annotated[type, typer.Option(...)]` form."""
    base = _without_none(hint)
    option: dict[str, Any] = {"help": escape(help_text), "rich_help_panel": panel}
    if base in SCALARS:
        annotation = hint
    elif typing.get_origin(base) is tuple:
        item = typing.get_args(base)[0]
        annotation = str
        option |= {"parser": _list_parser(name, item), "metavar": f"{item.__name__.upper()},..."}
        if default not in (inspect.Parameter.empty, None):
            default = ",".join(map(str, default))
    elif typing.get_origin(base) is dict and cls is not None:  # repeatable KEY=VALUE
        annotation = list[str]
        option |= {"parser": _pair_parser(cls, name), "metavar": "KEY=VALUE"}
        default = None
    else:
        raise TypeError(f"{name}: no command-line spelling for {hint!r}")
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=Annotated[annotation, typer.Option(**option)])


def _without_none(hint: Any) -> Any:
    """`X | None` -> X (other hints unchanged)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def _list_parser(name: str, item: type) -> Callable[[Any], tuple]:
    def parse(text: Any) -> tuple:
        if isinstance(text, tuple):  # already parsed (click converts defaults too)
            return text
        try:
            return tuple(item(v.strip()) for v in str(text).split(",") if v.strip())
        except ValueError:
            raise typer.BadParameter(
                f"{text!r}: each comma-separated item must be {item.__name__}") from None
    return parse


def _pair_parser(cls: type, name: str) -> Callable[[str], tuple[str, Any]]:
    """`KEY=VALUE` -> (key, YAML value), its type checked against the field's."""

    def parse(text: Any) -> tuple[str, Any]:
        if isinstance(text, tuple):
            return text
        try:
            (key, value), = parse_overrides([text]).items()
            check_fields(cls, {name: {key: value}})
        except ValueError as err:
            raise typer.BadParameter(str(err)) from None
        return key, value
    return parse
