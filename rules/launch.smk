# Where and how jobs run: the --sdm conda environment per engine, the GPU jobs' resources (nodes,
# per-node gres and the evaluation walltime, from config hardware: and the planner), and the
# command that starts training (python, `accelerate launch`, or one launcher per node under srun).
import os
import re
import sys
from pathlib import Path

from repro.config_fields import field_defaults
from repro.training.config import TrainConfig
from repro.training.trainers import DECLARED, Engine

# Jobs run `python -m repro` from PATH. The interpreter running this workflow comes first on it,
# so the jobs use the package the parse imported, also where its venv was not activated
# (`.venv/bin/snakemake`, `.venv/bin/python -m pytest`: the system python lacks the package).
# Not resolved: a venv's python is a link, and its folder is what makes it the venv. Under
# --sdm conda each job's shell activates its environment in front of this (not run: no conda
# here). Job processes parse the workflow again, hence the check. `envvars` declares PATH, which
# also hands it on to jobs on other hosts (a SLURM node sees the same venv on the shared file
# system).
envvars:
    "PATH",


_BIN = str(Path(sys.executable).parent)
if os.environ.get("PATH", "").split(os.pathsep)[0] != _BIN:
    os.environ["PATH"] = os.pathsep.join([_BIN, os.environ.get("PATH", "")])


def job_env(wildcards) -> str:
    """--sdm conda environment of the SFT and evaluation jobs: the GPU stack when evaluation
    uses vLLM."""
    return "../envs/gpu.yaml" if config["eval"]["engine"] == "vllm" else "../envs/cpu.yaml"


def train_engine() -> Engine:
    """train.engine's declaration (unset means TrainConfig's default, the native engine)."""
    return DECLARED[config["train"].get("engine", field_defaults(TrainConfig)["engine"])]


def train_env(wildcards) -> str:
    """--sdm conda environment of training jobs, as the engine declares it: the pinned GPU stack
    (TRL, accelerate, vLLM) for the TRL engine, the CPU one for the native engine."""
    return f"../envs/{train_engine().env}.yaml"


ACCELERATE_CONFIG = "config/accelerate/fsdp2.yaml"
GRES_GPUS = re.compile(r"gpu(?::[\w.]+)?:(\d+)")


def gres(gpus: int) -> str:
    """Per-node GPU GRES of hardware.gpu_type (SLURM --gres, one value for every node)."""
    kind = config["hardware"]["gpu_type"]
    return f"gpu:{kind}:{gpus}" if kind else f"gpu:{gpus}"


def train_resources() -> dict:
    """A train job's nodes and per-node GPUs from hardware.train (nothing for CPU jobs). On
    several nodes the job's shell starts the launchers with srun itself (`mpi`: the SLURM
    executor then adds no srun of its own), one task per node (`tasks`; `tasks_per_gpu: 0` keeps
    the executor from turning them into --ntasks-per-gpu)."""
    hw = config["hardware"]["train"]
    if not hw["gpus_per_node"]:
        return {}
    res = {"nodes": hw["nodes"], "gres": gres(hw["gpus_per_node"])}
    if hw["nodes"] > 1:
        res |= {"mpi": "srun", "tasks": hw["nodes"], "tasks_per_gpu": 0}
    return res


def eval_resources() -> dict:
    """An evaluation job's GPUs (hardware.eval, one node) and, when it has GPUs, its walltime
    from the planner's token estimate (rules/common.smk: PLAN)."""
    gpus = config["hardware"]["eval"]["gpus"]
    if not gpus:
        return {"runtime": "1h"}
    minutes = max(p.runtime_min for p in PLAN if p.job == "evaluate")
    return {"nodes": 1, "gres": gres(gpus), "runtime": minutes}


def train_layout(resources) -> tuple[int, int]:
    """(nodes, GPUs per node) the train job got: `nodes` and `gres: gpu[:type]:N` per node, from
    hardware.train (train_resources) unless a profile overrides them, which must then agree
    with hardware.train (the planner sized that layout). None (CPU jobs): one node, no GPU."""
    nodes = int(resources.get("nodes") or 1)
    match = GRES_GPUS.fullmatch(str(resources.get("gres") or ""))
    per_node = int(match.group(1)) if match else 0
    if resources.get("gpu"):
        raise ValueError(f"profile: train jobs set `gpu` ({resources.get('gpu')}); GPUs come "
                         "from config hardware.train (per-node gres), remove it")
    hw = config["hardware"]["train"]
    if (nodes, per_node) != (hw["nodes"], hw["gpus_per_node"]) and per_node:
        raise ValueError(f"profile: train jobs get {nodes} node(s) x {per_node} GPUs but config "
                         f"hardware.train plans {hw['nodes']} x {hw['gpus_per_node']}; set "
                         "hardware.train, not the profile")
    return nodes, per_node


def train_launcher(wildcards, threads, resources) -> str:
    """What runs `-m repro train`: python (one process), `accelerate launch` (TRL engine, one
    node, one process per GPU, FSDP2) or, on several nodes, one `accelerate launch` per node
    under srun (scripts/launch_accelerate.sh)."""
    nodes, per_node = train_layout(resources)
    procs = nodes * per_node
    if procs <= 1:
        return "python"
    engine = train_engine()
    if engine.launch != "accelerate":
        many = [e.name for e in DECLARED.values() if e.launch == "accelerate"]
        raise ValueError(f"config: train.engine is {engine.name} (one process on one device), "
                         f"but hardware.train gives train jobs {nodes} node(s) x {per_node} "
                         f"GPU(s); set train.engine: {' or '.join(many)}, or give train one GPU")
    accelerate = f"--config_file {ACCELERATE_CONFIG} --num_processes {procs}"
    if nodes == 1:
        return f"accelerate launch {accelerate} --main_process_port 0"  # 0: a free port
    return (f"srun --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1 --cpus-per-task={threads} "
            f"--gres={resources.get('gres')} scripts/launch_accelerate.sh {accelerate}")


def train_threads(wildcards, threads, resources) -> int:
    """torch CPU threads of each training process: the job's threads (per node) shared by the
    processes that accelerate starts on a node."""
    return max(1, threads // max(1, train_layout(resources)[1]))
