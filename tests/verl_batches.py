"""What the verl plugin's tests share: the verl import (skip, or fail where verl is required),
verl's actor config, and batches laid out as verl hands them to a policy loss.

The main test environment has no verl (verl 0.9.1 pins transformers < 5.11), so these tests
skip there with the reason; `.ci/run` runs them again in a venv built from constraints/verl.txt
with REPRO_REQUIRE_VERL=1, where a missing verl fails instead.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch
from optional_modules import require

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


def require_verl() -> ModuleType:
    """`import verl`, or skip with the reason (fail under REPRO_REQUIRE_VERL=1)."""
    return require("verl", "REPRO_REQUIRE_VERL", "its verl venv (docs/integrations.md: "
                   "verl==0.9.1 --no-deps and constraints/verl.txt)")


def actor(n: int = 4, **fields: Any) -> Any:
    """verl's own ActorConfig (as its workers build it) with rollout.n = n."""
    from verl.workers.config import ActorConfig

    base = ActorConfig(strategy="fsdp", rollout_n=n, ppo_micro_batch_size_per_gpu=2 * n)
    info = fields.pop("global_batch_info", {})
    cfg = dataclasses.replace(base, **fields)
    cfg.global_batch_info.update(info)
    return cfg


@dataclass
class VerlBatch:
    """One micro-batch as verl's ppo_loss hands it to a policy loss; groups are row blocks."""

    logp: torch.Tensor  # [B, T] float64 leaf, the current policy's log-probs
    old: torch.Tensor  # [B, T]
    advantages: torch.Tensor  # [B, T]: one value per response, broadcast over its tokens
    mask: torch.Tensor  # [B, T] bool
    tokens: torch.Tensor  # [B, T] response token ids; a group's first `prefix` tokens shared
    n: int  # rollout.n: rows k*n..k*n+n-1 are group k

    @property
    def group(self) -> torch.Tensor:
        return torch.arange(self.logp.shape[0]) // self.n

    def sequence_advantages(self) -> torch.Tensor:
        return self.advantages[:, 0]

    def leaf(self) -> torch.Tensor:
        """A fresh copy of logp that takes its own gradient."""
        return self.logp.detach().clone().requires_grad_(True)


def verl_batch(seed: int, groups: int = 3, n: int = 4, length: int = 12, prefix: int = 4,
               noise: float = 0.5) -> VerlBatch:
    """Random groups of n responses that share their first `prefix` tokens (the shared nodes:
    equal tokens at equal histories, hence equal log-probs under any policy) and then diverge;
    unequal lengths; GRPO advantages of random 0/1 rewards (no group without signal). noise:
    the spread of logp - logp_old, wide enough that clips and verl's dual clip (r > 3) act."""
    g = torch.Generator().manual_seed(seed)
    rows = groups * n
    lengths = torch.randint(prefix + 1, length + 1, (rows,), generator=g)
    mask = torch.arange(length)[None, :] < lengths[:, None]
    tokens = torch.randint(1, 50, (rows, length), generator=g)
    old = -torch.rand(rows, length, generator=g, dtype=torch.float64) * 3
    logp = old + noise * torch.randn(rows, length, generator=g, dtype=torch.float64)
    for k in range(groups):  # the shared prefix: one set of values per group
        block = slice(k * n, (k + 1) * n)
        tokens[block, :prefix] = tokens[k * n, :prefix]
        old[block, :prefix] = old[k * n, :prefix]
        logp[block, :prefix] = logp[k * n, :prefix]
    reward = torch.randint(0, 2, (groups, n), generator=g).double()
    reward[:, 0], reward[:, 1] = 0.0, 1.0
    adv = (reward - reward.mean(-1, keepdim=True)) / (reward.std(-1, keepdim=True) + 1e-6)
    advantages = adv.reshape(rows, 1).expand(rows, length) * mask
    return VerlBatch(logp.requires_grad_(True), old, advantages, mask, tokens * mask, n)


def call(loss_fn: Any, batch: VerlBatch, cfg: Any, agg: str, *,
         weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """(loss, d loss / d logp, metrics) of a verl PolicyLossFn on the batch, by keyword as verl's
    ppo_loss calls it."""
    logp = batch.leaf()
    loss, metrics = loss_fn(old_log_prob=batch.old, log_prob=logp, advantages=batch.advantages,
                            response_mask=batch.mask, loss_agg_mode=agg, config=cfg,
                            rollout_is_weights=weights)
    (grad,) = torch.autograd.grad(loss, logp)
    return loss.detach(), grad, metrics
