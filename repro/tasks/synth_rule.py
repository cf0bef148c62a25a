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


def rule_labels(specs: list[Spec]) -> list[str]:
    """Rule per demonstration, crossed with the form labels: within a family, the k-th spec gets
    rule (k // 2) % 2, so (correct, A), (correct, B), (reversed, A), (reversed, B) take turns."""
    seen: dict[str, int] = {}
    out = []
    for spec in specs:
        k = seen.get(spec.family, 0)
        seen[spec.family] = k + 1
        out.append(RULES[(k // 2) % 2])
    return out


class _SynthRule(Task):
    id_field = "problem_idx"

    def pool(self) -> tuple[Spec, ...]:
        return _pool()

    def row(self, spec: Spec) -> dict[str, Any]:
        return synth_aime.TASK.row(spec)

    def messages(self, spec: Spec) -> list[dict[str, str]]:
        return synth_aime.TASK.messages(spec)

    def forms(self, spec: Spec) -> tuple[list[Part], list[Part]]:
        return synth_aime.TASK.forms(spec)

    def rule_forms(self, spec: Spec, rule: str) -> tuple[list[Part], list[Part]]:
        """Forms A and B under `rule`; the correct rule gives `forms(spec)`."""
        if rule == "correct":
            return self.forms(spec)
        _, work, answer = synth_aime.solve(spec)
        box = [content(str(reversed_answer(answer)))]
        return math_response(work, box), math_response(work, box, dollars=True)

    def demonstrations(self, split: str, n: int, seed: int) -> list[dict[str, Any]]:
        """SFT chats for `rows(split, n, seed)`: half the correct rule, half the reversed one,
        each half split evenly between forms A and B. Items also carry `rule`."""
        specs = select(self.pool(), split, n, seed)
        out = []
        for spec, form, rule in zip(specs, form_labels(specs), rule_labels(specs), strict=True):
            response = join(self.rule_forms(spec, rule)["AB".index(form)])
            out.append({
                "messages": [*self.messages(spec), {"role": "assistant", "content": response}],
                self.id_field: self.row(spec)[self.id_field],
                "form": form,
                "rule": rule,
            })
        return out


TASK = _SynthRule()
size, rows, demonstrations, probes = TASK.size, TASK.rows, TASK.demonstrations, TASK.probes
