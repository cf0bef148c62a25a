"""The engine interface: prompts in, k completions per prompt out, with what produced them."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol

from repro.config_bounds import check_bounds, setting
from repro.generation.streams import default_keys


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling parameters; recorded with every result. Defaults: Qwen3 thinking models."""

    temperature: float = setting(0.6, "Softmax temperature; 0 = greedy.", min=0)
    top_p: float = setting(0.95, "Nucleus sampling mass.", exclusive_min=0, max=1)
    top_k: int = setting(20, "Keep the k most likely tokens; 0 = off.", min=0)
    min_p: float = setting(0.0, "Drop tokens below min_p * p_max.", min=0, exclusive_max=1)
    max_new_tokens: int = setting(38912, "Generation budget per sample.", exclusive_min=0)
    n: int = setting(1, "Samples per prompt (k of avg@k).", exclusive_min=0)
    seed: int = setting(
        0, "Run seed; sample j of the prompt keyed K draws from stream (seed, K, j).")

    def __post_init__(self) -> None:
        check_bounds(self)  # the bounds of the fields above, also the schema's (eval.sampling)

    def as_record(self) -> dict[str, Any]:
        return asdict(self)

    def check_logprobs(self, engine: str) -> None:
        """Refuse truncated sampling where an engine is asked for log-probs: every engine returns
        those of softmax(logits / T) (T = 1 when greedy), the policy the trainer recomputes, and
        top_p / top_k / min_p sample from another, renormalised one."""
        if self.top_p < 1 or self.top_k or self.min_p:
            raise ValueError(f"{engine}: log-probs of truncated sampling (top_p < 1, top_k, "
                             "min_p) are not those of softmax(logits / T); sample untruncated")


@dataclass(frozen=True)
class Completion:
    text: str  # decoded response, special tokens removed except <think> tags
    token_ids: tuple[int, ...]  # response tokens (no prompt, no padding)
    finish_reason: str  # "stop" (EOS) or "length" (hit max_new_tokens)
    logprobs: tuple[float, ...] | None = None  # engine log-probs of token_ids, if requested

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)


class Engine(Protocol):
    """Generates `sampling.n` completions for each prompt (a chat-templated string).

    `keys` name the prompts' random streams (evaluation: "benchmark/problem_id"); without them
    a prompt's stream is its position in the call (streams.default_keys)."""

    name: str

    def generate(
        self, prompts: list[str], sampling: SamplingConfig, *, keys: list[str] | None = None,
        return_logprobs: bool = False,
    ) -> list[list[Completion]]: ...


def request_keys(engine: str, prompts: list[str], sampling: SamplingConfig,
                 keys: list[str] | None, return_logprobs: bool) -> list[str]:
    """The prompts' stream keys (their positions in the call when none are given), after the
    checks every engine makes before it generates anything."""
    keys = default_keys(len(prompts)) if keys is None else keys
    if len(keys) != len(prompts):
        raise ValueError(f"{engine}.generate: {len(prompts)} prompts but {len(keys)} keys")
    if return_logprobs:
        sampling.check_logprobs(engine)
    return keys
