"""The toy task and its tabular softmax policy: exact probabilities, real autograd.

Every context (distinct token prefix of the response; there is one prompt) owns a row of a
logit table [n_contexts, VOCAB]. Prefixes are numbered in mixed radix (all prefixes of length
L come after those of length L - 1), so a context id is a pure function of the tokens and
the table can be preallocated: sum_{L < MAX_LEN} VOCAB^L = 37,449 rows of 8 logits.

Task: a response is the template TEMPLATE (3 tokens, each dominant but not certain at its
context) followed by an answer ended by EOS, at most MAX_LEN tokens. Exactly two responses
earn reward 1: TEMPLATE + FORM_A and TEMPLATE + FORM_B, two equally correct surface forms of
different lengths (5 and 6 tokens, so GSPO's 1/|y| coupling applies). Deviating from the
template, any other answer, or running out of length earns 0. The initial answer-context
probabilities are set so that P(A | x) = P(B | x) = 0.15: the log-odds start at 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from repro.theory.config import VOCAB

EOS = 0
TEMPLATE = (1, 2, 3)
FORM_A = (4, EOS)
FORM_B = (5, 6, EOS)
MAX_LEN = len(TEMPLATE) + 3
DTYPE = torch.float64  # exact experiment: keep rounding far below the 1e-6 cancellation tests

# offsets[L] = id of the first prefix of length L
OFFSETS = [sum(VOCAB**k for k in range(length)) for length in range(MAX_LEN + 1)]
N_CONTEXTS = OFFSETS[MAX_LEN]

# Initial next-token probabilities at the answer contexts (the rest of each row is uniform):
# P(A|template) = .25 * .6 = .15 = .25 * .75 * .8 = P(B|template).
ANSWER_INIT = {
    TEMPLATE: {FORM_A[0]: 0.25, FORM_B[0]: 0.25},
    TEMPLATE + FORM_A[:1]: {EOS: 0.6},
    TEMPLATE + FORM_B[:1]: {FORM_B[1]: 0.75},
    TEMPLATE + FORM_B[:2]: {EOS: 0.8},
}


def context_id(prefix: Sequence[int]) -> int:
    """Row of the logit table for the context `prefix` (tokens generated so far)."""
    code = 0
    for tok in prefix:
        code = code * VOCAB + tok
    return OFFSETS[len(prefix)] + code


TEMPLATE_CONTEXTS = [context_id(TEMPLATE[:k]) for k in range(len(TEMPLATE))]
ANSWER_CONTEXT = context_id(TEMPLATE)


@dataclass(frozen=True)
class Rollout:
    """Sampled responses: tokens [B, T] (0 after the end), mask [B, T], group ids [B]."""

    tokens: Tensor
    mask: Tensor
    group: Tensor

    @classmethod
    def from_sequences(cls, seqs: Sequence[Sequence[int]], group: Sequence[int]) -> Rollout:
        tokens = torch.zeros(len(seqs), MAX_LEN, dtype=torch.long)
        mask = torch.zeros(len(seqs), MAX_LEN, dtype=torch.bool)
        for i, seq in enumerate(seqs):
            tokens[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
            mask[i, : len(seq)] = True
        return cls(tokens, mask, torch.tensor(group, dtype=torch.long))

    def contexts(self) -> Tensor:
        """[B, T] context ids; padding positions get a valid (unused) id."""
        ids = torch.empty_like(self.tokens)
        code = torch.zeros_like(self.tokens[:, 0])
        for t in range(MAX_LEN):
            ids[:, t] = OFFSETS[t] + code
            code = code * VOCAB + self.tokens[:, t]
        return ids

    def reward(self) -> Tensor:
        """[B] float: 1 for exactly TEMPLATE + FORM_A or TEMPLATE + FORM_B, else 0."""
        correct = Rollout.from_sequences([TEMPLATE + FORM_A, TEMPLATE + FORM_B], [0, 0])
        same_tok = (self.tokens[:, None] == correct.tokens[None]).all(-1)
        same_len = (self.mask[:, None] == correct.mask[None]).all(-1)
        return (same_tok & same_len).any(-1).to(DTYPE)


class TabularPolicy:
    """Softmax policy with one free logit vector per context."""

    def __init__(self, template_prob: float) -> None:
        logits = torch.zeros(N_CONTEXTS, VOCAB, dtype=DTYPE)
        for k, tok in enumerate(TEMPLATE):
            logits[TEMPLATE_CONTEXTS[k]] = _logits_for({tok: template_prob})
        for prefix, probs in ANSWER_INIT.items():
            logits[context_id(prefix)] = _logits_for(probs)
        self.logits = logits.requires_grad_(True)

    def logp(self, rollout: Rollout) -> Tensor:
        """[B, T] log pi(y_t | h_t), differentiable w.r.t. the table (padding values unused)."""
        logprobs = torch.log_softmax(self.logits[rollout.contexts()], dim=-1)
        return logprobs.gather(-1, rollout.tokens[..., None]).squeeze(-1)

    @torch.no_grad()
    def sample(self, groups: int, group_size: int, gen: torch.Generator) -> Rollout:
        """Sample groups x group_size responses token by token; stop at EOS or MAX_LEN."""
        n = groups * group_size
        tokens = torch.zeros(n, MAX_LEN, dtype=torch.long)
        mask = torch.zeros(n, MAX_LEN, dtype=torch.bool)
        code = torch.zeros(n, dtype=torch.long)
        alive = torch.ones(n, dtype=torch.bool)
        for t in range(MAX_LEN):
            probs = torch.softmax(self.logits[OFFSETS[t] + code], dim=-1)
            tok = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
            tokens[:, t] = torch.where(alive, tok, torch.zeros_like(tok))
            mask[:, t] = alive
            code = code * VOCAB + tokens[:, t]
            alive = alive & (tok != EOS)
        group = torch.arange(groups).repeat_interleave(group_size)
        return Rollout(tokens, mask, group)

    @torch.no_grad()
    def sgd_step(self, lr: float) -> None:
        """Plain SGD on the table (the probes assume exactly this update), then clear the grad."""
        self.logits.add_(self.logits.grad, alpha=-lr)
        self.logits.grad = None

    @torch.no_grad()
    def log_probs_at(self, contexts: Sequence[int]) -> Tensor:
        """[len(contexts), VOCAB] exact next-token log-probabilities."""
        return torch.log_softmax(self.logits[list(contexts)], dim=-1)

    @torch.no_grad()
    def seq_logprob(self, seq: Sequence[int]) -> float:
        """Exact log pi(seq | x): the sum of the tabular conditionals along the path."""
        ids = [context_id(seq[:t]) for t in range(len(seq))]
        return float(self.log_probs_at(ids)[torch.arange(len(seq)), list(seq)].sum())


def _logits_for(probs: dict[int, float]) -> Tensor:
    """Logits whose softmax puts `probs` on the named tokens and spreads the rest uniformly."""
    rest = (1.0 - sum(probs.values())) / (VOCAB - len(probs))
    p = torch.full((VOCAB,), rest, dtype=DTYPE)
    for tok, prob in probs.items():
        p[tok] = prob
    return p.log()
