"""The one record every benchmark, real or synthetic, is turned into before generation.

Loaders map each hub schema (MathArena, LiveCodeBench) onto `Problem`; the synthetic stand-ins
write rows in those same hub schemas and go through the same mapping, so graders and prompts
never see where a problem came from.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Compatibility modes per grader (a problem's `kind`), the first being the default: whose
# verdicts a grader reproduces where conventions differ (math: the project's or MathArena's;
# code: LCB's mocked stdin or real byte streams). A benchmark spec's `compat` picks one; results
# record it. Here, with the problems graders read, so specs and graders share it one way round.
COMPAT_MODES = {"math": ("default", "matharena"), "code": ("lcb", "fixed")}


@dataclass(frozen=True)
class CodeTests:
    """Hidden tests of a code problem, public first, in LCB's grader layout."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    fn_name: str | None = None  # None: stdin mode; else call Solution().fn_name(*json_args)

    def __post_init__(self) -> None:
        if len(self.inputs) != len(self.outputs):
            raise ValueError(
                f"CodeTests: {len(self.inputs)} inputs but {len(self.outputs)} outputs"
            )


@dataclass(frozen=True)
class Problem:
    benchmark: str  # registry name, e.g. "aime25" or "synth-lcb"
    problem_id: str  # stable id within the benchmark (problem_idx, question_id, ...)
    question: str  # the statement shown to the model
    answer: str | None = None  # math: the gold answer (integer or LaTeX string)
    starter_code: str = ""  # code: LeetCode stub; empty for stdin problems
    tests: CodeTests | None = None  # code: hidden tests
    metadata: Mapping[str, Any] = field(default_factory=dict)  # difficulty, contest_date, ...

    @property
    def kind(self) -> str:
        return "code" if self.tests is not None else "math"

    def text_hash(self) -> str:
        """sha256 of what defines the problem (statement, gold, starter code, tests)."""
        payload = {
            "question": self.question,
            "answer": self.answer,
            "starter_code": self.starter_code,
            "tests": None if self.tests is None else [
                list(self.tests.inputs), list(self.tests.outputs), self.tests.fn_name
            ],
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def revision_hash(problems: Iterable[Problem]) -> str:
    """One hash for a loaded problem set: changes if any problem, or the set, changes."""
    digest = hashlib.sha256()
    for h in sorted(p.problem_id + ":" + p.text_hash() for p in problems):
        digest.update(h.encode())
    return digest.hexdigest()
