"""HF transformers engine: batched sampling with the KV cache, on CPU or one GPU.

Prompts are left-padded so that every row's generation starts at the same position. The k
samples of a prompt come from one `generate` call with num_return_sequences = k; each sample
draws from its own random stream seeded by (sampling.seed, the prompt's key, sample index)
(`repro.generation.streams`), so completions do not depend on batch size, batch composition
or order.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from repro.generation.base import Completion, SamplingConfig, request_keys
from repro.generation.gumbel import sampling_processors


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
        self, prompts: list[str], sampling: SamplingConfig, *, keys: list[str] | None = None,
        return_logprobs: bool = False,
    ) -> list[list[Completion]]:
        keys = request_keys("HFEngine", prompts, sampling, keys, return_logprobs)
        out: list[list[Completion]] = []
        for start in range(0, len(prompts), self.batch_size):
            end = start + self.batch_size
            out.extend(self._generate_batch(prompts[start:end], keys[start:end], sampling,
                                            return_logprobs))
        return out

    @torch.no_grad()
    def _generate_batch(
        self, prompts: list[str], keys: list[str], sampling: SamplingConfig, return_logprobs: bool
    ) -> list[list[Completion]]:
        tok = self.tokenizer
        side = tok.padding_side
        tok.padding_side = "left"
        try:
            enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        finally:
            tok.padding_side = side
        device = next(self.model.parameters()).device
        # k rows per prompt, prompt-major (greedy search refuses num_return_sequences > 1)
        enc = {k: v.to(device).repeat_interleave(sampling.n, dim=0) for k, v in enc.items()}
        kwargs = {
            "max_new_tokens": sampling.max_new_tokens,
            "pad_token_id": tok.pad_token_id,
            "eos_token_id": tok.eos_token_id,
            "return_dict_in_generate": True,
            "output_logits": return_logprobs,
            # greedy search over scores that carry per-row noise when sampling (gumbel.py)
            "do_sample": False, "top_k": None, "top_p": None, "temperature": None,
            "min_p": None,
        }
        if sampling.temperature > 0:
            kwargs["logits_processor"] = sampling_processors(sampling, keys)
        result = self.model.generate(**enc, **kwargs)
        new = result.sequences[:, enc["input_ids"].shape[1] :]
        logps = None
        if return_logprobs:  # log-probs of the sampling policy softmax(logits / T), as the
            # trainer recomputes them; greedy has no sampling policy, so T = 1 there
            logits = torch.stack(result.logits, dim=1).float()
            if sampling.temperature > 0:
                logits = logits / sampling.temperature
            logps = torch.log_softmax(logits, -1).gather(-1, new[..., None])[..., 0]
        comps = [self._completion(new[i], None if logps is None else logps[i])
                 for i in range(len(new))]
        return [comps[i * sampling.n : (i + 1) * sampling.n] for i in range(len(prompts))]

    def _completion(self, ids: torch.Tensor, logp: torch.Tensor | None) -> Completion:
        """Cut at the first EOS (kept: a generated token the policy chose) or the first sampled
        pad (dropped: pad is a stop token, never text, and not trained on)."""
        tok = self.tokenizer
        eos = (ids == tok.eos_token_id).nonzero()
        pad = (ids == tok.pad_token_id).nonzero() if tok.pad_token_id != tok.eos_token_id else eos
        first_eos = int(eos[0]) if len(eos) else len(ids)
        first_pad = int(pad[0]) if len(pad) else len(ids)
        if first_eos < len(ids) and first_eos <= first_pad:
            end, reason = first_eos + 1, "stop"  # keep EOS: it is a generated token
        elif first_pad < len(ids):
            end, reason = first_pad, "stop"
        else:
            end, reason = len(ids), "length"
        ids = ids[:end]
        return Completion(
            text=self.tokenizer.decode(ids, skip_special_tokens=True),
            token_ids=tuple(ids.tolist()),
            finish_reason=reason,
            logprobs=None if logp is None else tuple(logp[:end].tolist()),
        )
