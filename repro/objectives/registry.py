"""Name -> algorithm registry, so a new objective is one small file.

An algorithm is a config dataclass (subclass of LossConfig with a `name`) plus a loss function
`(cfg, minibatch, normalisers) -> (loss, metrics)`. Register with `@register_algorithm(Config)`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from repro.config_fields import check_fields
from repro.objectives.aggregation import Normalisers
from repro.objectives.base import LossConfig, Minibatch

LossFn = Callable[[Any, Minibatch, Normalisers | None], tuple[Tensor, dict[str, float]]]


@dataclass(frozen=True)
class Algorithm:
    name: str
    config_cls: type[LossConfig]
    loss_fn: LossFn


_REGISTRY: dict[str, Algorithm] = {}


def register_algorithm(config_cls: type[LossConfig]) -> Callable[[LossFn], LossFn]:
    """Decorator: register `loss_fn` under `config_cls.name`."""
    name = config_cls.name
    if not name:
        raise ValueError(f"{config_cls.__name__}.name must be set to register it")

    def decorate(loss_fn: LossFn) -> LossFn:
        known = _REGISTRY.get(name)
        if known is not None and known.loss_fn is not loss_fn:
            raise ValueError(f"algorithm {name!r} is already registered")
        _REGISTRY[name] = Algorithm(name, config_cls, loss_fn)
        return loss_fn

    return decorate


def algorithm_names() -> list[str]:
    return sorted(_REGISTRY)


def get_algorithm(name: str) -> Algorithm:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; known: {algorithm_names()}") from None


def make_config(name: str, **overrides: Any) -> LossConfig:
    """Build and validate an algorithm's config; an unknown key names the key and the options."""
    cls = get_algorithm(name).config_cls
    check_fields(cls, overrides)
    return cls(**overrides)


def policy_loss(
    cfg: LossConfig, batch: Minibatch, norm: Normalisers | None = None
) -> tuple[Tensor, dict[str, float]]:
    """The one entry point: the loss to minimise and float metrics, for any registered config."""
    return get_algorithm(cfg.name).loss_fn(cfg, batch, norm)
