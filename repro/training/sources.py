"""Off-policy sources by name (issue 38): how a run label's rollouts become off-policy, the one
list, so a new source is one entry here. A catalogue entry names its source
(`algorithms.LABEL.source`); the workflow sets the source's knobs over `train:` for that label's
runs alone, so the arms of one source stay compute-matched (docs/preregistration-3.md). Labels
spell a source too (ARM-SOURCE) but are never parsed to recover it: code reads `source`.

A label may instead set the knobs directly (`algorithms.LABEL.train`, `SOURCE_FIELDS` only), as
presets written before this registry do; such a label has no source name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from repro.registry import Registry
from repro.training.trainers import ENGINES

# The TrainConfig fields a label may set for itself: how rollouts become off-policy, nothing of
# the budget, the data or the sampling of responses.
SOURCE_FIELDS = ("minibatches", "epochs", "sampler_dtype", "staleness", "behaviour_temperature")


@dataclass(frozen=True)
class Source:
    """A named off-policy source: the TrainConfig fields it sets and the engines that run it."""

    name: str
    knobs: Mapping[str, Any]
    engines: tuple[str, ...]
    description: str

    def __post_init__(self) -> None:
        foreign = sorted(set(self.knobs) - set(SOURCE_FIELDS))
        if foreign:
            raise ValueError(f"source {self.name!r}: knobs {foreign} are not source fields "
                             f"{list(SOURCE_FIELDS)}")
        unknown = sorted(set(self.engines) - set(ENGINES))
        if unknown or not self.engines:
            raise ValueError(f"source {self.name!r}: engines {list(self.engines)} must be "
                             f"a non-empty subset of {list(ENGINES)}")
        object.__setattr__(self, "knobs", MappingProxyType(dict(self.knobs)))


_SOURCES: Registry[Source] = Registry("source")


def register_source(source: Source) -> Source:
    """Add `source` under its name (once)."""
    return _SOURCES.add(source.name, source)


def source_names() -> list[str]:
    return _SOURCES.names()


def get_source(name: str) -> Source:
    return _SOURCES.get(name)


def label_knobs(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The TrainConfig fields a catalogue entry sets for its runs: its source's knobs, or its
    explicit `train:` block (presets without `source:`); {} for an on-policy label."""
    if "source" in entry:
        return dict(get_source(entry["source"]).knobs)
    return dict(entry.get("train", {}))


def check_entry(label: str, entry: Mapping[str, Any], engine: str) -> None:
    """A catalogue entry's source at parse time: a registered name that `engine` runs, and not
    beside a `train:` block (one place says how a label is off-policy). One line naming the key."""
    where = f"config algorithms.{label}"
    if "source" not in entry:
        shared = sorted(set(entry.get("train", {})) - set(SOURCE_FIELDS))
        if shared:
            raise ValueError(f"{where}.train: {shared[0]} is shared by every run (compute "
                             f"matching); a label may set only {list(SOURCE_FIELDS)}")
        return
    try:
        source = get_source(entry["source"])
    except ValueError as err:
        raise ValueError(f"{where}.source: {err}") from None
    if entry.get("train"):  # the schema defaults it to {}
        raise ValueError(f"{where}: sets both source and train; the source {source.name!r} "
                         f"sets {dict(source.knobs)} (register another source for other knobs)")
    if engine not in source.engines:
        raise ValueError(f"{where}.source: {source.name!r} is not supported by train.engine "
                         f"{engine!r}; it runs on {list(source.engines)}")


register_source(Source(
    "reuse", {"minibatches": 4, "epochs": 2}, ("native", "trl"),
    "Minibatch reuse: K = 4 updates and 2 passes over each rollout batch (TRL's "
    "steps_per_generation and num_iterations, verl's ppo_mini_batch_size and ppo_epochs)."))
register_source(Source(
    "stale", {"minibatches": 1, "staleness": 2}, ("native", "trl"),
    "Stale rollouts: K = 1; the policy of 2 rollout steps earlier samples and gives logp_old "
    "(asynchronous trainers)."))
register_source(Source(
    "bf16", {"minibatches": 1, "sampler_dtype": "bfloat16"}, ("native", "trl"),
    "A bf16 sampler: K = 1; a bf16 copy of the policy samples and gives logp_old, the fp32 "
    "policy scores (no importance-sampling correction)."))
register_source(Source(
    "hot_sampler", {"behaviour_temperature": 1.1}, ("native",),
    "The controlled dose: the sampler's temperature 1.1 against the trainer's 1.0 (the "
    "mechanism study's dose, there set for every run in `train:`)."))
