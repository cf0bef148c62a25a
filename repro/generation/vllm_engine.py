"""vLLM engine for GPUs: one request per prompt with n = k, per-request seed.

vLLM is an optional dependency (`pip install 'dfpo-repro[gpu]'`); importing this module never
imports vllm, constructing the engine does.
"""

from __future__ import annotations

from typing import Any

from repro.generation.base import Completion, SamplingConfig


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
        )
        self.tokenizer = self.llm.get_tokenizer()  # prompts are rendered with its chat template

    def sampling_params(self, sampling: SamplingConfig, index: int, return_logprobs: bool) -> Any:
        """One request's parameters; request i gets seed + i so samples differ across prompts."""
        return self._sampling_params(
            n=sampling.n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else -1,
            min_p=sampling.min_p,
            max_tokens=sampling.max_new_tokens,
            seed=sampling.seed + index,
            logprobs=0 if return_logprobs else None,  # 0: the sampled token's own log-prob
        )

    def generate(
        self, prompts: list[str], sampling: SamplingConfig, *, return_logprobs: bool = False
    ) -> list[list[Completion]]:
        params = [self.sampling_params(sampling, i, return_logprobs) for i in range(len(prompts))]
        outputs = self.llm.generate(prompts, params)
        return [[to_completion(o, return_logprobs) for o in req.outputs] for req in outputs]


def to_completion(output: Any, return_logprobs: bool) -> Completion:
    """vllm CompletionOutput -> Completion (finish_reason 'stop' or 'length')."""
    ids = tuple(output.token_ids)
    logprobs = None
    if return_logprobs:
        logprobs = tuple(step[tok].logprob for step, tok in zip(output.logprobs, ids))
    reason = "length" if output.finish_reason == "length" else "stop"
    return Completion(text=output.text, token_ids=ids, finish_reason=reason, logprobs=logprobs)
