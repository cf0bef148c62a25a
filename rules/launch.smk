# Where and how jobs run: the --sdm conda environment per engine, and the command that starts
# training (python, `accelerate launch`, or one launcher per node under srun) from the GPUs and
# nodes the profile gives the job. Config holds experiment settings only (train.engine).
import re


def job_env(wildcards) -> str:
    """--sdm conda environment of the SFT and evaluation jobs: the GPU stack when evaluation
    uses vLLM."""
    return "../envs/gpu.yaml" if config["eval"]["engine"] == "vllm" else "../envs/cpu.yaml"


def trl_engine() -> bool:
    """train.engine is trl (unset means TrainConfig's default, the native engine)."""
    return config["train"].get("engine") == "trl"


def train_env(wildcards) -> str:
    """--sdm conda environment of training jobs: the pinned GPU stack (TRL, accelerate, vLLM)
    for the TRL engine, the CPU one for the native engine."""
    return "../envs/gpu.yaml" if trl_engine() else "../envs/cpu.yaml"


ACCELERATE_CONFIG = "config/accelerate/fsdp2.yaml"
GRES_GPUS = re.compile(r"gpu(?::[\w.]+)?:(\d+)")


def train_layout(resources) -> tuple[int, int]:
    """(nodes, GPUs per node) of a train job, read from the resources its profile sets, so that
    the config keeps experiment settings only: `nodes`, and `gres: gpu[:type]:N` (per node) or
    `gpu` (the job's total, as --gpus). None set (local runs): one node, no GPU."""
    nodes = int(resources.get("nodes") or 1)
    gres = GRES_GPUS.fullmatch(str(resources.get("gres") or ""))
    if gres:
        return nodes, int(gres.group(1))
    total = int(resources.get("gpu") or 0)
    if total % nodes:
        raise ValueError(f"profile: train jobs ask for {total} GPUs in all (`gpu`) on {nodes} "
                         "nodes; give whole nodes (gpu = nodes x GPUs per node)")
    return nodes, total // nodes


def train_launcher(wildcards, threads, resources) -> str:
    """What runs `-m repro train`: python (one process), `accelerate launch` (TRL engine, one
    node, one process per GPU, FSDP2) or, on several nodes, one `accelerate launch` per node
    under srun (scripts/launch_accelerate.sh)."""
    nodes, per_node = train_layout(resources)
    procs = nodes * per_node
    if procs <= 1:
        return "python"
    if not trl_engine():
        raise ValueError(f"config: train.engine is native (one process on one device), but the "
                         f"profile gives train jobs {nodes} node(s) x {per_node} GPU(s); set "
                         "train.engine: trl, or give train one GPU")
    accelerate = f"--config_file {ACCELERATE_CONFIG} --num_processes {procs}"
    if nodes == 1:
        return f"accelerate launch {accelerate} --main_process_port 0"  # 0: a free port
    return (f"srun --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1 --cpus-per-task={threads} "
            f"--gpus-per-node={per_node} scripts/launch_accelerate.sh {accelerate}")


def train_threads(wildcards, threads, resources) -> int:
    """torch CPU threads of each training process: the job's threads (per node) shared by the
    processes that accelerate starts on a node."""
    return max(1, threads // max(1, train_layout(resources)[1]))
