"""Exact probes of the tabular policy, and the shared-template residual of one SGD update.

Everything here is read off the logit table or off the coefficients c_{i,t} = -dL/dlogp_{i,t}
that one autograd call on `policy_loss` gives; no loss is re-derived and nothing is sampled.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from repro.objectives import Groups
from repro.theory.policy import (
    ANSWER_CONTEXT,
    FORM_A,
    FORM_B,
    TEMPLATE,
    TEMPLATE_CONTEXTS,
    VOCAB,
    Rollout,
    TabularPolicy,
)


def probe(policy: TabularPolicy) -> dict[str, float]:
    """log-odds of the two correct forms (Cor. 3.2), expected reward, template mass, entropy."""
    log_a = policy.seq_logprob(TEMPLATE + FORM_A)
    log_b = policy.seq_logprob(TEMPLATE + FORM_B)
    answer = policy.log_probs_at([ANSWER_CONTEXT])[0]
    return {
        "logodds": log_a - log_b,
        "p_correct": math.exp(log_a) + math.exp(log_b),
        "p_template": math.exp(policy.seq_logprob(TEMPLATE)),
        "entropy_answer": float(-(answer.exp() * answer).sum()),
    }


def kl_sum(new_logp: Tensor, old_logp: Tensor) -> float:
    """sum over rows of KL(new || old) for next-token log-distributions [n, VOCAB].

    Each row is clamped at 0: KL >= 0, and for identical rows float rounding can give -1e-16.
    """
    return float((new_logp.exp() * (new_logp - old_logp)).sum(-1).clamp_min(0).sum())


def shared_template_net(rollout: Rollout, coef: Tensor) -> tuple[Tensor, float]:
    """Net coefficient and non-cancelled share at template nodes that a whole group shares.

    coef: c = -dL/dlogp [B, T]. A node (h_t, TEMPLATE[t]) counts for a group when every member
    emitted TEMPLATE[:t + 1]. Returns net [len(TEMPLATE)] = sum of c over those rows per position
    (what moves the template logits for no reward reason) and
    share = sum_g |sum_i c_i| / sum_g sum_i |c_i| (the spec's residual_full on the template;
    0 = exact cancellation, also 0 when no such node carries a gradient).
    """
    groups = Groups.from_ids(rollout.group)
    template = torch.tensor(TEMPLATE)
    on_template = (rollout.tokens[:, : len(TEMPLATE)] == template).cumprod(-1).bool()
    net = coef.new_zeros(len(TEMPLATE))
    num = den = 0.0
    for t in range(len(TEMPLATE)):
        shared = groups.broadcast(groups.min(on_template[:, t].to(coef.dtype)) > 0)
        c = torch.where(shared, coef[:, t], torch.zeros_like(coef[:, t]))
        net[t] = c.sum()
        num += float(groups.sum(c).abs().sum())
        den += float(c.abs().sum())
    return net, (num / den if den > 0 else 0.0)


@torch.no_grad()
def residual_step(policy: TabularPolicy, net: Tensor, lr: float) -> Tensor:
    """[len(TEMPLATE), VOCAB] change of the template logits that the plain-SGD step of the
    non-cancelled shared-node residual alone makes: -dL/dz_h = sum_i c_i (e_{y_i} - p_h), so
    the residual moves z_h by lr * net_t * (e_{TEMPLATE[t]} - p_h).
    """
    z = policy.logits[TEMPLATE_CONTEXTS]
    onehot = torch.nn.functional.one_hot(torch.tensor(TEMPLATE), VOCAB).to(z.dtype)
    return lr * net[:, None] * (onehot - torch.softmax(z, dim=-1))
