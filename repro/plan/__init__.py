"""The memory planner: does every GPU job of a config fit its GPUs and nodes (`hardware:`)?

`plan_jobs(config)` takes the pipeline config as the workflow sees it (config/config.yaml, the
presets overlaid, schema defaults set) and returns one JobPlan per train job (model, group
size) and evaluation job (model), or raises PlanRefusal with one line naming the key to change.
`repro plan --configfile PRESET` prints `table(plans)`; the workflow runs the same check at parse
time (rules/common.smk) and takes the evaluation walltime from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from repro.plan.hardware import Hardware
from repro.plan.memory import JobPlan, PlanRefusal, eval_plan, train_plan
from repro.plan.records import apply_record
from repro.plan.shapes import Shape, read_config, shape_of

__all__ = ["Hardware", "JobPlan", "PlanRefusal", "eval_tokens", "load_config", "model_lines",
           "model_shape", "plan_jobs", "table"]


def load_config(base: Path, configfiles: list[Path]) -> dict[str, Any]:
    """The config as Snakemake builds it: `base` (config/config.yaml), each --configfile merged
    over it in turn (nested mappings merge, lists replace), then validated against the schema
    beside `base` with its defaults set."""
    import yaml
    from snakemake.utils import update_config, validate

    config: dict[str, Any] = {}
    for path in [base, *configfiles]:
        update_config(config, yaml.safe_load(path.read_text()) or {})
    validate(config, str((base.parent / "schema.yaml").resolve()), set_default=True)
    return config


def model_shape(config: dict[str, Any], key: str) -> Shape:
    """The shape of catalogue model `key`: its declared `config` (a config.json's fields), or
    the config.json of a local folder given as its id. Nothing is fetched. A declared config is
    checked against transformers' class for it first (`check_config_fields`)."""
    entry = config["models"][key]
    if "config" in entry:
        from repro.models.hub_config import check_config_fields

        check_config_fields(entry["config"], f"config models.{key}.config")
        return shape_of(entry["config"], f"models.{key}.config")
    where = Path(entry.get("id", ""))
    if entry.get("id") and (where / "config.json").is_file():
        return shape_of(read_config(where), str(where / "config.json"))
    raise PlanRefusal(f"config models.{key}.config: GPU jobs need the model's shapes; declare "
                      "its config.json fields there (no network), or give a local folder as id")


def eval_tokens(config: dict[str, Any]) -> int:
    """Response tokens one evaluation job generates at most: problems x k x token budget,
    summed over the evaluated benchmarks."""
    from repro.benchmarks import get_benchmark
    from repro.evaluation.config import SamplingOverrides

    e, total = config["eval"], 0
    overrides = SamplingOverrides.of(e["sampling"])
    for name in e["benchmarks"]:
        spec = get_benchmark(name)
        count = spec.expected_count or spec.n
        if e["limit"] is not None:
            count = min(count, e["limit"]) if count else e["limit"]
        if not count:
            raise PlanRefusal(f"config eval.limit: benchmark {name} declares no size; set a "
                              "limit so the planner can size the evaluation")
        sampling = overrides.over(spec.sampling, e["k"] or spec.default_k, 0)  # the eval's rule
        total += count * sampling.n * sampling.max_new_tokens
    return total


def group_sizes(config: dict[str, Any]) -> list[int]:
    """Every group size a train job runs with: the main one, then the ablation's."""
    abl = config["ablations"]
    extra = abl["group_sizes"] if abl["group_algorithms"] else []
    main = int(config["train"]["group_size"])
    return [main, *sorted({int(g) for g in extra} - {main})]


def source_overrides(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The distinct TrainConfig fields the off-policy sources of the labels that run set."""
    from repro.training.sources import label_knobs

    run, abl = config["run"], config["ablations"]
    labels = {*run["algorithms"], *abl["algorithms"], *abl["group_algorithms"]}
    blocks = [label_knobs(config["algorithms"][label]) for label in sorted(labels)]
    return [b for i, b in enumerate(blocks) if b and b not in blocks[:i]]


def plan_jobs(config: dict[str, Any]) -> list[JobPlan]:
    """Plans of the GPU jobs: train when hardware.train has GPUs, evaluate when evaluation runs
    vLLM on hardware.eval's GPUs. No GPU job: an empty list."""
    hw, train = Hardware.of(config["hardware"]), config["train"]
    world = hw.train.world
    if world > 1 and train.get("engine") != "trl":
        raise PlanRefusal(f"config train.engine is native (one process on one device), but "
                          f"hardware.train gives train jobs {hw.train.nodes} node(s) x "
                          f"{hw.train.gpus_per_node} GPU(s); set train.engine: trl, or "
                          "hardware.train.gpus_per_node: 1")
    plans = []
    for key in config["run"]["models"]:
        if world:
            total = int(train["prompts_per_step"]) * int(train["group_size"])
            others = group_sizes(config)[1:]
            for g in others:  # P x G rows per step at every G: memory as main, layout checked
                job = train | {"group_size": g, "prompts_per_step": total // g}
                train_plan(key, model_shape(config, key), job, hw, world)
            for source in source_overrides(config):  # a label's own K changes rows per update
                apply_record(train_plan(key, model_shape(config, key), train | source, hw, world),
                             config, key, train | source)
            plans.append(train_plan(key, model_shape(config, key), train, hw, world))
            apply_record(plans[-1], config, key, train)
            if others:
                plans[-1].notes.append(f"group-size ablation G={others} checked too (same rows "
                                       "per process)")
        if hw.eval.gpus:
            if config["eval"]["engine"] != "vllm":
                raise PlanRefusal("config hardware.eval.gpus: GPU evaluation is planned for "
                                  "eval.engine vllm only; set it, or hardware.eval.gpus: 0")
            plans.append(eval_plan(key, model_shape(config, key), eval_tokens(config), hw))
    return plans


def model_lines(config: dict[str, Any]) -> list[str]:
    """One line per trained model whose shape the config declares: its parameter count, the
    number every memory item scales with (printed also when no job is on a GPU, so a CPU
    rehearsal's shape is checked against the model it builds)."""
    lines = []
    for key in config["run"]["models"]:
        entry = config["models"][key]
        if "config" in entry or entry["source"] == "init":
            shape = model_shape(config, key)
            lines.append(f"model {key} ({entry['config'].get('model_type')}): {shape.params:,} "
                         f"parameters, {shape.layers} layers")
    return lines


def table(plans: list[JobPlan]) -> str:
    """Per job and phase: memory items per GPU (host: per node) against the capacity."""
    lines = []
    for plan in plans:
        lines.append(f"{plan.job} {plan.model}: {plan.nodes} node(s) x {plan.gpus_per_node} GPUs"
                     + (f", walltime {plan.runtime_min / 60:.1f} h" if plan.runtime_min else ""))
        for phase in plan.phases:
            lines.append(f"  {phase.name:<38} {phase.total_gb:8.1f} GB of "
                         f"{phase.capacity_gb:6.1f} GB  fits")
            lines += [f"    {name:<52} {gb:8.1f}" for name, gb in phase.items.items()]
        lines += [f"  note: {note}" for note in plan.notes]
    return "\n".join(lines) if lines else "no GPU jobs (hardware: sets no GPUs)"
