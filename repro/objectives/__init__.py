"""Policy-gradient objectives: the one source of truth for every formula in the suite.

The trainer, the diagnostics, the theory experiment and the benchmarks all call
`policy_loss(cfg, Minibatch(...))`; nothing else derives a loss. Formulas and decisions:
docs/objectives.md.

Every module of this package is imported here, so an algorithm file dropped into it registers
itself (`@register_algorithm`) with no other edit: the registry is the one list of algorithms.

torch is imported inside the functions that compute, not at the top of a module (annotations
name `Tensor` under TYPE_CHECKING; no `@torch.no_grad()` decorators): the workflow parse imports
this package for the config dataclasses and never computes, and torch's import was a third of
every `snakemake` invocation (~3 s on 2 cores). tests/test_pipeline_jobs.py holds a parse to
importing no torch; an algorithm file that imports it at the top fails that test.
"""

import importlib
import pkgutil

from repro.objectives.advantages import AdvantageConfig, group_advantages
from repro.objectives.aggregation import Normalisers, aggregate
from repro.objectives.base import AGG_MODES, LossConfig, Minibatch
from repro.objectives.dfpo import DFPOConfig, dfpo_weights
from repro.objectives.groups import Groups
from repro.objectives.grpo import GRPOConfig
from repro.objectives.grpo_fix import GRPOFixConfig
from repro.objectives.gspo import GSPOConfig
from repro.objectives.registry import (
    Algorithm,
    algorithm_names,
    get_algorithm,
    make_config,
    policy_loss,
    register_algorithm,
)
from repro.objectives.transforms import (
    TRANSFORMS,
    apply_transform,
    cancelling_transforms,
    register_transform,
)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "AGG_MODES",
    "TRANSFORMS",
    "AdvantageConfig",
    "Algorithm",
    "DFPOConfig",
    "GRPOConfig",
    "GRPOFixConfig",
    "GSPOConfig",
    "Groups",
    "LossConfig",
    "Minibatch",
    "Normalisers",
    "aggregate",
    "algorithm_names",
    "apply_transform",
    "cancelling_transforms",
    "dfpo_weights",
    "get_algorithm",
    "group_advantages",
    "make_config",
    "policy_loss",
    "register_algorithm",
    "register_transform",
]
