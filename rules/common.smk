# Helpers only: config checks, run keys, output layout, target lists, source digests. No rules here.
import hashlib
import json
import re
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from repro.results.manifest import quarantine
from repro.benchmarks import get_benchmark
from repro.benchmarks.pins import missing_pins, pins_for, read_lock
from repro.training.export import frac_label  # the trainer's spelling of policy/frac=F


def refuse(message: str) -> None:
    """A config error: its message alone on stderr, exit 1 (no Snakemake traceback lines)."""
    print(message, file=sys.stderr)
    sys.exit(1)


def at_parse_time(check, *args):
    """Run a parse-time check; its ValueError becomes a refusal naming the key."""
    try:
        return check(*args)
    except ValueError as err:
        refuse(str(err))


try:
    validate(config, "../config/schema.yaml", set_default=True)
except WorkflowError as err:  # jsonschema's report, cut to one line: the key, what it breaks
    text = str(err)
    where = re.search(r"^On instance(\S*):", text, re.M)
    what = re.search(r"^ValidationError: (.*)$", text, re.M)
    key = f" {where.group(1)}" if where else ""
    refuse(f"config{key}: {what.group(1) if what else text.splitlines()[0]}")


def check_names(selection: str, names, catalogue: str) -> None:
    """A selection may only name catalogue entries; say which key is wrong at parse time."""
    unknown = sorted(set(names) - set(config[catalogue]))
    if unknown:
        raise ValueError(
            f"config: {selection} names {unknown}, not in the '{catalogue}' catalogue "
            f"{sorted(config[catalogue])}"
        )


at_parse_time(check_names, "run.models", config["run"]["models"], "models")
at_parse_time(check_names, "run.algorithms", config["run"]["algorithms"], "algorithms")
at_parse_time(check_names, "ablations.algorithms", config["ablations"]["algorithms"],
              "algorithms")
at_parse_time(check_names, "ablations.group_algorithms", config["ablations"]["group_algorithms"],
              "algorithms")
at_parse_time(check_names, "report", [config["report"]["baseline"],
                                      config["report"]["proposed"]], "algorithms")


def data_lock():
    """The `repro data pin` lock named by config data_lock, if that file exists."""
    path = config["data_lock"]
    return read_lock(Path(path)) if path and Path(path).is_file() else None


def missing_pins_message(lock) -> str | None:
    """Jobs that read LiveCodeBench need its shards pinned: which are missing, and the command
    that pins them (None: nothing missing)."""
    names = sorted(set(config["eval"]["benchmarks"]) | set(config["train"].get("tasks", {})))
    missing = missing_pins([get_benchmark(name) for name in names], lock)
    if not missing:
        return None
    lacking = "; ".join(f"{name} lacks {files}" for name, files in missing.items())
    where = config["data_lock"] if lock else f"{config['data_lock']} (no such file)"
    return (f"LiveCodeBench sha256 pins missing in data_lock {where}: {lacking}. Pin them once "
            "where the hub is reachable: repro data pin "
            + " ".join(f"--benchmark {name}" for name in missing)
            + f" --data-dir DATA_DIR --lock {config['data_lock'] or 'data.lock.yaml'}")


LOCK = data_lock()
MISSING_PINS = missing_pins_message(LOCK)
if MISSING_PINS:  # a dry run plans the DAG (a fresh clone has no lock); a real run stops first
    print(f"config: warning: {MISSING_PINS} (a dry run plans the DAG; a real run refuses before "
          "any job)", file=sys.stderr)


def refuse_missing_pins() -> None:
    """onstart (real runs only, before any job): no job may start without the pins."""
    if MISSING_PINS:
        refuse(f"config: {MISSING_PINS}")


def check_dataclass_blocks() -> None:
    """`train:`, `algorithms.*.objective` and `models.*.sft` against their dataclasses' fields and
    types, now rather than when a job runs (the schema leaves them open: the dataclasses own them)."""
    from repro.config_fields import check_fields
    from repro.objectives import get_algorithm
    from repro.training.config import TrainConfig

    check_fields(TrainConfig, config["train"], "config train: ")
    for label, entry in config["algorithms"].items():
        try:  # the registry is the list of algorithms (the schema keeps no copy)
            algorithm = get_algorithm(entry["algorithm"])
        except ValueError as err:
            raise ValueError(f"config algorithms.{label}.algorithm: {err}") from None
        check_fields(algorithm.config_cls, entry.get("objective", {}),
                     f"config algorithms.{label}.objective: ")
    sft_blocks = {key: e["sft"] for key, e in config["models"].items() if e["source"] == "sft"}
    if sft_blocks:
        from repro.training.sft import SFTConfig

        for key, block in sft_blocks.items():
            check_fields(SFTConfig, block, f"config models.{key}.sft: ")
            try:
                SFTConfig(**block)
            except ValueError as err:
                raise ValueError(f"config models.{key}.sft: {err}") from None


at_parse_time(check_dataclass_blocks)



FRACTIONS = [frac_label(f) for f in config["eval"]["fractions"]]
FINAL = frac_label(max(config["eval"]["fractions"]))
MAIN_G = int(config["train"]["group_size"])
MAIN_P = int(config["train"]["prompts_per_step"])
RUN = "algo={algo}/model={model}/group_size={group_size}/seed={seed}"
INIT = "algo=init/model={model}/seed={seed}/frac=0.0"

# The output layout, in one place (rules use these, never their own literals). An experiment's
# own outputs live under config `results`; SFT models, the paper reference and the theory
# experiment do not depend on the experiment and stay under results/.
OUT = config["results"].rstrip("/")
RUN_DIR = f"{OUT}/runs/{RUN}"  # patterns with the run's wildcards
SCRATCH_DIR = f"{OUT}/scratch/{RUN}"
EVAL_DIR = f"{OUT}/eval/{RUN}/frac={{frac}}"
INIT_DIR = f"{OUT}/eval/{INIT}"
AGG_DIR = f"{OUT}/aggregate"
TABLE_DIR = f"{OUT}/tables"
FIGURE_DIR = f"{OUT}/figures"
MODEL_DIR = "results/models/model={model}/sft"
PAPER_REFERENCE = "results/paper/reference.parquet"
THEORY_DIR = "results/theory"
# Logs and Snakemake benchmarks of the experiment's own jobs are keyed like its outputs (the
# default's under logs/, config `results: results/tiny-study` under logs/tiny-study/), so two
# experiments never overwrite each other's; the shared jobs (SFT, paper reference, theory) log
# under logs/ and benchmarks/.
_OUT_KEY = (Path(OUT).relative_to("results") if Path(OUT).is_relative_to("results")
            else Path(OUT.strip("/")))
LOG_DIR = str(Path("logs") / _OUT_KEY)
BENCH_DIR = str(Path("benchmarks") / _OUT_KEY)


def source_digest(*parts: str) -> str:
    """sha256 of the package sources a job runs. Contents, not mtimes, so a fresh clone does not
    rerun and an edit does. (Snakemake's own code trigger sees only the shell string.)"""
    h = hashlib.sha256()
    for part in parts:
        root = Path(workflow.basedir) / "repro" / part
        files = sorted(root.rglob("*")) if root.is_dir() else [root]
        for path in files:
            if path.is_file() and path.suffix in {".py", ".yaml", ".jinja", ".mplstyle"}:
                h.update(str(path.relative_to(workflow.basedir)).encode())
                h.update(path.read_bytes())
    return h.hexdigest()[:16]


TRAIN_CODE = source_digest("objectives", "training", "engines", "models", "generation", "graders",
                           "sandbox", "tasks", "benchmarks", "diagnostics", "results", "atomic.py",
                           "progress.py")
SFT_CODE = source_digest("training", "models", "tasks", "benchmarks", "generation", "graders",
                         "atomic.py")
EVAL_CODE = source_digest("evaluation", "generation", "graders", "sandbox", "benchmarks", "tasks",
                          "models", "results", "atomic.py", "progress.py")
REPORT_CODE = source_digest("reporting", "results", "evaluation", "diagnostics", "benchmarks")
THEORY_CODE = source_digest("theory", "objectives", "diagnostics", "results")


def prompts_per_step(group_size: int) -> int:
    """Group-size ablation at equal compute: P x G responses per step for every G."""
    total = MAIN_P * MAIN_G
    if total % group_size or (total // group_size) % int(config["train"]["minibatches"]):
        raise ValueError(
            f"config: ablations.group_sizes has {group_size}, but train.prompts_per_step x "
            f"train.group_size = {total} responses per step do not split into whole groups "
            f"and train.minibatches"
        )
    return total // group_size


def run_keys() -> list[dict]:
    """Every training run: the main grid, then the ablations (duplicates dropped)."""
    runs = []
    main, abl = config["run"], config["ablations"]
    for model in main["models"]:
        for algo in main["algorithms"]:
            runs += [dict(algo=algo, model=model, group_size=MAIN_G, seed=s, main=True)
                     for s in main["seeds"]]
        variants = abl["algorithms"] + ([config["report"]["baseline"]] if abl["algorithms"] else [])
        for algo in variants:
            runs += [dict(algo=algo, model=model, group_size=MAIN_G, seed=s, main=False)
                     for s in abl["seeds"]]
        for algo in abl["group_algorithms"]:
            for g in abl["group_sizes"]:
                prompts_per_step(g)
                runs += [dict(algo=algo, model=model, group_size=g, seed=s, main=False)
                         for s in abl["seeds"]]
    unique = {}
    for r in runs:
        key = (r["algo"], r["model"], r["group_size"], r["seed"])
        if key in unique:
            unique[key]["main"] |= r["main"]
        else:
            unique[key] = r
    return list(unique.values())


def run_dir(r: dict) -> str:
    return RUN_DIR.format(**r)


def eval_dir(r: dict, frac: str) -> str:
    return EVAL_DIR.format(**r, frac=frac)


def per_benchmark(folder: str, name: str) -> list[str]:
    """`folder/benchmark=B/name` for every evaluated benchmark (other wildcards kept)."""
    return expand(f"{folder}/benchmark={{benchmark}}/{name}",
                  benchmark=config["eval"]["benchmarks"], allow_missing=True)


def train_logs() -> list[str]:
    return [f"{run_dir(r)}/train_log.parquet" for r in run_keys()]


def eval_problems(main_only: bool = False) -> list[str]:
    """Main runs at every fraction, ablation runs at the final one, and each model's start."""
    files = []
    for r in run_keys():
        if main_only and not r["main"]:
            continue
        for frac in FRACTIONS if r["main"] else [FINAL]:
            files += [f"{eval_dir(r, frac)}/benchmark={b}/problems.parquet"
                      for b in config["eval"]["benchmarks"]]
    if config["eval"]["init"]:  # at every run seed: paired, same sampling seed as the runs
        for model in config["run"]["models"]:
            files += [f"{INIT_DIR.format(model=model, seed=s)}/benchmark={b}/problems.parquet"
                      for s in run_seeds() for b in config["eval"]["benchmarks"]]
    return files


def run_seeds() -> list[int]:
    """Every seed a run uses (main and ablations): the start is evaluated at each of them."""
    return sorted({int(r["seed"]) for r in run_keys()})


def start_policy(model: str) -> str:
    """Where RL starts: the pipeline's SFT folder, or the hub id / path as given."""
    entry = config["models"][model]
    if entry["source"] == "sft":
        return MODEL_DIR.format(model=model)
    if "id" not in entry:
        raise ValueError(f"config: models.{model} has source hub but no 'id'")
    return entry["id"]


def sft_base(model: str) -> str | None:
    """The catalogue key a second-stage SFT continues from (checked: an sft entry, no cycle)."""
    base, seen = config["models"][model].get("base"), {model}
    key = base
    while key is not None:
        if key not in config["models"] or config["models"][key]["source"] != "sft":
            raise ValueError(f"config: models.{model}.base names {key!r}, not an sft entry of "
                             f"the 'models' catalogue {sorted(config['models'])}")
        if key in seen:
            raise ValueError(f"config: models.{model}.base forms a cycle through {key!r}")
        seen.add(key)
        key = config["models"][key].get("base")
    return base


for _model in config["models"]:
    at_parse_time(sft_base, _model)  # a bad base fails at parse time


def sft_inputs(wildcards) -> list[str]:
    """The base stage's SFT folder for a second stage; nothing for an SFT from scratch."""
    base = sft_base(wildcards.model)
    return [] if base is None else [start_policy(base)]


def sft_overrides(wildcards) -> str:
    """The model's `sft:` entries (and its base stage's folder as `model`) as quoted
    KEY=VALUE arguments of `repro sft`."""
    items = dict(config["models"][wildcards.model].get("sft", {}))
    base = sft_base(wildcards.model)
    if base is not None:
        if "model" in items:
            raise ValueError(f"config: models.{wildcards.model} sets both base and sft.model")
        items["model"] = start_policy(base)
    return " ".join(shlex.quote(f"{k}={json.dumps(v)}") for k, v in items.items())


def start_policy_of(wildcards) -> str:
    return start_policy(wildcards.model)


def start_inputs(wildcards) -> list[str]:
    """The SFT folder as an input when the pipeline builds it; nothing for hub models."""
    entry = config["models"][wildcards.model]
    return [start_policy(wildcards.model)] if entry["source"] == "sft" else []


def run_config(wildcards) -> dict:
    """The resolved TrainConfig of one run (written to its config.yaml): every field, defaults
    included, so a changed dataclass default reruns the runs it changes, like a config value."""
    from repro.training.config import TrainConfig

    entry = config["algorithms"][wildcards.algo]
    g = int(wildcards.group_size)
    values = config["train"] | lock_settings() | {
        "model": start_policy(wildcards.model),
        "algorithm": entry["algorithm"],
        "objective": entry.get("objective", {}),
        "seed": int(wildcards.seed),
        "group_size": g,
        "prompts_per_step": prompts_per_step(g),
        "checkpoint_fractions": [float(f) for f in FRACTIONS],
    }
    try:
        return TrainConfig(**values).to_dict()
    except ValueError as err:
        raise ValueError(f"config: run {RUN.format(**vars(wildcards))}: {err}") from None


def lock_settings() -> dict:
    """Training's view of the lock: LCB pins and the mirror, when a task reads hub files."""
    real = [get_benchmark(n) for n in config["train"].get("tasks", {})]
    real = [spec for spec in real if spec.source != "synthetic"]
    if LOCK is None or not real:
        return {}
    pins = {k: v for spec in real if spec.source == "lcb_jsonl" for k, v in pins_for(spec, LOCK).items()}
    settings = {"sha256_pins": config["train"].get("sha256_pins", {}) | pins}
    if config["train"].get("data_dir") is None and LOCK["data_dir"] is not None:
        settings["data_dir"] = str(LOCK["data_dir"])
    return settings


def eval_options() -> str:
    """The `repro eval` options every evaluation shares."""
    e = config["eval"]
    opts = [f"--benchmark {b}" for b in e["benchmarks"]]
    opts += [f"--engine {e['engine']}", f"--batch-size {e['batch_size']}", "--split"]
    if e["k"] is not None:
        opts.append(f"--k {e['k']}")
    if e["limit"] is not None:
        opts.append(f"--limit {e['limit']}")
    if e["data_dir"] is not None:
        opts.append(f"--data-dir {e['data_dir']}")
    if LOCK is not None:
        opts.append(f"--lock {config['data_lock']}")
    for key, value in e["sampling"].items():  # the schema admits only `repro eval` options
        if value is not None:  # null: each benchmark's own (a preset undoing the default's)
            opts.append(f"--{key.replace('_', '-')} {value}")
    return " ".join(opts)


def study_options() -> str:
    """`repro aggregate` study settings: stored in the aggregate so tables need nothing else."""
    r, a = config["report"], config["ablations"]
    return " ".join([
        f"--experiment {config['experiment']}",
        f"--baseline {r['baseline']}",
        f"--proposed {r['proposed']}",
        f"--main-algos {','.join(config['run']['algorithms'])}",
        f"--main-group-size {MAIN_G}",
        f"--ablation-algos '{','.join(a['algorithms'])}'",
        f"--group-algos '{','.join(a['group_algorithms'])}'",
        f"--threshold {r['threshold']}",
        f"--smooth-window {r['smooth_window']}",
        f"--final-frac {FINAL}",
    ])


TABLES = ["main", "compute", "mechanism", "ablations", "verdict", "paper"]
FIGURES = ["reward_vs_compute", "entropy_vs_step", "logodds_drift_vs_step", "kl_template_vs_step",
           "mechanism_vs_step", "group_size_ablation"]
AGGREGATES = ["train_curves", "eval_problems", "eval_samples", "runs"]


def aggregate_files() -> list[str]:
    return expand(f"{AGG_DIR}/{{name}}.parquet", name=AGGREGATES)


def table_files() -> list[str]:
    return expand(f"{TABLE_DIR}/{{name}}.{{ext}}", name=TABLES, ext=["md", "tex"])


def figure_files() -> list[str]:
    return expand(f"{FIGURE_DIR}/{{name}}.{{ext}}", name=FIGURES, ext=["pdf", "png"])


def ablation_targets() -> list[str]:
    """`snakemake ablations`: the ablation runs, then the table and figure that read them."""
    runs = [r for r in run_keys() if not r["main"]]
    return ([f"{run_dir(r)}/train_log.parquet" for r in runs]
            + [f"{TABLE_DIR}/ablations.md", f"{FIGURE_DIR}/group_size_ablation.pdf"])


def write_yaml(path: str, data: dict) -> None:
    """Atomic YAML write (the resolved run configs)."""
    import yaml
    from repro.atomic import atomic_file

    text = yaml.safe_dump(data, sort_keys=True)
    atomic_file(Path(path), lambda tmp: tmp.write_text(text))


def verified_outputs() -> list[str]:
    """Outputs checked before the DAG is built: against their job's manifest, or (theory, paper
    reference: no manifest) by reading their Parquet footer."""
    problems = eval_problems()
    return (train_logs() + problems + [p.replace("problems.parquet", "samples.parquet")
                                       for p in problems]
            + aggregate_files() + [f"{THEORY_DIR}/theory.parquet", PAPER_REFERENCE])


at_parse_time(run_keys)  # an ablation group size that does not split fails here, by its key


def plan_gpu_jobs() -> list:
    """The memory planner over the GPU jobs (`repro plan`): a job that cannot fit its GPUs is
    refused now, in one line naming the key to change; the plans give evaluation walltimes."""
    from repro.plan import plan_jobs

    return plan_jobs(config)


PLAN = at_parse_time(plan_gpu_jobs)


# A damaged output (truncated, garbage, torn copy) is moved aside to NAME.corrupt here, with one
# line saying why, so Snakemake sees it missing and reruns exactly the job that wrote it and the
# jobs downstream. Unchanged files that verified before are not hashed again (stat cache).
for line in quarantine(verified_outputs(), Path(".snakemake") / "repro-verified.json"):
    print(line, file=sys.stderr)


def final_targets() -> list[str]:
    """`snakemake` with no target: every run, evaluation, aggregate, table and figure."""
    return (train_logs() + eval_problems() + table_files() + figure_files()
            + [f"{THEORY_DIR}/theory.parquet"])


def check_run_configs() -> None:
    """Every run's TrainConfig is built once here, so a value out of range (say a negative lr)
    fails at parse time naming the run, not after the SFT."""
    from types import SimpleNamespace

    for r in run_keys():
        run_config(SimpleNamespace(**{k: r[k] for k in ("algo", "model", "group_size", "seed")}))


at_parse_time(check_run_configs)

