"""Rollouts: the compute-matched prompt stream, sampling G responses per prompt, rewards.

The prompt stream is a pure function of (seed, step): every algorithm of an experiment sees the
same prompts in the same order, and a resumed run needs no stream state beyond the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from repro.benchmarks import build_messages, get_benchmark, load_problems
from repro.benchmarks.mapping import row_to_problem
from repro.benchmarks.problem import Problem
from repro.generation.base import SamplingConfig
from repro.generation.hf import HFEngine
from repro.graders.base import GRADER_FAILURES
from repro.tasks import synthetic_rows, synthetic_size, task_of

POOL_MAX = 4096  # synthetic training problems per task (their train splits hold 300 to 15,000)


def training_pool(name: str, *, data_dir: Path | None = None,
                  sha256_pins: dict[str, str] | None = None) -> list[Problem]:
    """A task's training problems: a synthetic stand-in's TRAIN split (its benchmark spec serves
    the eval split), or any registered prompt set (openr1-math, lcb-train) through the same
    loader as evaluation, offline mirror and LCB pins included."""
    spec = get_benchmark(name)
    if spec.source == "synthetic":
        task = task_of(spec.generator)
        n = min(POOL_MAX, synthetic_size(task, "train"))
        rows = synthetic_rows(task, "train", n, seed=0)  # the same pool for every run seed
        return [row_to_problem(spec, r, allow_pickle=True) for r in rows]
    pins = {"sha256_pins": sha256_pins} if spec.source == "lcb_jsonl" else {}
    problems, _ = load_problems(spec, data_dir=data_dir, **pins)
    return problems


class PromptStream:
    """P training problems per step from the task mix, deterministic in (seed, step)."""

    def __init__(self, tasks: dict[str, float], seed: int, per_step: int, *,
                 data_dir: Path | None = None, sha256_pins: dict[str, str] | None = None) -> None:
        self.names = sorted(tasks)
        weights = np.array([tasks[n] for n in self.names], dtype=np.float64)
        self.weights = weights / weights.sum()
        self.seed, self.per_step = seed, per_step
        self.specs = {n: get_benchmark(n) for n in self.names}
        self.pools = {n: training_pool(n, data_dir=data_dir, sha256_pins=sha256_pins)
                      for n in self.names}

    def at(self, step: int) -> list[tuple[str, Problem]]:
        rng = np.random.default_rng([self.seed, step])
        picks = []
        for _ in range(self.per_step):
            name = self.names[int(rng.choice(len(self.names), p=self.weights))]
            pool = self.pools[name]
            picks.append((name, pool[int(rng.integers(len(pool)))]))
        return picks


class Rewarder:
    """Sequence rewards from the evaluator's graders (1 correct, 0 otherwise).

    A grader failure (timeout, math-verify error, sandbox error) also scores 0, but is counted:
    `last_failures` holds the count of the latest call (the train log's `grader_errors`)."""

    def __init__(self, kinds: set[str]) -> None:
        self.last_failures = 0
        self.graders: dict[str, Any] = {}
        if "math" in kinds:
            from repro.graders.math import MathGrader

            self.graders["math"] = MathGrader()
        if "code" in kinds:
            from repro.graders.code import CodeGrader
            from repro.sandbox import Sandbox

            sandbox = Sandbox()
            sandbox.check()
            self.graders["code"] = CodeGrader(sandbox)

    def __call__(self, items: list[tuple[Problem, str]]) -> list[float]:
        rewards = [0.0] * len(items)
        self.last_failures = 0
        for kind, grader in self.graders.items():
            idx = [i for i, (p, _) in enumerate(items) if p.kind == kind]
            for i, grade in zip(idx, grader.grade_many([items[i] for i in idx]), strict=True):
                rewards[i] = float(grade.correct)
                self.last_failures += grade.verdict in GRADER_FAILURES
        return rewards

    def close(self) -> None:
        for grader in self.graders.values():
            if hasattr(grader, "close"):
                grader.close()


@dataclass
class RolloutBatch:
    """P x G sequences (prompt + response), right-padded, rows of a group adjacent."""

    input_ids: Tensor  # [B, L]
    attention_mask: Tensor  # [B, L]
    response_mask: Tensor  # [B, L] bool: response tokens (the ones trained on)
    group: Tensor  # [B]
    reward: Tensor  # [B]
    engine_logp: Tensor | None  # [B, L] sampler log-probs on response tokens (0 elsewhere)
    truncated: Tensor  # [B] bool: hit max_new_tokens
    grader_errors: int = 0  # responses the grader failed on (scored 0, counted apart)


def chat_prompts(tok, picks: list[tuple[str, Problem]], specs: dict[str, Any]) -> list[str]:
    """The chat-templated prompt text of each pick, as the policy sees it."""
    return [tok.apply_chat_template(build_messages(specs[name], p), tokenize=False,
                                    add_generation_prompt=True) for name, p in picks]


def rollout(
    engine: HFEngine,
    picks: list[tuple[str, Problem]],
    specs: dict[str, Any],
    rewarder: Rewarder,
    sampling: SamplingConfig,
    *,
    want_engine_logp: bool,
) -> RolloutBatch:
    tok = engine.tokenizer
    prompts = chat_prompts(tok, picks, specs)
    completions = engine.generate(prompts, sampling, return_logprobs=want_engine_logp)
    rows, group, items, truncated, elogp = [], [], [], [], []
    for g, (prompt, (_, problem), comps) in enumerate(
            zip(prompts, picks, completions, strict=True)):
        p_ids = tok(prompt, add_special_tokens=False).input_ids
        for c in comps:
            rows.append((p_ids, list(c.token_ids)))
            group.append(g)
            items.append((problem, c.text))
            truncated.append(c.finish_reason == "length")
            elogp.append(c.logprobs)
    rewards = rewarder(items)
    width = max(len(p) + len(r) for p, r in rows)
    ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    resp = torch.zeros((len(rows), width), dtype=torch.bool)
    engine_logp = torch.zeros((len(rows), width)) if want_engine_logp else None
    for i, (p_ids, r_ids) in enumerate(rows):
        n_p, n = len(p_ids), len(p_ids) + len(r_ids)
        ids[i, :n] = torch.tensor(p_ids + r_ids)
        attn[i, :n] = 1
        resp[i, n_p:n] = True
        if engine_logp is not None:
            engine_logp[i, n_p:n] = torch.tensor(elogp[i])
    return RolloutBatch(ids, attn, resp, torch.tensor(group), torch.tensor(rewards),
                        engine_logp, torch.tensor(truncated),
                        grader_errors=getattr(rewarder, "last_failures", 0))
