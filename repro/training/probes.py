"""Probe metrics on the synthetic tasks' fixed probe set (spec: "Probe metrics").

logodds: mean over probes of log P(form A) - log P(form B), two equally correct answers
(Corollary 3.2's drift is its change from step 0). kl_template: mean KL between consecutive
measurements of the next-token distribution at fixed template contexts (Proposition 3.1's tax).
"""

from __future__ import annotations

import torch
from torch import Tensor

from repro.tasks import synthetic_probes
from repro.training.logprobs import response_logprobs


class ProbeSet:
    def __init__(self, tokenizer, tasks: list[str], n: int) -> None:
        pad = tokenizer.pad_token_id
        pairs, contexts = [], []
        for name in tasks:
            for probe in synthetic_probes(name, n=n):
                prompt = tokenizer.apply_chat_template(probe.messages, tokenize=False,
                                                       add_generation_prompt=True)
                p_ids = tokenizer(prompt, add_special_tokens=False).input_ids
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
        last = model(input_ids=self.ctx, attention_mask=self.ctx_attn, position_ids=pos).logits[:, -1]
        return logodds, torch.log_softmax(last.double(), -1)


def kl_between(new_logp: Tensor, old_logp: Tensor) -> float:
    """Mean over contexts of KL(new || old)."""
    return float((new_logp.exp() * (new_logp - old_logp)).sum(-1).mean())
