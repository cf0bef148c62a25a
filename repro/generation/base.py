"""The engine interface: prompts in, k completions per prompt out, with what produced them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from repro.generation.streams import default_keys


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling parameters; recorded with every result. Defaults: Qwen3 thinking models."""

    temperature: float = field(default=0.6, metadata={"help": "Softmax temperature; 0 = greedy."})
    top_p: float = field(default=0.95, metadata={"help": "Nucleus sampling mass."})
    top_k: int = field(default=20, metadata={"help": "Keep the k most likely tokens; 0 = off."})
    min_p: float = field(default=0.0, metadata={"help": "Drop tokens below min_p * p_max."})
    max_new_tokens: int = field(default=38912, metadata={"help": "Generation budget per sample."})
    n: int = field(default=1, metadata={"help": "Samples per prompt (k of avg@k)."})
    seed: int = field(default=0, metadata={
        "help": "Run seed; sample j of the prompt keyed K draws from stream (seed, K, j)."})

    def __post_init__(self) -> None:
        checks = [
            (self.temperature >= 0, "temperature", "must be >= 0"),
            (0 < self.top_p <= 1, "top_p", "must be in (0, 1]"),
            (self.top_k >= 0, "top_k", "must be >= 0"),
            (0 <= self.min_p < 1, "min_p", "must be in [0, 1)"),
            (self.max_new_tokens > 0, "max_new_tokens", "must be > 0"),
            (self.n > 0, "n", "must be > 0"),
        ]
        for ok, name, rule in checks:
            if not ok:
                raise ValueError(f"SamplingConfig.{name} {rule}, got {getattr(self, name)!r}")

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
