"""Config checks the workflow runs at parse time, before any job: each bad value is refused in
one line naming its key, with no Snakemake traceback lines."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from repro.benchmarks import get_benchmark
from repro.benchmarks.pins import missing_pins


def refuse(message: str) -> NoReturn:
    """A config error: its message alone on stderr, exit 1."""
    print(message, file=sys.stderr)
    sys.exit(1)


def at_parse_time(check: Callable[..., Any], *args: Any) -> Any:
    """Run a parse-time check; its ValueError becomes a refusal naming the key."""
    try:
        return check(*args)
    except ValueError as err:
        refuse(str(err))


def schema_refusal(report: str) -> str:
    """jsonschema's report (Snakemake's `validate`), cut to one line: the key, what it breaks."""
    where = re.search(r"^On instance(\S*):", report, re.M)
    what = re.search(r"^ValidationError: (.*)$", report, re.M)
    key = f" {where.group(1)}" if where else ""
    return f"config{key}: {what.group(1) if what else report.splitlines()[0]}"


def check_names(config: dict, selection: str, names: list[str], catalogue: str) -> None:
    """A selection may only name catalogue entries."""
    unknown = sorted(set(names) - set(config[catalogue]))
    if unknown:
        raise ValueError(
            f"config: {selection} names {unknown}, not in the '{catalogue}' catalogue "
            f"{sorted(config[catalogue])}"
        )


def check_selections(config: dict) -> None:
    """Every selection (run, ablations, report) against its catalogue."""
    run, abl, report = config["run"], config["ablations"], config["report"]
    check_names(config, "run.models", run["models"], "models")
    check_names(config, "run.algorithms", run["algorithms"], "algorithms")
    check_names(config, "ablations.algorithms", abl["algorithms"], "algorithms")
    check_names(config, "ablations.group_algorithms", abl["group_algorithms"], "algorithms")
    check_names(config, "report", [report["baseline"], report["proposed"]], "algorithms")


def train_block(config: dict) -> dict:
    """config `train:` as the runs get it: a task weighted null is left out of the mix. Presets
    merge over config.yaml's mappings key by key, so a preset's `tasks` would keep the tiny
    default's synth-rule beside its own sets; `{synth-rule: null}` drops it (as eval.sampling's
    null undoes config.yaml's override)."""
    train = dict(config["train"])
    if "tasks" in train:
        train["tasks"] = {name: w for name, w in train["tasks"].items() if w is not None}
    return train


def check_task_mix(train: dict) -> None:
    """Hub prompt sets mixed with the project's generated ones are the merge above gone wrong
    (the paper presets trained half on synth-rule): refused, naming the sets to drop."""
    tasks = train.get("tasks", {})
    known = [name for name in tasks if _registered(name)]
    generated = sorted(n for n in known if get_benchmark(n).source == "synthetic")
    if generated and len(generated) < len(known):
        raise ValueError(f"config train.tasks mixes generated sets {generated} with hub prompt "
                         f"sets {sorted(set(known) - set(generated))}: a preset's tasks merge "
                         "over config.yaml's; set the ones to leave out to null, e.g. "
                         f"{{{generated[0]}: null}}")


def _registered(name: str) -> bool:
    try:
        get_benchmark(name)
    except ValueError:  # unknown: TrainConfig names it
        return False
    return True


def check_whole_groups(run: dict, world: int, name: str) -> None:
    """DFPO without stop-gradient (its weights carry the graph through every member of a group)
    needs each whole group inside one micro-step: the TRL engine's precomputed weights, which
    serve gradient accumulation, carry no graph. The engine refused it only after the first
    rollout (found by the 32B preset's rehearsal: one row per micro-step)."""
    if run.get("engine") != "trl" or run["objective"].get("stop_gradient", True):
        return
    accum = int(run.get("trl_args", {}).get("gradient_accumulation_steps", 1))
    g = run["group_size"]
    rows = run["prompts_per_step"] * g // (run["minibatches"] * world * accum)
    if rows % g:
        raise ValueError(f"config: run {name}: objective stop_gradient=false needs each group of "
                         f"{g} whole in one micro-step, but train.trl_args."
                         f"gradient_accumulation_steps={accum} leaves {rows} row(s) per "
                         "micro-step; lower it, or leave this label out")


def check_dataclass_blocks(config: dict) -> None:
    """`train:`, `algorithms.*.objective`, `algorithms.*.source` (or `.train`: the off-policy
    source fields only) and `models.*.sft` against their dataclasses' fields and types and the
    source registry, now rather than when a job runs (the schema leaves them open: the
    dataclasses and registries own them)."""
    from repro.config_fields import check_fields, field_defaults
    from repro.objectives import get_algorithm
    from repro.training.config import TrainConfig
    from repro.training.sources import check_entry, label_knobs

    train = train_block(config)
    check_fields(TrainConfig, train, "config train: ")
    check_task_mix(train)
    engine = train.get("engine", field_defaults(TrainConfig)["engine"])
    for label, entry in config["algorithms"].items():
        try:  # the registry is the list of algorithms (the schema keeps no copy)
            algorithm = get_algorithm(entry["algorithm"])
        except ValueError as err:
            raise ValueError(f"config algorithms.{label}.algorithm: {err}") from None
        check_fields(algorithm.config_cls, entry.get("objective", {}),
                     f"config algorithms.{label}.objective: ")
        check_entry(label, entry, engine)
        check_fields(TrainConfig, label_knobs(entry), f"config algorithms.{label}.train: ")
    sft_blocks = {key: e["sft"] for key, e in config["models"].items() if e["source"] == "sft"}
    if sft_blocks:
        from repro.training.sft_config import SFTConfig

        for key, block in sft_blocks.items():
            check_fields(SFTConfig, block, f"config models.{key}.sft: ")
            try:
                SFTConfig(**block)
            except ValueError as err:
                raise ValueError(f"config models.{key}.sft: {err}") from None


def missing_pins_message(config: dict, lock: dict | None) -> str | None:
    """Jobs that read LiveCodeBench need its shards pinned: which are missing, and the command
    that pins them (None: nothing missing)."""
    names = sorted(set(config["eval"]["benchmarks"]) | set(train_block(config).get("tasks", {})))
    missing = missing_pins([get_benchmark(name) for name in names], lock)
    if not missing:
        return None
    lacking = "; ".join(f"{name} lacks {files}" for name, files in missing.items())
    where = config["data_lock"] if lock else f"{config['data_lock']} (no such file)"
    return (f"LiveCodeBench sha256 pins missing in data_lock {where}: {lacking}. Pin them once "
            "where the hub is reachable: repro data pin "
            + " ".join(f"--benchmark {name}" for name in missing)
            + f" --data-dir DATA_DIR --lock {config['data_lock'] or 'data.lock.yaml'}")
