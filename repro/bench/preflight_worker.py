"""The processes of `repro bench gpu` (see repro/bench/gpu.py), one run per stage group.

`train` (under torchrun, every process): the TRL engine's trainer sharded by FSDP2 with the
precision recipe (`twin_worker.sharded_trainer`), then the stages in order, each timed with its
peak GPU memory (max over processes): `vllm_sync` (vLLM colocated, each process its own: its
log-probs of fixed sequences against the trainer's as loaded (under sleep mode: after a first
sync), which is the kernels' own noise; then the masters perturbed, vLLM's gap before and after
TRL's sync; the masters restored and synced back), `rollout` (one generation batch, vLLM or HF
generate), `update` (the K updates with the optimizer at the preset's lr), `param_change`
(share of the master elements with a gradient that moved; also of all), `save` (the policy
folder written file by file by the processes owning the files, as the TRL engine checkpoints,
with a sha256 per tensor and the trainer's log-probs of the fixed sequences), `vllm_resync`
(the trained weights through TRL's sync, vLLM's log-probs against the trainer's).
`reload` (one fresh process): the saved folder loaded with plain transformers, its tensors'
sha256 and its logits compared with what `save` wrote.

Progress goes to PROGRESS.json after every stage (atomic), so the parent can stop a stage that
overruns its budget and still report the stages before it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

PERTURB = 0.2  # vllm_sync: seeded noise added to every master (x its tensor's std), then synced
PROBE_ROWS, PROBE_LEN = 4, 48  # fixed sequences scored by trainer, vLLM and the reload


class Progress:
    """Stage records written atomically by the main process; every process times stages."""

    def __init__(self, path: Path, main: bool, budgets: dict[str, float]) -> None:
        self.path, self.main, self.budgets = path, main, budgets
        self.stages: dict[str, dict[str, Any]] = {}
        self.t0 = 0.0

    def start(self, name: str) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        self.t0 = time.perf_counter()
        self.stages[name] = {"status": "running", "started": time.time()}
        self._write(current=name)

    def done(self, name: str, **record: Any) -> None:
        from accelerate.utils import reduce

        if torch.cuda.is_available():  # GB per GPU, the most over the processes
            torch.cuda.synchronize()
            free, total = torch.cuda.mem_get_info()
            gb = [torch.cuda.max_memory_allocated() / 1e9, torch.cuda.max_memory_reserved() / 1e9,
                  (total - free) / 1e9]
            if _world() > 1:
                gb = reduce(torch.tensor(gb, device="cuda", dtype=torch.float64), "max").tolist()
            # the allocator's peak (what fake mode tracks), its reserved peak (the difference is
            # fragmentation) and the device's used memory at the stage's end (beyond reserved:
            # the CUDA context, NCCL, cuBLAS workspaces): what RESERVE_GB is kept free for
            record |= dict(zip(("peak_gb", "reserved_gb", "device_used_gb"), gb, strict=True))
        self.stages[name] = {"status": "ok", "seconds": time.perf_counter() - self.t0} | record
        self._write(current=None)

    def _write(self, current: str | None) -> None:
        if not self.main:
            return
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"current": current, "stages": self.stages}, default=str))
        os.replace(tmp, self.path)


def _world() -> int:
    from accelerate import PartialState

    return PartialState().num_processes


def probe_ids(vocab: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab, (PROBE_ROWS, PROBE_LEN), generator=torch.Generator()
                         .manual_seed(seed))


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Log-probs of tokens 1.. of each row under the logits (T = 1)."""
    return torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, ids[:, 1:, None])[..., 0]


def vllm_logprobs(llm, ids: torch.Tensor) -> torch.Tensor:
    """vLLM's prompt log-probs of tokens 1.. of each row."""
    from vllm import SamplingParams

    seqs = ids.tolist()
    outs = llm.generate([{"prompt_token_ids": s} for s in seqs],
                        SamplingParams(max_tokens=1, prompt_logprobs=0), use_tqdm=False)
    return torch.tensor([[o.prompt_logprobs[i][s[i]].logprob for i in range(1, len(s))]
                         for o, s in zip(outs, seqs, strict=True)])


def digests(state: dict[str, torch.Tensor]) -> dict[str, str]:
    """sha256 of each tensor's float32 bytes: the exact values, whatever the file's dtype."""
    return {name: hashlib.sha256(t.detach().to("cpu", torch.float32).contiguous().numpy()
                                 .tobytes()).hexdigest() for name, t in sorted(state.items())}


def sharded_digests(model: torch.nn.Module, main: bool) -> dict[str, str]:
    """`digests` of an FSDP2 model's state (its module names), one tensor gathered at a time
    (collective: every process calls it; the main process gets the digests)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    sums = {}
    for name, tensor in sorted(get_model_state_dict(model).items()):
        full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
        if main:
            sums |= digests({name: full})
        del full
    return sums


def flops_per_update(model: torch.nn.Module, rows: torch.Tensor) -> float:
    """Model FLOPs of forward + backward over the rows' real tokens (MFU, not HFU: no
    checkpointing recompute, no pre-pass): 6 N T + 6 L (heads x head_dim) sum_i s_i^2, with N the
    matmul parameters a token meets (`matmul_params`), T the tokens, s_i each row's length and L
    the softmax-attention layers (causal QK^T and AV, half the square); Qwen3-Next's Gated
    DeltaNet layers are linear in s, their state updates not counted."""
    cfg = model.config
    d_attn = cfg.num_attention_heads * cfg.head_dim
    types = getattr(cfg, "layer_types", None) or ["full_attention"] * cfg.num_hidden_layers
    layers = types.count("full_attention")
    lengths = rows.float()
    return float(6 * matmul_params(model) * lengths.sum()
                 + 6 * layers * d_attn * (lengths ** 2).sum())


def matmul_params(model: torch.nn.Module) -> float:
    """Weights of the matrix products one token goes through: every matrix of the decoder layers
    (routed experts at num_experts_per_tok / num_experts: a token meets k of them) and the LM
    head; not the embedding lookup, norms or Qwen3-Next's depthwise conv. A sharded (FSDP2)
    parameter counts whole (DTensor numel is the global one)."""
    cfg = model.config
    routed = cfg.num_experts_per_tok / cfg.num_experts if getattr(cfg, "num_experts", 0) else 1
    total = float(model.get_output_embeddings().weight.numel())  # the head, tied or not
    for name, param in model.named_parameters():
        if param.dim() >= 2 and ".layers." in name and "conv1d" not in name:
            total += param.numel() * (routed if ".mlp.experts." in name else 1)
    return total


def train(out: Path, model_dir: Path, config: dict[str, Any]) -> None:
    from repro.bench.twin_worker import sharded_trainer
    from repro.engines.trl_trainer import split_whole_groups
    from repro.training.config import TrainConfig

    cfg = TrainConfig(**config["train"])
    s = sharded_trainer(cfg, model_dir, out)
    dist, trainer, policy = s.dist, s.trainer, s.trainer.model
    progress = Progress(out / "progress.json", dist.is_main_process, config["budgets"])
    device = trainer.accelerator.device
    ids = probe_ids(policy.config.vocab_size).to(device)
    use_vllm = bool(cfg.trl_args.get("use_vllm"))

    def trainer_logprobs() -> torch.Tensor:
        with torch.no_grad():  # every process: FSDP2's forward is collective
            logp = token_logprobs(policy(input_ids=ids).logits, ids).cpu()
        reshard(policy)
        return logp

    if use_vllm:
        progress.start("vllm_sync")
        generation = trainer.vllm_generation
        masters = [p for group in s.optimizer.param_groups for p in group["params"]]
        sleeping = generation.enable_sleep_mode  # TRL put it to sleep: its weights are gone
        with awake(generation):
            if sleeping:
                generation.sync_weights()
            want = trainer_logprobs()
            noise = float((vllm_logprobs(generation.llm, ids) - want).abs().max())
            kept = [_local(p).detach().clone() for p in masters]
            perturb(masters)
            moved_to = trainer_logprobs()
            stale = float((vllm_logprobs(generation.llm, ids) - moved_to).abs().max())
            generation.sync_weights()
            synced = float((vllm_logprobs(generation.llm, ids) - moved_to).abs().max())
            with torch.no_grad():
                for p, k in zip(masters, kept, strict=True):
                    _local(p).copy_(k)
            del kept
            generation.sync_weights()
        progress.done("vllm_sync", noise=_max(noise, device), stale=_max(stale, device),
                      synced=_max(synced, device), noise_after="sync" if sleeping else "load")

    progress.start("rollout")
    policy.train()
    n_local = cfg.prompts_per_step // dist.num_processes
    mine = s.prompts[dist.process_index * n_local:(dist.process_index + 1) * n_local]
    torch.manual_seed(1 + dist.process_index)
    batch = trainer._generate_and_score_completions(
        [{"prompt": p} for p in mine for _ in range(cfg.group_size)])
    tokens = _sum(float(batch["completion_mask"].sum()), device)
    progress.done("rollout", generated_tokens=tokens, engine="vllm" if use_vllm else "hf")

    progress.start("update")
    masters = [p for group in s.optimizer.param_groups for p in group["params"]]  # sharded
    # param_change's snapshot on the host: a GPU copy (15.6 GB on Qwen3-Next's 2-layer shape)
    # sat inside the measured update (94.0 GB on the H200, 78.3 of it the engine's; issue 48)
    before = [_local(p).detach().to("cpu", copy=True) for p in masters]
    accum = s.args.gradient_accumulation_steps
    trainer.current_gradient_accumulation_steps = accum
    rows = []
    for minibatch in split_whole_groups(batch, cfg.minibatches, cfg.seed, 1):
        rows.append(minibatch["prompt_mask"].sum(1) + minibatch["completion_mask"].sum(1))
        for micro in trainer._micro_steps(minibatch, accum):
            trainer.accelerator.backward(trainer._compute_loss(policy, micro))
        s.optimizer.step()
        s.optimizer.zero_grad(set_to_none=True)
    flops = _sum(flops_per_update(policy, torch.cat(rows)), device)
    processed = _sum(float(torch.cat(rows).sum()), device)
    progress.done("update", updates=cfg.minibatches, model_flops=flops, tokens=processed,
                  lr=cfg.lr)

    progress.start("param_change")
    # Of the elements that got a gradient (AdamW's exp_avg != 0), the share that moved: what an
    # lr rounded away in the masters would zero. The others (embedding rows of absent tokens,
    # experts nothing was routed to) move by weight decay alone, below float32's resolution at
    # lr 1e-6: the H200 run of 2026-12-04 saw 42.9% of all Qwen3-Next elements move.
    moved = touched = moved_all = total = 0
    for b, p in zip(before, masters, strict=True):
        grad_seen = (_local(s.optimizer.state[p]["exp_avg"]) != 0).cpu()
        changed = _local(p).detach().cpu() != b
        moved += int((changed & grad_seen).sum())
        touched += int(grad_seen.sum())
        moved_all += int(changed.sum())
        total += b.numel()
    del before
    frac = _sum(moved, device) / max(_sum(touched, device), 1)
    master = sorted({str(p.dtype) for p in masters})
    progress.done("param_change", elements_changed_frac=frac,
                  elements_with_gradient_frac=_sum(touched, device) / _sum(total, device),
                  elements_changed_frac_all=_sum(moved_all, device) / _sum(total, device),
                  master_dtypes=master,
                  sharded=all(hasattr(p, "to_local") for p in masters),
                  distributed_type=str(trainer.accelerator.distributed_type))

    progress.start("save")  # as the TRL engine checkpoints: each file by its owning process
    from repro.engines.policy_files import save_sharded_policy

    want = trainer_logprobs()
    written = save_sharded_policy(policy, out / "saved")
    sums = sharded_digests(policy, dist.is_main_process)
    if dist.is_main_process:
        trainer.processing_class.save_pretrained(out / "saved")
        torch.save({"ids": ids.cpu(), "logprobs": want, "digests": sums}, out / "saved_probe.pt")
    dist.wait_for_everyone()
    progress.done("save", writers=_sum(float(bool(written)), device),
                  files=len(list((out / "saved").glob("model-*.safetensors"))))

    if use_vllm:  # the trained weights through TRL's sync, as the next rollout does
        progress.start("vllm_resync")
        with awake(generation):
            generation.sync_weights()
            gap = float((vllm_logprobs(generation.llm, ids) - want).abs().max())
        progress.done("vllm_resync", trained=_max(gap, device))
    dist.wait_for_everyone()


@contextlib.contextmanager
def awake(generation):
    """vLLM's KV cache awake for the probes under sleep mode, and asleep again after (level 2,
    as TRL leaves it after a rollout: the next sync re-pushes the weights)."""
    if not generation.enable_sleep_mode:
        yield
        return
    generation.llm.wake_up(tags=["kv_cache"])
    try:
        yield
    finally:
        generation.llm.sleep(level=2)
        generation._llm_weights_sleeping = True


def perturb(masters: list[torch.Tensor]) -> None:
    """Seeded noise of PERTURB x each tensor's std added to this process's shards."""
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in masters:
            local = _local(p)
            if local.numel() > 1:
                local.add_(PERTURB * float(local.float().std()) * torch.randn(
                    local.shape, generator=gen).to(local))


def reshard(policy: torch.nn.Module) -> None:
    """After a no-grad forward FSDP2 leaves the root's parameters unsharded (plain tensors),
    which TRL's weight sync (`full_tensor()` per parameter) and the master snapshots cannot take;
    training's backward reshards them, a probe's forward does not."""
    from torch.distributed.fsdp import FSDPModule

    for module in policy.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def _local(param: torch.Tensor) -> torch.Tensor:
    """This process's shard of an FSDP2 parameter (the whole tensor without FSDP)."""
    return param.to_local() if hasattr(param, "to_local") else param


def _max(value: float, device) -> float:
    """The largest over the processes (each holds its own colocated vLLM)."""
    from accelerate.utils import reduce

    if _world() == 1:
        return float(value)
    return float(reduce(torch.tensor([float(value)], device=device), "max")[0])


def _sum(value: float, device) -> float:
    from accelerate.utils import reduce

    if _world() == 1:
        return float(value)
    return float(reduce(torch.tensor([float(value)], device=device), "sum")[0])


def reload(out: Path) -> None:
    """A fresh process: the saved folder through plain transformers, against `save`'s record."""
    from transformers import AutoModelForCausalLM

    progress = Progress(out / "progress_reload.json", True, {})
    progress.start("reload")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(out / "saved", dtype=torch.float32).to(device)
    want = torch.load(out / "saved_probe.pt")
    got = digests(model.state_dict())
    tied = {k for k in got if k not in want["digests"]}  # e.g. lm_head.weight when tied
    differ = sorted(k for k, v in want["digests"].items() if got.get(k) != v)
    with torch.no_grad():
        ids = want["ids"].to(device)
        logp = token_logprobs(model(input_ids=ids).logits, ids).cpu()
    progress.done("reload", tensors=len(want["digests"]), tensors_differ=differ,
                  not_in_save=sorted(tied),
                  max_logprob_diff=float((logp - want["logprobs"]).abs().max()),
                  saved_dtype=json.loads((out / "saved" / "config.json").read_text()).get(
                      "dtype"))


if __name__ == "__main__":
    from repro.engines.fsdp import close_process_group

    if sys.argv[1] == "train":
        train(Path(sys.argv[2]), Path(sys.argv[3]), json.loads(Path(sys.argv[4]).read_text()))
    else:
        reload(Path(sys.argv[2]))
    close_process_group()
