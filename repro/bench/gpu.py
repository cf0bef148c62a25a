"""`repro bench gpu`: the one-GPU check of the TRL engine at real Qwen3 shapes (issue 9, item 5).

Why: the CPU tests prove the TRL engine equals the objectives on a tiny float64 model; they say
nothing about bf16 at real sizes. On one GPU, with no network and no vLLM, this builds
random-init Qwen3 models of real shapes (0.6B, 4B; 8B forward/backward only), runs a few TRL-
engine steps of gspo and dfpo_min (P=8, G=8, K=4, 1k-token responses, bf16) with a seeded
hash-Bernoulli reward (so advantages are not zero), and writes one JSON: package versions,
rollout and update tokens/s, peak memory, model FLOPs utilisation of the update, the overhead of
diagnostics and of the DFPO pre-pass, the max |log s| on the first minibatch (bf16 drift,
verl#2996), asym/residual_full in bf16, the max |logp difference| between TRL's log-prob path
and `response_logprobs`, and a save/reload of the policy (FSDP2 when run under `accelerate
launch` with an FSDP2 config). `--tiny` runs the same code on CPU in seconds (CI).
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

SHAPES: dict[str, dict[str, Any]] = {  # Qwen3 config.json values (vocab 151,936)
    "qwen3-0.6b": {"hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16,
                   "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 3072,
                   "tie_word_embeddings": True},
    "qwen3-4b": {"hidden_size": 2560, "num_hidden_layers": 36, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 9728,
                 "tie_word_embeddings": True},
    "qwen3-8b": {"hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288,
                 "tie_word_embeddings": False},
    "tiny": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 64,
             "tie_word_embeddings": True},
}
QWEN3_VOCAB = 151936
PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12}  # dense, per GPU
ALGORITHMS = {"gspo": ("gspo", {}), "dfpo_min": ("dfpo", {"transform": "min_replace"})}


@dataclass
class GPUBenchConfig:
    out: Path = field(metadata={"help": "JSON file to write."})
    tiny: bool = field(default=False, metadata={"help": "CPU smoke mode: tiny shape, 8 tokens."})
    shapes: list[str] = field(default_factory=lambda: ["qwen3-0.6b", "qwen3-4b"])
    fwdbwd_shapes: list[str] = field(default_factory=lambda: ["qwen3-8b"])
    algorithms: list[str] = field(default_factory=lambda: ["gspo", "dfpo_min"])
    prompts_per_step: int = 8
    group_size: int = 8
    minibatches: int = 4
    max_new_tokens: int = 1024
    steps: int = 2
    budget_s: float = field(default=380.0, metadata={"help": "Skip runs that would start later."})
    seed: int = 0

    def resolved(self) -> GPUBenchConfig:
        if not self.tiny:
            return self
        return GPUBenchConfig(out=self.out, tiny=True, shapes=["tiny"], fwdbwd_shapes=["tiny"],
                              algorithms=self.algorithms, prompts_per_step=4, group_size=4,
                              minibatches=2, max_new_tokens=8, steps=1, budget_s=self.budget_s,
                              seed=self.seed)


def versions() -> dict[str, str]:
    import accelerate
    import transformers
    import trl

    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "trl": trl.__version__,
            "accelerate": accelerate.__version__,
            "cuda": torch.version.cuda or "none"}


def build_model(shape: str, tok, device: str, dtype: torch.dtype, vocab: int):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(vocab_size=vocab, max_position_embeddings=4096,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                         bos_token_id=None, **SHAPES[shape])
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(config).to(dtype)
    return model


def hash_reward(prompts, completions, completion_ids, **_):
    """Seeded hash-Bernoulli of the completion's token ids: 0/1 rewards with no grader."""
    return [float(hashlib.sha256(str(list(ids)).encode()).digest()[0] % 2)
            for ids in completion_ids]


class Sink:
    """Collects the trainer's rollout and update records, and the wall time of each step."""

    def __init__(self) -> None:
        self.rollouts: list[dict[str, Any]] = []
        self.updates: list[dict[str, float]] = []

    def rollout(self, **record: Any) -> None:
        self.rollouts.append(record)

    def update(self, metrics: dict[str, float], entropy_sum: float, entropy_n: int) -> None:
        self.updates.append(metrics)


def timed(fn, repeats: int = 3) -> float:
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def engine_run(cfg: GPUBenchConfig, shape: str, name: str, tok, device: str) -> dict[str, Any]:
    """A few TRL-engine steps of one algorithm on one shape, then the probes on its last batch."""
    from datasets import Dataset
    from transformers import TrainerCallback

    from repro.engines.core import sequence_weights
    from repro.engines.trl_args import build_grpo_config
    from repro.engines.trl_trainer import ReproGRPOTrainer
    from repro.models import load
    from repro.training.config import TrainConfig
    from repro.training.logprobs import response_logprobs

    gpu = device == "cuda"
    dtype = torch.bfloat16 if gpu else torch.float32
    vocab = QWEN3_VOCAB if not cfg.tiny else len(tok) + 61  # ids beyond the tokenizer, as at 151k
    model = build_model(shape, tok, device, dtype, vocab)
    n_params = sum(p.numel() for p in model.parameters())
    algorithm, objective = ALGORITHMS[name]
    tcfg = TrainConfig(model="random-init", algorithm=algorithm, objective=objective,
                       prompts_per_step=cfg.prompts_per_step, group_size=cfg.group_size,
                       minibatches=cfg.minibatches, max_new_tokens=cfg.max_new_tokens,
                       steps=cfg.steps, lr=1e-6, seed=cfg.seed, engine="trl")
    prompts = [tok.apply_chat_template([{"role": "user", "content": f"Problem {i}: {i}*{i + 3}?"}],
                                       tokenize=False, add_generation_prompt=True)
               for i in range(cfg.prompts_per_step * cfg.steps)]
    work = Path(tempfile.mkdtemp(prefix="repro-bench-gpu-"))
    from accelerate import PartialState

    args = build_grpo_config(tcfg, out=work, world_size=PartialState().num_processes,
                             steps=cfg.steps, half_precision=gpu, use_cpu=not gpu)
    sink = Sink()
    step_times: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            step_times.append(time.perf_counter() - self.t0)

    if gpu:
        torch.cuda.reset_peak_memory_stats()
    trainer = ReproGRPOTrainer(model=model, processing_class=tok, args=args,
                               reward_funcs=[hash_reward], callbacks=[StepClock()],
                               train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]),
                               repro=tcfg, sink=sink)
    trainer.remove_callback(__import__("transformers").PrinterCallback)
    trainer.train()
    rollout_s = sum(r["seconds"] for r in sink.rollouts)
    gen_tokens = sum(int(r["lengths"].sum()) for r in sink.rollouts)
    parts = trainer._buffered_inputs
    processed = sum(int(p["prompt_mask"].sum() + p["completion_mask"].sum()) for p in parts)
    update_s = sum(step_times) - rollout_s
    peak = PEAK_BF16_FLOPS.get(next((k for k in PEAK_BF16_FLOPS if gpu and k in
                                     torch.cuda.get_device_name()), ""), math.nan)
    first = sink.updates[0]
    s_lo, s_hi = first.get("s_min", first["w_min"]), first.get("s_max", first["w_max"])

    part = parts[0]
    unwrapped = trainer.accelerator.unwrap_model(trainer.model)
    ids = torch.cat([part["prompt_ids"], part["completion_ids"]], 1)
    attn = torch.cat([part["prompt_mask"], part["completion_mask"]], 1)
    width = part["completion_ids"].size(1)
    mask = part["completion_mask"].bool()
    trainer.current_gradient_accumulation_steps = 1

    def trl_logp():
        return trainer._get_per_token_logps_and_entropies(trainer.model, ids, attn, width)[0]

    with torch.no_grad():
        logp_trl = trl_logp()
        resp = torch.cat([torch.zeros_like(part["prompt_mask"]), part["completion_mask"]], 1)
        logp_native = response_logprobs(unwrapped, ids, attn, resp.bool(),
                                        temperature=tcfg.temperature, with_entropy=False)[0]
        logp_diff = float((logp_native[:, -width:] - logp_trl).abs()[mask].max())

    def step(diagnostics: bool):
        trainer.diagnostics = diagnostics
        trainer._compute_loss(trainer.model, part).backward()
        trainer.model.zero_grad(set_to_none=True)

    def prepass():
        with torch.no_grad():
            logp = trl_logp()
            old = part.get("old_per_token_logps")
            sequence_weights(trainer.loss_cfg, logp, logp if old is None else old, mask,
                             part["advantages"], part["group"])

    with_diag, without = timed(lambda: step(True)), timed(lambda: step(False))
    prepass_s = timed(prepass)
    saved = work / "policy"
    trainer.save_model(str(saved))
    reload_diff = math.nan
    if trainer.accelerator.is_main_process:
        tok.save_pretrained(saved)
        again, _ = load(saved, device=device)
        probe = ids[:2, : min(ids.size(1), 64)]
        with torch.no_grad():
            reload_diff = float((again(input_ids=probe).logits.float()
                                 - unwrapped(input_ids=probe).logits.float()).abs().max())
    return {
        "shape": shape, "algorithm": name, "params": n_params, "dtype": str(dtype),
        "distributed_type": str(trainer.accelerator.distributed_type),
        "rollout_tokens_per_s": gen_tokens / rollout_s,
        "update_tokens_per_s": processed * cfg.steps / update_s,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if gpu else math.nan,
        "mfu_update": 6.0 * n_params * processed * cfg.steps / update_s / peak,
        "diagnostics_overhead": with_diag / without - 1.0,
        "prepass_overhead": prepass_s / without,
        "max_abs_log_s_first_minibatch": max(abs(math.log(s_lo)), abs(math.log(s_hi))),
        "asym": _nanmean([u["asym"] for u in sink.updates]),
        "residual_full": _nanmean([u["residual_full"] for u in sink.updates]),
        "max_abs_logp_diff_trl_vs_response_logprobs": logp_diff,
        "save_reload_max_abs_logit_diff": reload_diff,
        "rollout_s": rollout_s, "update_s": update_s,
    }


def fwdbwd(cfg: GPUBenchConfig, shape: str, tok, device: str) -> dict[str, Any]:
    """One G-row group (prompt + max_new_tokens) through forward and backward, with gradient
    checkpointing, no optimizer: sizes whole-group micro-steps for the largest shape."""
    from repro.training.logprobs import response_logprobs

    gpu = device == "cuda"
    dtype = torch.bfloat16 if gpu else torch.float32
    vocab = QWEN3_VOCAB if not cfg.tiny else len(tok)
    model = build_model(shape, tok, device, dtype, vocab)
    model.gradient_checkpointing_enable()
    model.train()
    length = 64 + cfg.max_new_tokens
    ids = torch.randint(0, vocab, (cfg.group_size, length), device=device)
    attn = torch.ones_like(ids)
    resp = torch.zeros_like(ids, dtype=torch.bool)
    resp[:, 64:] = True
    if gpu:
        torch.cuda.reset_peak_memory_stats()

    def run():
        logp, _ = response_logprobs(model, ids, attn, resp, with_entropy=False)
        logp.sum().backward()
        model.zero_grad(set_to_none=True)

    seconds = timed(run, repeats=2)
    return {"shape": shape, "params": sum(p.numel() for p in model.parameters()),
            "tokens": int(ids.numel()), "seconds": seconds,
            "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if gpu else math.nan}


def _nanmean(values: list[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else math.nan


def run_gpu_bench(cfg: GPUBenchConfig) -> dict[str, Any]:
    from repro.atomic import atomic_file
    from repro.models.tokenizer import build_tokenizer

    cfg = cfg.resolved()
    start = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() and not cfg.tiny else "cpu"
    tok = build_tokenizer(model_max_length=4096)
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "measured_on_gpu": device == "cuda", "versions": versions(),
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
        "runs": [], "fwdbwd": [], "skipped": [],
    }
    for shape in cfg.shapes:
        for name in cfg.algorithms:
            if time.perf_counter() - start > cfg.budget_s:
                report["skipped"].append(f"{shape}/{name}: over budget_s")
                continue
            report["runs"].append(engine_run(cfg, shape, name, tok, device))
            if device == "cuda":
                torch.cuda.empty_cache()
    for shape in cfg.fwdbwd_shapes:
        if time.perf_counter() - start > cfg.budget_s:
            report["skipped"].append(f"{shape}/fwdbwd: over budget_s")
            continue
        report["fwdbwd"].append(fwdbwd(cfg, shape, tok, device))
    report["total_seconds"] = time.perf_counter() - start
    text = json.dumps(report, indent=2, default=str)
    Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_file(Path(cfg.out), lambda tmp: tmp.write_text(text + "\n"))
    return report
