"""The experiment's jobs as the rules name them, from the validated config: the training runs
(main grid, then ablations), the files each stage must produce, and the options and resolved
configs the rules hand to `repro` commands."""

from __future__ import annotations

import functools
import json
import shlex
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from repro.benchmarks import get_benchmark
from repro.benchmarks.pins import pins_for, read_lock
from repro.pipeline.checks import (
    check_dataclass_blocks,
    check_whole_groups,
    missing_pins_message,
    train_block,
)
from repro.pipeline.layout import (
    INIT_MODEL_DIR,
    MODEL_DIR,
    PAPER_REFERENCE,
    RUN,
    THEORY_DIR,
    Layout,
)
from repro.training.export import frac_label  # the trainer's spelling of policy/frac=F

EVAL_THREADS = 1  # an evaluation job's threads: its torch threads and its grading workers


class Jobs:
    """Run keys, targets and per-job options of one config (as Snakemake resolved it)."""

    def __init__(self, config: dict) -> None:
        self.config = config
        self.layout = Layout.of(config)
        self.fractions = [frac_label(f) for f in config["eval"]["fractions"]]
        self.final = frac_label(max(config["eval"]["fractions"]))
        self.main_g = int(config["train"]["group_size"])
        self.main_p = int(config["train"]["prompts_per_step"])
        self._run_configs: dict[tuple[str, ...], dict] = {}  # run_config's, by run

    @functools.cached_property
    def lock(self) -> dict | None:
        """The `repro data pin` lock named by config data_lock, if that file exists."""
        path = self.config["data_lock"]
        return read_lock(Path(path)) if path and Path(path).is_file() else None

    @functools.cached_property
    def missing_pins(self) -> str | None:
        """What LiveCodeBench pins are missing and how to write them (None: none missing)."""
        return missing_pins_message(self.config, self.lock)

    def check(self) -> None:
        """The dataclass-owned blocks, each SFT base chain and each ablation group size."""
        check_dataclass_blocks(self.config)
        for model in self.config["models"]:
            self.sft_base(model)
        for model in self.config["run"]["models"]:
            self.init_shape(model)
        self.run_keys()

    def init_shape(self, model: str) -> None:
        """A source-init model that runs declares a `config:` the planner can count, so the
        parameters `repro plan` prints are the ones the rule builds (an entry no run selects,
        e.g. the other paper preset's in the rehearsal overlay, is never built)."""
        from repro.plan import model_shape

        entry = self.config["models"][model]
        if entry["source"] != "init":
            return
        if "config" not in entry:
            raise ValueError(f"config: models.{model} has source init but no 'config' (the "
                             "config.json fields of the model to build)")
        model_shape(self.config, model)

    def prompts_per_step(self, group_size: int) -> int:
        """Group-size ablation at equal compute: P x G responses per step for every G."""
        total = self.main_p * self.main_g
        if total % group_size or (total // group_size) % int(self.config["train"]["minibatches"]):
            raise ValueError(
                f"config: ablations.group_sizes has {group_size}, but train.prompts_per_step x "
                f"train.group_size = {total} responses per step do not split into whole groups "
                f"and train.minibatches"
            )
        return total // group_size

    def run_keys(self) -> list[dict]:
        """Every training run: the main grid, then the ablations (duplicates dropped, `main`
        kept when a run is in both)."""
        runs = []
        main, abl = self.config["run"], self.config["ablations"]
        for model in main["models"]:
            for algo in main["algorithms"]:
                runs += [dict(algo=algo, model=model, group_size=self.main_g, seed=s, main=True)
                         for s in main["seeds"]]
            baseline = [self.config["report"]["baseline"]] if abl["algorithms"] else []
            for algo in abl["algorithms"] + baseline:
                runs += [dict(algo=algo, model=model, group_size=self.main_g, seed=s, main=False)
                         for s in abl["seeds"]]
            for algo in abl["group_algorithms"]:
                for g in abl["group_sizes"]:
                    self.prompts_per_step(g)
                    runs += [dict(algo=algo, model=model, group_size=g, seed=s, main=False)
                             for s in abl["seeds"]]
        unique: dict[tuple, dict] = {}
        for r in runs:
            key = (r["algo"], r["model"], r["group_size"], r["seed"])
            if key in unique:
                unique[key]["main"] |= r["main"]
            else:
                unique[key] = r
        return list(unique.values())

    def run_seeds(self) -> list[int]:
        """Every seed a run uses (main and ablations): the start is evaluated at each of them."""
        return sorted({int(r["seed"]) for r in self.run_keys()})

    def run_dir(self, run: dict) -> str:
        return self.layout.run_dir.format(**run)

    def per_benchmark(self, folder: str, name: str) -> list[str]:
        """`folder/benchmark=B/name` for every evaluated benchmark (other wildcards kept)."""
        return [f"{folder}/benchmark={b}/{name}" for b in self.config["eval"]["benchmarks"]]

    def train_logs(self) -> list[str]:
        return [f"{self.run_dir(r)}/train_log.parquet" for r in self.run_keys()]

    def eval_problems(self, main_only: bool = False) -> list[str]:
        """Main runs at every fraction, ablation runs at the final one (at every one with
        `ablations.all_fractions`), and each model's start."""
        files = []
        benchmarks = self.config["eval"]["benchmarks"]
        every = self.config["ablations"]["all_fractions"]
        for r in self.run_keys():
            if main_only and not r["main"]:
                continue
            for frac in self.fractions if r["main"] or every else [self.final]:
                folder = self.layout.eval_dir.format(**r, frac=frac)
                files += [f"{folder}/benchmark={b}/problems.parquet" for b in benchmarks]
        if self.config["eval"]["init"]:  # at every run seed: paired, same sampling seed as runs
            for model in self.config["run"]["models"]:
                files += [f"{self.layout.init_dir.format(model=model, seed=s)}/benchmark={b}/"
                          "problems.parquet" for s in self.run_seeds() for b in benchmarks]
        return files

    def final_targets(self) -> list[str]:
        """`snakemake` with no target: every run, evaluation, aggregate, table and figure, and
        last the comparison of this run's aggregate with the committed one."""
        return (self.train_logs() + self.eval_problems() + self.layout.table_files()
                + self.layout.figure_files() + [f"{THEORY_DIR}/theory.parquet",
                                                self.layout.expectations_file])

    def ablation_targets(self) -> list[str]:
        """`snakemake ablations`: the ablation runs, then the table and figure that read them."""
        runs = [r for r in self.run_keys() if not r["main"]]
        return ([f"{self.run_dir(r)}/train_log.parquet" for r in runs]
                + [f"{self.layout.table_dir}/ablations.md",
                   f"{self.layout.figure_dir}/group_size_ablation.pdf"])

    def verified_outputs(self) -> list[str]:
        """Outputs checked before the DAG is built: against their job's manifest, or (theory,
        paper reference: no manifest) by reading their Parquet footer."""
        problems = self.eval_problems()
        return (self.train_logs() + problems
                + [p.replace("problems.parquet", "samples.parquet") for p in problems]
                + self.layout.aggregate_files() + [f"{THEORY_DIR}/theory.parquet", PAPER_REFERENCE])

    def start_policy(self, model: str) -> str:
        """Where RL starts: the pipeline's SFT or init folder, or the hub id / path as given."""
        entry = self.config["models"][model]
        if entry["source"] == "sft":
            return MODEL_DIR.format(model=model)
        if entry["source"] == "init":
            return INIT_MODEL_DIR.format(model=model)
        if "id" not in entry:
            raise ValueError(f"config: models.{model} has source hub but no 'id'")
        return entry["id"]

    def start_policy_of(self, wildcards: Any) -> str:
        return self.start_policy(wildcards.model)

    def start_inputs(self, wildcards: Any) -> list[str]:
        """The SFT or init folder as an input when the pipeline builds it; nothing for hub
        models."""
        entry = self.config["models"][wildcards.model]
        built = entry["source"] in ("sft", "init")
        return [self.start_policy(wildcards.model)] if built else []

    def init_config(self, wildcards: Any) -> str:
        """A source-init model's `config:` block as the quoted JSON `repro init-model` takes
        (a param: a changed shape rebuilds the model and reruns what starts from it)."""
        return shlex.quote(json.dumps(self.config["models"][wildcards.model]["config"],
                                      sort_keys=True))

    def sft_base(self, model: str) -> str | None:
        """The catalogue key a second-stage SFT continues from (checked: an sft entry, no
        cycle)."""
        models = self.config["models"]
        base, seen = models[model].get("base"), {model}
        key = base
        while key is not None:
            if key not in models or models[key]["source"] != "sft":
                raise ValueError(f"config: models.{model}.base names {key!r}, not an sft entry "
                                 f"of the 'models' catalogue {sorted(models)}")
            if key in seen:
                raise ValueError(f"config: models.{model}.base forms a cycle through {key!r}")
            seen.add(key)
            key = models[key].get("base")
        return base

    def sft_inputs(self, wildcards: Any) -> list[str]:
        """The base stage's SFT folder for a second stage; nothing for an SFT from scratch."""
        base = self.sft_base(wildcards.model)
        return [] if base is None else [self.start_policy(base)]

    def sft_overrides(self, wildcards: Any) -> str:
        """The model's `sft:` entries (and its base stage's folder as `model`) as quoted
        KEY=VALUE arguments of `repro sft`."""
        items = dict(self.config["models"][wildcards.model].get("sft", {}))
        base = self.sft_base(wildcards.model)
        if base is not None:
            if "model" in items:
                raise ValueError(f"config: models.{wildcards.model} sets both base and sft.model")
            items["model"] = self.start_policy(base)
        return " ".join(shlex.quote(f"{k}={json.dumps(v)}") for k, v in items.items())

    def run_config(self, wildcards: Any) -> dict:
        """The resolved TrainConfig of one run (written to its config.yaml): every field,
        defaults included, so a changed dataclass default reruns the runs it changes, like a
        config value. Built once per run in this process (the parse-time check and the rule's
        params read the same one)."""
        key = tuple(str(getattr(wildcards, k)) for k in ("algo", "model", "group_size", "seed"))
        if key not in self._run_configs:
            self._run_configs[key] = self._build_run_config(wildcards)
        return self._run_configs[key]

    def _build_run_config(self, wildcards: Any) -> dict:
        from repro.training.config import TrainConfig
        from repro.training.sources import label_knobs

        entry = self.config["algorithms"][wildcards.algo]
        g = int(wildcards.group_size)
        values = train_block(self.config) | label_knobs(entry) | self.lock_settings() | {
            "model": self.start_policy(wildcards.model),
            "algorithm": entry["algorithm"],
            "objective": entry.get("objective", {}),
            "seed": int(wildcards.seed),
            "group_size": g,
            "prompts_per_step": self.prompts_per_step(g),
            "checkpoint_fractions": [float(f) for f in self.fractions],
        }
        try:
            return TrainConfig(**values).to_dict()
        except ValueError as err:
            raise ValueError(f"config: run {RUN.format(**vars(wildcards))}: {err}") from None

    def check_run_configs(self) -> None:
        """Every run's TrainConfig is built once, so a value out of range (say a negative lr)
        fails at parse time naming the run, not after the SFT."""
        hw = self.config["hardware"]["train"]
        world = max(1, hw["nodes"] * hw["gpus_per_node"])
        for r in self.run_keys():
            cfg = self.run_config(SimpleNamespace(**{k: r[k] for k in ("algo", "model",
                                                                        "group_size", "seed")}))
            check_whole_groups(cfg, world, RUN.format(**r))

    def lock_settings(self) -> dict:
        """Training's view of the lock: LCB pins and the mirror, when a task reads hub files."""
        real = [get_benchmark(n) for n in train_block(self.config).get("tasks", {})]
        real = [spec for spec in real if spec.source != "synthetic"]
        if self.lock is None or not real:
            return {}
        pins = {k: v for spec in real if spec.source == "lcb_jsonl"
                for k, v in pins_for(spec, self.lock).items()}
        settings = {"sha256_pins": self.config["train"].get("sha256_pins", {}) | pins}
        if self.config["train"].get("data_dir") is None and self.lock["data_dir"] is not None:
            settings["data_dir"] = str(self.lock["data_dir"])
        return settings

    def eval_config(self, wildcards: Any) -> dict:
        """The resolved EvalConfig of one checkpoint's evaluation (its resolved.yaml)."""
        keys = vars(wildcards)
        return self._eval_config(model=self.layout.policy_dir.format(**keys),
                                 out=self.layout.eval_dir.format(**keys),
                                 checkpoint=f"frac={wildcards.frac}", seed=int(wildcards.seed))

    def init_eval_config(self, wildcards: Any) -> dict:
        """The resolved EvalConfig of the start's evaluation at one run seed (same sampling
        seed as that seed's runs: paired draws)."""
        return self._eval_config(model=self.start_policy(wildcards.model),
                                 out=self.layout.init_dir.format(**vars(wildcards)),
                                 checkpoint="init", seed=int(wildcards.seed))

    def _eval_config(self, **job: Any) -> dict:
        """Config `eval` (what every evaluation shares) and one job's values, as an EvalConfig
        with every field, defaults included, so a changed dataclass default reruns the
        evaluations, like a config value."""
        from repro.evaluation.config import EvalConfig

        e = self.config["eval"]
        try:
            return EvalConfig(
                benchmarks=list(e["benchmarks"]), split=True, k=e["k"], limit=e["limit"],
                data_dir=e["data_dir"],
                lock=None if self.lock is None else self.config["data_lock"],
                engine=e["engine"], batch_size=e["batch_size"], workers=EVAL_THREADS,
                # null: each benchmark's own (a preset undoing the default's override), as
                # SamplingOverrides.of reads it
                sampling=e["sampling"], **job,
            ).to_dict()
        except ValueError as err:
            raise ValueError(f"config: eval of {job['out']}: {err}") from None

    def study_options(self) -> str:
        """`repro aggregate` study settings: stored in the aggregate so tables need nothing
        else."""
        c = self.config
        r, a = c["report"], c["ablations"]
        return " ".join([
            f"--experiment {c['experiment']}",
            f"--baseline {r['baseline']}",
            f"--proposed {r['proposed']}",
            f"--main-algos {','.join(c['run']['algorithms'])}",
            f"--main-group-size {self.main_g}",
            f"--ablation-algos '{','.join(a['algorithms'])}'",
            f"--group-algos '{','.join(a['group_algorithms'])}'",
            f"--threshold {r['threshold']}",
            f"--smooth-window {r['smooth_window']}",
            f"--final-frac {self.final}",
        ])

