"""The pipeline config (config/config.yaml plus presets) as dataclasses: every key, its type,
default, bounds and description, written once.

Why: config/schema.yaml, the one Snakemake validates at parse time, is generated from these
(`python -m repro.pipeline.schema`; a test holds the committed file equal to the output), and so
is docs/config-reference.md. A key that stands for a field of another dataclass (report.baseline
is `Study.baseline`, eval.k is `EvalConfig.k`) is declared with `like`, which reads that field's
default, help and bounds, so nothing is copied. Blocks a dataclass owns whole (`train:`,
`algorithms.*.objective`, `algorithms.*.train`, `models.*.sft`) stay open mappings here: the
dataclasses check them at parse time (`repro.pipeline.checks.check_dataclass_blocks`).

Adding a key: one field here (or in the dataclass it stands for), then regenerate. These classes
are declarations: the workflow reads the validated mapping, it does not build them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from repro.config_bounds import like, setting
from repro.evaluation.config import EvalConfig, SamplingOverrides
from repro.plan.hardware import Hardware
from repro.reporting.study import Study
from repro.theory.config import TheoryConfig
from repro.training.config import TrainConfig

# TrainConfig fields the pipeline sets per run (jobs.Jobs.run_config): never in `train:`.
PER_RUN = ("algorithm", "objective", "seed", "model", "checkpoint_fractions")
# Needed in `train:`: the group-size ablation derives its prompts per step from them.
TRAIN_REQUIRED = ("prompts_per_step", "group_size", "minibatches")


def unset(help_text: str, **bounds: Any) -> Any:
    """An optional key with no default: absent unless given (the None here stands for absent,
    not a value: the annotation says what a given value must be)."""
    return field(default=None, metadata={"help": help_text, "unset": True, **bounds})


@dataclass
class ModelEntry:
    """Catalogue: model key (a path segment model=KEY) -> how to obtain the policy RL starts
    from."""

    source: str = field(metadata={"help": (
        "sft: build the tiny Qwen3 (dense, MoE or Next: `sft.model.architecture`, "
        "repro/models/tiny_config.py) and warm-start it with `repro sft`; hub: start from `id` "
        "as is; init: a random model of exactly `config` (transformers' own class for its "
        "model_type, seed 0, in the dtype it records) with the tiny tokenizer, built by `repro "
        "init-model` (the shrunk-shape rehearsal of a paper preset, "
        "config/overlays/rehearse-cpu.yaml; `id` is ignored)."), "choices": ("sft", "hub", "init")})
    id: str = unset("Hub model id or local folder (source hub), e.g. Qwen/Qwen3-32B.")
    sft: dict[str, Any] = setting(
        {}, "SFTConfig overrides for `repro sft` (source sft), see repro/training/sft_config.py.")
    base: str = unset(
        "source sft only: another catalogue key whose SFT output this SFT continues from (a "
        "second stage, e.g. the wrong-rule bias on top of the arithmetic); absent = random init.")
    config: dict[str, Any] = unset(
        "source hub: the model's config.json fields (architecture shapes), copied from the hub "
        "once, so the memory planner (`repro plan`, and the workflow at parse time) sizes GPU "
        "jobs with no network. Needed when the config plans GPU jobs (hardware:) and the id is "
        "not a local folder holding a config.json. source init: required, the model to build "
        "(model_type included; vocab_size at least the tiny tokenizer's 104 ids).")


@dataclass
class AlgorithmEntry:
    """Catalogue: run label (path segment algo=LABEL) -> registry objective and its overrides."""

    algorithm: str = field(metadata={"help": (
        "Objective: a name in repro.objectives' registry (`repro train --help` lists them). "
        "Checked at parse time against the registry itself, so no copy of the list lives here "
        "and a new algorithm file is usable with no edit of this schema.")})
    objective: dict[str, Any] = setting(
        {}, "Config overrides of that objective, e.g. {transform: orth_proj}; checked at parse "
        "time against the algorithm's config class (a foreign key is refused, named).")
    source: str = unset(
        "This label's off-policy source, a name in repro.training.sources' registry (its knobs "
        "set over `train:` for this label's runs alone, so the arms of one source stay "
        "compute-matched); checked at parse time against the registry and train.engine.")
    train: dict[str, Any] = setting(
        {}, "Instead of `source`: the off-policy knobs themselves, e.g. {minibatches: 4, "
        "epochs: 2}: only repro.training.sources.SOURCE_FIELDS (checked at parse time).")


@dataclass
class RunSection:
    """The main experiment (selections; lists replace, they do not merge)."""

    models: list[str] = setting(["tiny"], "Model keys of the catalogue to train.", min_items=1)
    algorithms: list[str] = like(Study, "main_algos", min_items=1)
    seeds: list[int] = setting([0, 1, 2], "Run seeds (prompt stream, sampling, minibatch order).",
                               min_items=1, items={"min": 0})


@dataclass
class EvalSection:
    """What every evaluation job shares (each becomes its resolved.yaml with the job's values)."""

    benchmarks: list[str] = setting(["synth-aime", "synth-hmmt", "synth-lcb"],
                                    "Benchmark registry names (repro/benchmarks/specs).",
                                    min_items=1)
    k: int | None = like(EvalConfig, "k")
    limit: int | None = like(EvalConfig, "limit")
    fractions: list[float] = like(
        TrainConfig, "checkpoint_fractions", min_items=1,
        help="Budget fractions whose checkpoints are evaluated (1.0 = the final policy); the "
             "runs checkpoint at these (TrainConfig.checkpoint_fractions).")
    init: bool = setting(True, "Also evaluate the starting policy (the row \"init\" in the main "
                         "table).")
    engine: str = like(EvalConfig, "engine")
    batch_size: int = like(EvalConfig, "batch_size")
    data_dir: str | None = like(EvalConfig, "data_dir")
    sampling: SamplingOverrides = like(EvalConfig, "sampling", help=(
        "Overrides of every benchmark's sampling; each key becomes the `repro eval` option of "
        "the same name (repro.generation.base.SamplingConfig). Any other key fails at parse "
        "time. null: each benchmark's own value (a preset undoing config.yaml's override, which "
        "nested-mapping merging would otherwise keep)."))


@dataclass
class AblationsSection:
    """The variant and group-size ablations (target `ablations`)."""

    algorithms: list[str] = like(Study, "ablation_algos")
    group_algorithms: list[str] = like(Study, "group_algos")
    group_sizes: list[int] = setting(
        [2, 4, 8, 16], "Group sizes G; prompts per step become (train P x train G) / G, so every "
        "G samples the same number of responses per step (compute-matched).", items={"min": 2})
    seeds: list[int] = setting([0, 1], "Seeds of the ablation runs.", items={"min": 0})
    all_fractions: bool = setting(
        False, "Evaluate the ablation runs at every eval.fractions checkpoint, as the main runs; "
        "false = only at the final one (the budget table's AUC needs every fraction).")


@dataclass
class ReportSection:
    """How `repro aggregate` compares the runs (stored as its Study settings)."""

    baseline: str = like(Study, "baseline")
    proposed: str = like(Study, "proposed")
    threshold: float = like(Study, "threshold")
    smooth_window: int = like(Study, "smooth_window")


@dataclass
class TheorySection:
    """The exact tabular experiment (`repro theory`)."""

    steps: int = like(TheoryConfig, "steps")
    seed: int = like(TheoryConfig, "seed")


@dataclass
class PipelineConfig:
    """The dfpo-repro pipeline config (config/config.yaml plus presets given with
    --configfile). Experiment settings only: threads, memory, runtime and GPUs live in
    profiles/."""

    experiment: str = like(Study, "experiment")
    results: str = setting(
        "results", "Folder of this experiment's outputs: runs, evaluations, training scratch, the "
        "aggregate, tables and figures (so a preset such as tiny-study keeps its own next to the "
        "default's). SFT models, the paper reference and the theory experiment are shared by "
        "every experiment and stay under results/.", min_length=1)
    data_lock: str | None = setting(
        "data.lock.yaml", "Lock file written by `repro data pin` (sha256 of every downloaded "
        "benchmark file, and the mirror folder). Read when it exists: evaluation and training "
        "verify files against it, and LiveCodeBench's pickled tests are decoded only from pinned "
        "shards, so a config that uses LiveCodeBench without pins fails at parse time, naming "
        "the missing ones.")
    models: dict[str, ModelEntry] = setting({}, ModelEntry.__doc__ or "", min_items=1,
                                              unset=True)
    algorithms: dict[str, AlgorithmEntry] = setting({}, AlgorithmEntry.__doc__ or "",
                                                    min_items=1, unset=True)
    train: dict[str, Any] = setting(
        {}, "TrainConfig fields (repro/training/config.py; `repro train --help` and the train "
        "table below list them) shared by every run: equal P, G, K, steps, lengths and prompt "
        "stream are the compute matching. Checked at parse time against TrainConfig itself (a "
        "task weighted null is left out of the mix, so a preset can drop config.yaml's). "
        f"{', '.join(PER_RUN)} are set per run by the pipeline; {', '.join(TRAIN_REQUIRED)} are "
        "required: the group-size ablation derives its prompts per step from them.",
        required=TRAIN_REQUIRED, forbidden=PER_RUN, unset=True)
    run: RunSection = setting(RunSection(), RunSection.__doc__ or "")
    eval: EvalSection = setting(EvalSection(), EvalSection.__doc__ or "")
    ablations: AblationsSection = setting(AblationsSection(), AblationsSection.__doc__ or "")
    report: ReportSection = setting(ReportSection(), ReportSection.__doc__ or "")
    theory: TheorySection = setting(TheorySection(), TheorySection.__doc__ or "")
    hardware: Hardware = setting(Hardware(), Hardware.__doc__ or "")
