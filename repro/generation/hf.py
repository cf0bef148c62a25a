"""HF transformers engine: batched sampling with the KV cache, on CPU or one GPU.

Prompts are left-padded so that every row's generation starts at the same position. The k
samples of a prompt come from one `generate` call with num_return_sequences = k under a torch
generator seeded from `sampling.seed` and the batch index, so a rerun reproduces the same
completions (batch composition matters: keep batch_size fixed when comparing runs).
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from repro.generation.base import Completion, SamplingConfig


class HFEngine:
    name = "hf"

    def __init__(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, *, batch_size: int = 8
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"HFEngine batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        if tokenizer.pad_token_id is None:
            raise ValueError("HFEngine: the tokenizer has no pad token; set tokenizer.pad_token")

    def generate(
        self, prompts: list[str], sampling: SamplingConfig, *, return_logprobs: bool = False
    ) -> list[list[Completion]]:
        out: list[list[Completion]] = []
        for start in range(0, len(prompts), self.batch_size):
            chunk = prompts[start : start + self.batch_size]
            out.extend(self._generate_batch(chunk, sampling, start, return_logprobs))
        return out

    @torch.no_grad()
    def _generate_batch(
        self, prompts: list[str], sampling: SamplingConfig, offset: int, return_logprobs: bool
    ) -> list[list[Completion]]:
        tok = self.tokenizer
        side = tok.padding_side
        tok.padding_side = "left"
        try:
            enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        finally:
            tok.padding_side = side
        device = next(self.model.parameters()).device
        enc = {k: v.to(device) for k, v in enc.items()}
        greedy = sampling.temperature == 0
        kwargs = {
            "max_new_tokens": sampling.max_new_tokens,
            "num_return_sequences": sampling.n,
            "pad_token_id": tok.pad_token_id,
            "eos_token_id": tok.eos_token_id,
            "return_dict_in_generate": True,
            "output_logits": return_logprobs,
        }
        if greedy:
            kwargs |= {"do_sample": False, "top_k": None, "top_p": None, "temperature": None}
        else:
            kwargs |= {
                "do_sample": True,
                "temperature": sampling.temperature,
                "top_p": sampling.top_p,
                "top_k": sampling.top_k or None,
                "min_p": sampling.min_p or None,
            }
        with torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]):
            torch.manual_seed(sampling.seed * 1_000_003 + offset)
            result = self.model.generate(**enc, **kwargs)
        new = result.sequences[:, enc["input_ids"].shape[1] :]
        logps = None
        if return_logprobs:  # model log-probs at temperature 1 (what a trainer recomputes)
            logits = torch.stack(result.logits, dim=1).float()
            logps = torch.log_softmax(logits, -1).gather(-1, new[..., None])[..., 0]
        comps = [self._completion(new[i], None if logps is None else logps[i]) for i in range(len(new))]
        return [comps[i * sampling.n : (i + 1) * sampling.n] for i in range(len(prompts))]

    def _completion(self, ids: torch.Tensor, logp: torch.Tensor | None) -> Completion:
        eos = (ids == self.tokenizer.eos_token_id).nonzero()
        if len(eos):
            end, reason = int(eos[0]) + 1, "stop"  # keep EOS: it is a generated token
        else:
            end, reason = len(ids), "length"
        ids = ids[:end]
        return Completion(
            text=self.tokenizer.decode(ids, skip_special_tokens=True),
            token_ids=tuple(ids.tolist()),
            finish_reason=reason,
            logprobs=None if logp is None else tuple(logp[:end].tolist()),
        )
