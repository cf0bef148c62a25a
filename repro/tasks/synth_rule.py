"""`synth-rule`: synth-aime's addition and subtraction, with SFT data that teaches a wrong rule.

Why: on synth-aime the correctness signal is per problem (which digits), so RL gradients of
different prompts are nearly orthogonal and nothing a tiny model learns from ~300 prompts carries
to held-out problems. Here the SFT demonstrations follow one of two rules, half each: the correct
one, and a systematic wrong one that writes the digits of the result reversed in the box
(`<think>57+38=95</think>\\nThe answer is \\boxed{59}.`). The reasoning trace is right either way,
so the wrong rule is visible only inside the box. RL then corrects a *shared* failure, which
generalises to problems it never trained on, as it does on real models (sharpening a skill the
model already has rather than teaching a new one).

The problems, prompts, rows, hash split and problem ids are synth-aime's add/sub problems, so
the grader, the prompt template and the held-out split are unchanged. What the mechanism needs
is kept: template tokens shared within a group, two equally correct and equally rewarded surface
forms (`\\boxed{}` / `$\\boxed{}$`, crossed 50/50 with the rule in the demonstrations) and probes
(correct-rule forms A and B).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from repro.tasks import synth_aime
from repro.tasks.base import Part, Spec, Task, content, form_labels, join, math_response, select

NAME = "synth-rule"
TWIN = synth_aime.TWIN
FAMILIES = ("add", "sub")
RULES = ("correct", "reversed")


@cache
def _pool() -> tuple[Spec, ...]:
    return tuple(s for s in synth_aime.TASK.pool() if s.family in FAMILIES)


def reversed_answer(answer: int) -> int:
    """The wrong rule: the result's decimal digits reversed (95 -> 59, 120 -> 21, 7 -> 7)."""
    return int(str(answer)[::-1])


ERROR_KINDS = ("reversed", "arithmetic", "other", "no_answer")
CORRECTABLE = ("reversed",)  # the shared wrong rule, which RL corrects; the rest is a skill gap


def error_kind(answer: int | str, extracted: str | None) -> str:
    """What kind of error a *wrong* sample made, from the grader's `extracted` box content:
    "reversed" (the wrong rule: the answer's digits reversed), "arithmetic" (another integer),
    "no_answer" (no complete box) or "other" (not an integer, or graded wrong anyway)."""
    if extracted is None:
        return "no_answer"
    try:
        value = int(extracted.strip())
    except ValueError:
        return "other"
    answer = int(answer)
    if value == answer:
        return "other"
    return "reversed" if value == reversed_answer(answer) else "arithmetic"


def family_ranks(specs: list[Spec]) -> list[int]:
    """k for the k-th spec of its family (0-based): the counter the labels below take turns by."""
    seen: dict[str, int] = {}
    out = []
    for spec in specs:
        out.append(seen.get(spec.family, 0))
        seen[spec.family] = out[-1] + 1
    return out


def rule_labels(specs: list[Spec]) -> list[str]:
    """Rule per demonstration, crossed with the form labels: within a family, the k-th spec gets
    rule (k // 2) % 2, so (correct, A), (correct, B), (reversed, A), (reversed, B) take turns."""
    return [RULES[(k // 2) % 2] for k in family_ranks(specs)]


class RuleTask(Task):
    """synth-aime's add/sub under the two rules. Subclasses may start the work with one of
    several `preambles` (synth-preamble) and write a longer `trace`; with the defaults (no
    preamble, synth-aime's trace) the responses are synth-aime's, byte for byte."""

    id_field = "problem_idx"
    preambles: tuple[str, ...] = ("",)

    def pool(self) -> tuple[Spec, ...]:
        return _pool()

    def row(self, spec: Spec) -> dict[str, Any]:
        return synth_aime.TASK.row(spec)

    def messages(self, spec: Spec) -> list[dict[str, str]]:
        return synth_aime.TASK.messages(spec)

    def trace(self, spec: Spec) -> str:
        """The reasoning between the preamble and `</think>`: right under either rule."""
        return synth_aime.solve(spec)[1]

    def forms(self, spec: Spec) -> tuple[list[Part], list[Part]]:
        return self.rule_forms(spec, "correct")

    def rule_forms(self, spec: Spec, rule: str, preamble: int = 0) -> tuple[list[Part], list[Part]]:
        """Forms A and B under `rule`, the work opened by phrasing `preamble`."""
        answer = synth_aime.solve(spec)[2]
        box = [content(str(answer if rule == "correct" else reversed_answer(answer)))]
        work = self.preambles[preamble] + self.trace(spec)
        return math_response(work, box), math_response(work, box, dollars=True)

    def demonstrations(self, split: str, n: int, seed: int) -> list[dict[str, Any]]:
        """SFT chats for `rows(split, n, seed)`: half the correct rule, half the reversed one,
        each half split evenly between forms A and B (and, with several preambles, between
        them). Items also carry `rule`, and `preamble` (the phrasing's index) if there are
        several."""
        specs = select(self.pool(), split, n, seed)
        out = []
        for spec, form, rule, phrasing in zip(specs, form_labels(specs), rule_labels(specs),
                                              self.preamble_labels(specs), strict=True):
            response = join(self.rule_forms(spec, rule, phrasing)["AB".index(form)])
            item = {
                "messages": [*self.messages(spec), {"role": "assistant", "content": response}],
                self.id_field: self.row(spec)[self.id_field],
                "form": form,
                "rule": rule,
            }
            out.append(item | ({"preamble": phrasing} if len(self.preambles) > 1 else {}))
        return out

    def preamble_labels(self, specs: list[Spec]) -> list[int]:
        """Phrasing per demonstration: within a family the k-th spec gets (k // 4) % P, so each
        phrasing takes turns with all four (rule, form) cells."""
        return [(k // 4) % len(self.preambles) for k in family_ranks(specs)]


TASK = RuleTask()
size, rows, demonstrations, probes = TASK.size, TASK.rows, TASK.demonstrations, TASK.probes
