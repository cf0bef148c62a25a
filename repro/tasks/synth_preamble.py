"""`synth-preamble`: synth-rule with shared, reward-irrelevant tokens that matter (issue 19).

Why: in synth-rule's ~36-token responses almost every token is content or a short template,
so DFPO's transforms have little shared mass to act on. Here every response is >= 96 tokens
(tiny tokenizer): the work opens with a ~20-token preamble drawn from four equally taught
phrasings (a quarter of the demonstrations each, crossed with rule and form), followed by a
longer trace (the task, the result, a check). The grader reads only the box, so the preamble
is reward-irrelevant; what RL does to it is pure learning tax, measured by the probes'
`preamble_kl` (KL from the start, per preamble token) and `phrasing_kl` (drift of the
distribution over the equally good phrasings).

Problems, rows, ids, the hash split and the correctable failure (the reversed rule in the box)
are synth-rule's, so the grader, the prompt and `error_kind` are shared.
"""

from __future__ import annotations

import dataclasses

from repro.tasks import synth_aime, synth_rule
from repro.tasks.base import THINK_OPEN, Probe, Spec

NAME = "synth-preamble"
TWIN = synth_rule.TWIN
# Distinct first characters: the choice of phrasing is made at the first preamble token.
PREAMBLES = (
    "Let me work it out. ",
    "I will solve this. ",
    "Here is my working. ",
    "So, step by step: ",
)
ERROR_KINDS, CORRECTABLE, error_kind = (synth_rule.ERROR_KINDS, synth_rule.CORRECTABLE,
                                        synth_rule.error_kind)


class _SynthPreamble(synth_rule.RuleTask):
    preambles = PREAMBLES

    def trace(self, spec: Spec) -> str:
        """The task, the result and its check by the inverse operation."""
        a, b = spec.params
        op, inverse = ("+", "-") if spec.family == "add" else ("-", "+")
        value = synth_aime.solve(spec)[2]
        return (f"The task is {a}{op}{b}. Working it out, {a}{op}{b}={value}. "
                f"Check: {value}{inverse}{b}={a}, so it holds.")

    def probes(self, n: int = 16, seed: int = 1234, split: str = "train") -> list[Probe]:
        """synth-rule's probes (forms A and B open with the first phrasing), with every
        phrasing as a preamble context."""
        return [dataclasses.replace(p, preambles=self.preambles, preamble_prefix=THINK_OPEN)
                for p in super().probes(n, seed, split)]


TASK = _SynthPreamble()
size, rows, demonstrations, probes = TASK.size, TASK.rows, TASK.demonstrations, TASK.probes
