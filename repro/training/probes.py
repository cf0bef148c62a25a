"""Probe metrics on the synthetic tasks' fixed probe set (spec: "Probe metrics").

logodds: mean over probes of log P(form A) - log P(form B), two equally correct answers
(Corollary 3.2's drift is its change from step 0). kl_template: mean KL between consecutive
measurements of the next-token distribution at fixed template contexts (Proposition 3.1's tax).
On tasks with preambles (synth-preamble), `PreambleSet` measures the drift from the start on
shared, reward-irrelevant tokens: preamble_kl and phrasing_kl (`preamble_drift`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from repro.results.schemas import TRAIN_LOG_PREAMBLE
from repro.tasks import Probe, synthetic_probes
from repro.training.logprobs import response_logprobs


class ProbeSet:
    def __init__(self, tokenizer, tasks: list[str], n: int) -> None:
        pad = tokenizer.pad_token_id
        pairs, contexts = [], []
        probes = [probe for name in tasks for probe in synthetic_probes(name, n=n)]
        with_preamble = [probe for probe in probes if probe.preambles]
        self.preamble = PreambleSet(tokenizer, with_preamble) if with_preamble else None
        for probe in probes:
            p_ids = prompt_ids(tokenizer, probe)
            forms = [tokenizer(f, add_special_tokens=False).input_ids
                     for f in (probe.form_a, probe.form_b)]
            pairs.append([(p_ids, f) for f in forms])
            contexts += [p_ids + tokenizer(t, add_special_tokens=False).input_ids
                         for t in probe.template_prefixes]
        seqs = [s for pair in pairs for s in pair]
        width = max(len(p) + len(f) for p, f in seqs)
        self.ids = torch.full((len(seqs), width), pad, dtype=torch.long)
        self.attn = torch.zeros_like(self.ids)
        self.resp = torch.zeros_like(self.ids, dtype=torch.bool)
        for i, (p, f) in enumerate(seqs):
            self.ids[i, : len(p) + len(f)] = torch.tensor(p + f)
            self.attn[i, : len(p) + len(f)] = 1
            self.resp[i, len(p) : len(p) + len(f)] = True
        cw = max(map(len, contexts))
        self.ctx = torch.full((len(contexts), cw), pad, dtype=torch.long)  # left-padded
        self.ctx_attn = torch.zeros_like(self.ctx)
        for i, c in enumerate(contexts):
            self.ctx[i, cw - len(c) :] = torch.tensor(c)
            self.ctx_attn[i, cw - len(c) :] = 1

    @torch.no_grad()
    def measure(self, model) -> tuple[float, Tensor]:
        """(mean log-odds A vs B, log next-token distributions [contexts, V] at the templates)."""
        logp, _ = response_logprobs(model, self.ids, self.attn, self.resp, with_entropy=False)
        seq = logp.sum(-1).view(-1, 2)
        logodds = float((seq[:, 0] - seq[:, 1]).mean())
        pos = (self.ctx_attn.cumsum(-1) - 1).clamp(min=0)
        last = model(input_ids=self.ctx, attention_mask=self.ctx_attn,
                     position_ids=pos).logits[:, -1]
        return logodds, torch.log_softmax(last.double(), -1)


def kl_between(new_logp: Tensor, old_logp: Tensor) -> float:
    """Mean over contexts of KL(new || old)."""
    return float((new_logp.exp() * (new_logp - old_logp)).sum(-1).mean())


def prompt_ids(tokenizer, probe: Probe) -> list[int]:
    """The probe's chat prompt, ready for the assistant turn, as token ids."""
    prompt = tokenizer.apply_chat_template(probe.messages, tokenize=False,
                                           add_generation_prompt=True)
    return tokenizer(prompt, add_special_tokens=False).input_ids


PreambleMeasure = tuple[Tensor, Tensor]  # ([preamble tokens, V] log-probs, [probes, P] log q)


class PreambleSet:
    """Every probe prompt teacher-forced on each of its task's preamble phrasings.

    `measure` gives, at each preamble token, the policy's full next-token log-distribution, and
    per probe the log of q, the distribution over the phrasings (their sequence probabilities,
    renormalised over the P phrasings). The start's measure is taken once and kept in the run
    state, so no second model is resident. Every probe must have the same P (one preamble task
    per run, or tasks with equally many phrasings).
    """

    def __init__(self, tokenizer, probes: list[Probe]) -> None:
        counts = {len(p.preambles) for p in probes}
        if len(counts) != 1:
            raise ValueError(f"preamble probes differ in their number of phrasings: {counts}")
        self.phrasings = counts.pop()
        seqs, spans = [], []  # spans: (first preamble token, end) in each sequence
        for probe in probes:
            p_ids = prompt_ids(tokenizer, probe)
            head = tokenizer(probe.preamble_prefix, add_special_tokens=False).input_ids
            for phrasing in probe.preambles:
                full = tokenizer(probe.preamble_prefix + phrasing,
                                 add_special_tokens=False).input_ids
                if full[: len(head)] != head or len(full) == len(head):
                    raise ValueError(f"{probe.problem_id}: phrasing {phrasing!r} does not "
                                     f"tokenise as a continuation of {probe.preamble_prefix!r}")
                seqs.append(p_ids + full)
                spans.append((len(p_ids) + len(head), len(p_ids) + len(full)))
        width = max(map(len, seqs))
        self.ids = torch.full((len(seqs), width), tokenizer.pad_token_id, dtype=torch.long)
        self.attn = torch.zeros_like(self.ids)
        self.target = torch.zeros_like(self.ids, dtype=torch.bool)  # preamble tokens
        for i, (seq, (start, end)) in enumerate(zip(seqs, spans, strict=True)):
            self.ids[i, : len(seq)] = torch.tensor(seq)
            self.attn[i, : len(seq)] = 1
            self.target[i, start:end] = True

    @torch.no_grad()
    def measure(self, model) -> PreambleMeasure:
        """(log-probs [preamble tokens, V] at each preamble token, log q [probes, P])."""
        logits = model(input_ids=self.ids, attention_mask=self.attn).logits
        before = torch.zeros_like(self.target)
        before[:, :-1] = self.target[:, 1:]  # the position that predicts each preamble token
        logp = torch.log_softmax(logits[before].double(), -1)
        token_logp = logp.gather(-1, self.ids[self.target][:, None])[:, 0]
        row = torch.arange(len(self.ids))[:, None].expand_as(self.target)[self.target]
        seq_logp = torch.zeros(len(self.ids), dtype=torch.float64).index_add_(0, row, token_logp)
        return logp, torch.log_softmax(seq_logp.view(-1, self.phrasings), -1)


def preamble_drift(now: PreambleMeasure | None, start: PreambleMeasure | None) -> dict[str, float]:
    """preamble_kl: mean over preamble tokens of KL(start || now) of the next-token distribution
    (the learning tax on shared, reward-irrelevant tokens); phrasing_kl: mean over probes of
    KL(start || now) of the distribution over the equally taught phrasings. NaN without both."""
    if now is None or start is None:
        return dict.fromkeys(TRAIN_LOG_PREAMBLE, math.nan)
    return {"preamble_kl": kl_between(start[0], now[0]),
            "phrasing_kl": kl_between(start[1], now[1])}
