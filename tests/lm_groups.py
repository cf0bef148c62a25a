"""Shared test helper: groups of responses with a common prefix, scored by a real causal LM.

Each group answers its own prompt; members share `prefix` response tokens (identical tokens at
identical contexts: the shared nodes) and then diverge. `run_updates` takes K optimizer steps
with an objective so that the sequence ratios s_i move away from 1, then returns the
per-token coefficients of the next step's loss.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from repro.diagnostics import token_coefficients
from repro.models import TinyModelConfig, build_tiny
from repro.objectives import LossConfig, Minibatch, group_advantages, policy_loss

VOCAB_LO, VOCAB_HI = 1, 98  # plain characters of the tiny tokenizer


def tiny_lm() -> PreTrainedModel:
    cfg = TinyModelConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=8, intermediate_size=64, seed=0)
    return build_tiny(cfg)[0]


@dataclass
class GroupBatch:
    prompts: torch.Tensor  # [B, P]
    responses: torch.Tensor  # [B, T]
    mask: torch.Tensor  # [B, T]
    group: torch.Tensor  # [B]
    reward: torch.Tensor  # [B]
    prefix: torch.Tensor  # [B] shared-prefix length of the row's group


def make_batch(groups: list[dict], seed: int) -> GroupBatch:
    """groups: [{"prefix": p, "lengths": [suffix lengths], "rewards": [...]}]; rows interleaved."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for k, spec in enumerate(groups):
        prompt = torch.randint(VOCAB_LO, VOCAB_HI, (4,), generator=g)
        shared = torch.randint(VOCAB_LO, VOCAB_HI, (spec["prefix"],), generator=g)
        for n, r in zip(spec["lengths"], spec["rewards"], strict=True):
            suffix = torch.randint(VOCAB_LO, VOCAB_HI, (n,), generator=g)
            rows.append((prompt, torch.cat([shared, suffix]), 10 * k + 1, r, spec["prefix"]))
    order = torch.randperm(len(rows), generator=g).tolist()
    rows = [rows[i] for i in order]
    t_max = max(len(r[1]) for r in rows)
    responses = torch.zeros(len(rows), t_max, dtype=torch.long)
    mask = torch.zeros(len(rows), t_max, dtype=torch.bool)
    for i, (_, resp, *_rest) in enumerate(rows):
        responses[i, : len(resp)] = resp
        mask[i, : len(resp)] = True
    return GroupBatch(
        prompts=torch.stack([r[0] for r in rows]),
        responses=responses,
        mask=mask,
        group=torch.tensor([r[2] for r in rows]),
        reward=torch.tensor([float(r[3]) for r in rows]),
        prefix=torch.tensor([r[4] for r in rows]),
    )


def response_logp(
    model: PreTrainedModel, batch: GroupBatch, params: dict[str, torch.Tensor] | None = None
) -> torch.Tensor:
    """log pi(y_t | prompt, y_<t) for every response position: [B, T] with grad.

    params: optional replacement parameters (torch.func.functional_call), e.g. perturbed ones.
    """
    ids = torch.cat([batch.prompts, batch.responses], dim=1)
    attn = torch.cat([torch.ones_like(batch.prompts, dtype=torch.bool), batch.mask], dim=1)
    kwargs = {"input_ids": ids, "attention_mask": attn.long()}
    if params is None:
        logits = model(**kwargs).logits
    else:
        logits = torch.func.functional_call(model, params, (), kwargs).logits
    p = batch.prompts.shape[1]
    logits = logits[:, p - 1 : -1]
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return torch.log_softmax(logits, -1).gather(-1, batch.responses[..., None])[..., 0]


@dataclass
class UpdateResult:
    coef: torch.Tensor  # [B, T] c = -dL/dlogp at the measured step
    logp: torch.Tensor  # [B, T] detached
    logp_old: torch.Tensor
    advantages: torch.Tensor
    metrics: dict[str, float]


def run_updates(
    base: PreTrainedModel, cfg: LossConfig, batch: GroupBatch, k: int = 3, lr: float = 1e-2
) -> UpdateResult:
    """K Adam steps with `cfg` on one rollout batch, then coefficients of step K + 1."""
    model = copy.deepcopy(base).train()
    adv, _ = group_advantages(batch.reward, batch.group)
    with torch.no_grad():
        old = response_logp(model, batch)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(k):
        loss, _ = policy_loss(cfg, Minibatch(response_logp(model, batch), old, batch.mask, adv,
                                             batch.group))
        opt.zero_grad()
        loss.backward()
        opt.step()
    logp = response_logp(model, batch)
    loss, metrics = policy_loss(cfg, Minibatch(logp, old, batch.mask, adv, batch.group))
    return UpdateResult(token_coefficients(loss, logp), logp.detach(), old, adv, metrics)
