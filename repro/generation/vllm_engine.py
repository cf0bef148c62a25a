"""vLLM engine for GPUs: one request per sample, each with its own seed.

Sample j of the prompt keyed K gets seed `stream_seed(seed, K, j)` (repro.generation.streams),
so its completion does not depend on the batch, the order or the other samples; vLLM's prefix
cache shares the prompt's KV blocks between the k requests of a prompt.

vLLM is an optional dependency (`pip install 'dfpo-repro[gpu]'`); importing this module never
imports vllm, constructing the engine does.
"""

from __future__ import annotations

from typing import Any

from repro.generation.base import Completion, SamplingConfig, request_keys
from repro.generation.streams import stream_seed


def _vllm() -> Any:
    try:
        import vllm
    except ImportError as err:
        raise RuntimeError(
            "the vLLM engine needs vllm, which is not installed: pip install 'dfpo-repro[gpu]'"
        ) from err
    return vllm


class VLLMEngine:
    name = "vllm"

    def __init__(
        self,
        model: str,
        *,
        tensor_parallel_size: int | None = None,
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        dtype: str = "auto",
        seed: int = 0,
    ) -> None:
        vllm = _vllm()
        if tensor_parallel_size is None:  # every visible GPU (the SLURM profile sets how many)
            import torch

            tensor_parallel_size = max(1, torch.cuda.device_count())
        self._sampling_params = vllm.SamplingParams
        self.llm = vllm.LLM(
            model=model,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            dtype=dtype,
            seed=seed,
            # Log-probs of the distribution sampled from (after temperature; the logits as they
            # are when greedy), as HFEngine returns and the trainer recomputes them. vLLM's
            # default, raw_logprobs, is softmax(logits) at T = 1 whatever the temperature.
            logprobs_mode="processed_logprobs",
        )
        self.tokenizer = self.llm.get_tokenizer()  # prompts are rendered with its chat template

    def sampling_params(self, sampling: SamplingConfig, key: str, sample: int,
                        return_logprobs: bool) -> Any:
        """One sample's request: n = 1 with the seed of its own stream."""
        return self._sampling_params(
            n=1,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else -1,
            min_p=sampling.min_p,
            max_tokens=sampling.max_new_tokens,
            seed=stream_seed(sampling.seed, key, sample),
            logprobs=0 if return_logprobs else None,  # 0: the sampled token's own log-prob
        )

    def generate(
        self, prompts: list[str], sampling: SamplingConfig, *, keys: list[str] | None = None,
        return_logprobs: bool = False,
    ) -> list[list[Completion]]:
        keys = request_keys("VLLMEngine", prompts, sampling, keys, return_logprobs)
        n = sampling.n
        requests = [prompt for prompt in prompts for _ in range(n)]
        params = [self.sampling_params(sampling, key, j, return_logprobs)
                  for key in keys for j in range(n)]
        outputs = self.llm.generate(requests, params)
        flat = [to_completion(req.outputs[0], return_logprobs) for req in outputs]
        return [flat[i * n : (i + 1) * n] for i in range(len(prompts))]


def to_completion(output: Any, return_logprobs: bool) -> Completion:
    """vllm CompletionOutput -> Completion (finish_reason 'stop' or 'length')."""
    ids = tuple(output.token_ids)
    logprobs = None
    if return_logprobs:
        logprobs = tuple(step[tok].logprob for step, tok in zip(output.logprobs, ids, strict=True))
    reason = "length" if output.finish_reason == "length" else "stop"
    return Completion(text=output.text, token_ids=ids, finish_reason=reason, logprobs=logprobs)
