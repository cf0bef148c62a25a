"""Gradient coherence across prompts (`repro bench coherence`): is the RL gradient at a policy a
shared direction or per-problem noise?

Why: RL on a tiny model generalises to held-out problems only if the gradients of *different*
prompts point the same way. This draws `batches` independent rollout batches (each its own
prompts, from the training stream at steps 1..batches), takes the GRPO policy gradient of each
(one update's gradient at ratio 1, the trainer's own rollout, advantages and log-probs at the
sampling temperature) and reports:

- the mean (and range) of the pairwise cosines between batch gradients;
- the signal share ||E g||^2 / E ||g||^2, with ||E g||^2 estimated without bias from the pairwise
  dot products (the mean of g_i . g_j over i != j), and the number of batches one step would have
  to average for signal energy to equal noise energy.

`--same-prompts` redraws samples for the prompts of step 1 every time: the per-prompt ceiling of
the cosine (how consistent the gradient of one prompt set is with itself).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict
from pathlib import Path

import torch

from repro.bench.options import CoherenceConfig
from repro.generation.base import SamplingConfig
from repro.objectives import Minibatch, group_advantages, make_config, policy_loss


def batch_gradients(cfg: CoherenceConfig) -> torch.Tensor:
    """[batches, params] GRPO gradients of independent rollout batches at `cfg.model`."""
    from repro.generation.hf import HFEngine  # transformers: not at `repro` CLI import
    from repro.models import load
    from repro.training.logprobs import response_logprobs
    from repro.training.minibatches import step_seed
    from repro.training.rollout import PromptStream, Rewarder, rollout

    model, tok = load(cfg.model)
    stream = PromptStream({cfg.task: 1.0}, cfg.seed, cfg.prompts)
    rewarder = Rewarder({stream.specs[n].kind for n in stream.names})
    engine = HFEngine(model, tok, batch_size=cfg.prompts)
    loss_cfg = make_config("grpo")
    params = [p for p in model.parameters() if p.requires_grad]
    grads = []
    try:
        for i in range(1, cfg.batches + 1):
            sampling = SamplingConfig(temperature=cfg.temperature, top_p=1.0, top_k=0,
                                      max_new_tokens=cfg.max_new_tokens, n=cfg.group_size,
                                      seed=step_seed(cfg.seed, i))
            model.eval()
            batch = rollout(engine, stream.at(1 if cfg.same_prompts else i), stream.specs,
                            rewarder, sampling, want_engine_logp=False)
            model.train()
            adv, _ = group_advantages(batch.reward, batch.group)
            logp, _ = response_logprobs(model, batch.input_ids, batch.attention_mask,
                                        batch.response_mask, temperature=cfg.temperature,
                                        with_entropy=False)
            loss, _ = policy_loss(loss_cfg, Minibatch(logp, logp.detach(), batch.response_mask,
                                                      adv, batch.group))
            model.zero_grad(set_to_none=True)
            loss.backward()
            grads.append(torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p))
                                    .flatten().double() for p in params]))
    finally:
        rewarder.close()
    return torch.stack(grads)


def coherence(grads: torch.Tensor) -> dict[str, float]:
    """Pairwise cosines and the unbiased signal share of [batches, params] gradients."""
    if grads.shape[0] < 2:
        raise ValueError("coherence needs at least two gradients")
    norms = grads.norm(dim=1)
    if bool((norms == 0).any()):
        raise ValueError("a batch gradient is zero (no group with mixed rewards): draw more")
    pairs = list(itertools.combinations(range(grads.shape[0]), 2))
    cos = [float(grads[i] @ grads[j] / (norms[i] * norms[j])) for i, j in pairs]
    signal = sum(float(grads[i] @ grads[j]) for i, j in pairs) / len(pairs)  # ||E g||^2
    total = float((norms**2).mean())  # E ||g||^2
    share = signal / total
    return {"cos_mean": sum(cos) / len(cos), "cos_min": min(cos), "cos_max": max(cos),
            "signal_share": share,
            "batches_for_snr1": (total - signal) / signal if signal > 0 else float("inf")}


def run_coherence_bench(cfg: CoherenceConfig, out: Path | None = None) -> dict[str, object]:
    result = {"config": asdict(cfg), **coherence(batch_gradients(cfg))}
    text = json.dumps(result, indent=2)
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    return result
