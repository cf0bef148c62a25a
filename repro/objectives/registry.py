"""Name -> algorithm registry: the one list of algorithms, so a new objective is one small file.

An algorithm is a config dataclass (subclass of LossConfig with a `name`) plus a loss function
`(cfg, minibatch, normalisers) -> (loss, metrics)`. Register with `@register_algorithm(Config)`
in a module of this package (every module here is imported with the package). Engines, CLI help,
the workflow's config check, tests, benches and the theory experiment read their lists from here.

An algorithm that couples the members of a group (its per-sequence terms depend on the other
members, as DFPO's transformed weights do) registers `group_weights`: those terms as detached
per-sequence weights, computed over whole groups. Engines that cut groups into micro-batches or
across processes call it first on whole groups (a no-grad pre-pass) and pass the slices as
`Minibatch.seq_weight`. Algorithms without it accept minibatches that cut groups.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from repro.config_fields import check_fields
from repro.objectives.aggregation import Normalisers
from repro.objectives.base import LossConfig, Minibatch
from repro.registry import Registry

if TYPE_CHECKING:
    from torch import Tensor

LossFn = Callable[[Any, Minibatch, Normalisers | None], tuple["Tensor", dict[str, float]]]
GroupWeightsFn = Callable[[Any, Minibatch], "Tensor"]  # (cfg, whole groups) -> [B] weights


@dataclass(frozen=True)
class Algorithm:
    name: str
    config_cls: type[LossConfig]
    loss_fn: LossFn
    group_weights: GroupWeightsFn | None = None

    @property
    def couples_groups(self) -> bool:
        """Does a sequence's loss term depend on the other members of its group?"""
        return self.group_weights is not None


_ALGORITHMS: Registry[Algorithm] = Registry("algorithm")


def register_algorithm(
    config_cls: type[LossConfig], *, group_weights: GroupWeightsFn | None = None
) -> Callable[[LossFn], LossFn]:
    """Decorator: register `loss_fn` under `config_cls.name`; `group_weights` for an algorithm
    that couples a group's members (see the module docstring)."""
    name = config_cls.name
    if not name:
        raise ValueError(f"{config_cls.__name__}.name must be set to register it")

    def decorate(loss_fn: LossFn) -> LossFn:
        _ALGORITHMS.add(name, Algorithm(name, config_cls, loss_fn, group_weights))
        return loss_fn

    return decorate


def algorithm_names() -> list[str]:
    return _ALGORITHMS.names()


def get_algorithm(name: str) -> Algorithm:
    return _ALGORITHMS.get(name)


def make_config(name: str, **overrides: Any) -> LossConfig:
    """Build and validate an algorithm's config; an unknown key names the key and the options."""
    cls = get_algorithm(name).config_cls
    check_fields(cls, overrides)
    return cls(**overrides)


def policy_loss(
    cfg: LossConfig, batch: Minibatch, norm: Normalisers | None = None
) -> tuple[Tensor, dict[str, float]]:
    """The one entry point: the loss to minimise and float metrics, for any registered config.

    A minibatch may cut groups, except for an algorithm that couples a group's members and gets
    no precomputed `seq_weight`: a group with one row there is refused, naming the algorithm
    (a group cut into larger pieces cannot be told from a whole one here)."""
    algorithm = get_algorithm(cfg.name)
    if algorithm.couples_groups and batch.seq_weight is None:
        try:
            _ = batch.groups  # refuses a group with one row here (and is cached for the loss)
        except ValueError as err:
            raise ValueError(
                f"{cfg.name} couples the members of a group, so its minibatch needs whole groups "
                f"or `seq_weight` computed over them (Algorithm.group_weights): {err}") from None
    return algorithm.loss_fn(cfg, batch, norm)
