"""Shared machinery of the synthetic tasks: split assignment, balanced selection, responses, probes.

A synthetic problem is a `Spec` (family + parameters). Its split is a hash of its `split_key`, so
train and eval are disjoint by construction and membership never depends on the seed; the seed
only picks which specs are returned and in what order.

Responses are lists of `Part`s tagged template (the same text in every demonstration, like
`</think>` or `The answer is `) or content (problem-specific, like the arithmetic). The two
equally correct forms of a problem share their parts up to a branch point, so the template
contexts before it are well defined for both.
"""

from __future__ import annotations

import hashlib
import random
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SPLITS = ("train", "eval")
EVAL_EVERY = 4  # one spec in four (by hash) is held out for eval


@dataclass(frozen=True)
class Spec:
    """One problem before rendering: a family, its parameters and a stable index."""

    family: str  # selection group, balanced across the returned rows
    params: tuple[object, ...]
    index: int  # position in the module's enumeration: a stable problem id
    split_key: str  # canonical identity; variants that would leak (a+b vs b+a) share it


def split_of(split_key: str) -> str:
    """The split a spec belongs to, fixed by its key alone."""
    digest = hashlib.sha256(f"dfpo-synth:{split_key}".encode()).digest()
    return "eval" if int.from_bytes(digest[:8], "big") % EVAL_EVERY == 0 else "train"


def split_pool(pool: Sequence[Spec], split: str) -> list[Spec]:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return [s for s in pool if split_of(s.split_key) == split]


def select(pool: Sequence[Spec], split: str, n: int, seed: int) -> list[Spec]:
    """`n` distinct specs of `split`, round-robin over families so small families are not drowned.

    Each family is shuffled by `seed`; every round visits the non-empty families in a freshly
    shuffled order. Raises when the split holds fewer than `n` specs.
    """
    members = split_pool(pool, split)
    if not 0 <= n <= len(members):
        raise ValueError(f"asked for {n} problems but split {split!r} holds {len(members)}")
    groups: dict[str, list[Spec]] = {}
    for spec in members:
        groups.setdefault(spec.family, []).append(spec)
    rng = random.Random(seed)
    queues = [groups[name] for name in sorted(groups)]
    for queue in queues:
        rng.shuffle(queue)
    out: list[Spec] = []
    while len(out) < n:
        live = [q for q in queues if q]
        rng.shuffle(live)
        out.extend(q.pop() for q in live[: n - len(out)])
    return out


def form_labels(specs: Sequence[Spec]) -> list[str]:
    """Form label ("A" or "B") per spec, so SFT sees both forms equally often and leaves
    P(A) ~ P(B) before RL: labels alternate within each family, and the families with an odd
    count start on alternate forms, so the totals differ by at most one (zero for even n)."""
    sizes = Counter(s.family for s in specs)
    odd = sorted(name for name, size in sizes.items() if size % 2)
    offsets = {name: odd.index(name) % 2 if name in odd else 0 for name in sizes}
    seen: dict[str, int] = {}
    labels = []
    for spec in specs:
        k = seen.get(spec.family, 0)
        seen[spec.family] = k + 1
        labels.append("AB"[(k + offsets[spec.family]) % 2])
    return labels


Part = tuple[str, bool]  # (text, is_template)


def template(text: str) -> Part:
    return (text, True)


def content(text: str) -> Part:
    return (text, False)


def join(parts: Sequence[Part]) -> str:
    return "".join(text for text, _ in parts)


THINK_OPEN = "<think>"  # what every math response starts with, before the work


def math_response(work: str, answer: Sequence[Part], dollars: bool = False) -> list[Part]:
    """The one math template: `<think>work</think>\\nThe answer is \\boxed{answer}.`
    (`dollars` wraps the box in `$...$`, an equally correct surface form)."""
    box_open, box_close = ("$\\boxed{", "}$.") if dollars else ("\\boxed{", "}.")
    return [
        template(THINK_OPEN), content(work), template("</think>"), template("\n"),
        template("The answer is "), template(box_open), *answer, template(box_close),
    ]


@dataclass(frozen=True)
class Probe:
    """A fixed prompt with two equally correct complete responses, for the probe metrics.

    `template_prefixes` are response prefixes, shared by both forms, after which the next token
    starts a template part: the contexts of `kl_template`. `log P(form_a) - log P(form_b)` is
    `logodds_drift`'s quantity; both forms continue `branch_prefix` differently.
    Tasks whose work opens with one of several equally taught phrasings (synth-preamble) list
    them in `preambles`, each following the response prefix `preamble_prefix`: the contexts of
    `preamble_kl` / `phrasing_kl`. Other tasks leave `preambles` empty.
    """

    problem_id: str
    messages: tuple[dict[str, str], ...]  # the chat prompt, without the assistant turn
    form_a: str
    form_b: str
    template_prefixes: tuple[str, ...]
    preambles: tuple[str, ...] = ()
    preamble_prefix: str = ""

    @property
    def branch_prefix(self) -> str:
        """The longest common prefix of the two forms: where they part."""
        n = 0
        while self.form_a[n] == self.form_b[n]:
            n += 1
        return self.form_a[:n]


def make_probe(
    problem_id: str, messages: Sequence[dict[str, str]], a: Sequence[Part], b: Sequence[Part]
) -> Probe:
    form_a, form_b = join(a), join(b)
    if form_a == form_b or form_b.startswith(form_a) or form_a.startswith(form_b):
        raise ValueError(f"{problem_id}: forms must differ before either ends")
    prefixes, prefix = [], ""
    for text, is_template in a:
        if is_template and form_b.startswith(prefix + text):
            prefixes.append(prefix)
        prefix += text
    return Probe(problem_id, tuple(dict(m) for m in messages), form_a, form_b, tuple(prefixes))


class Task(ABC):
    """One synthetic benchmark: a module renders specs; this class turns them into the public API
    (`rows`, `demonstrations`, `probes`, `size`), identical for every task."""

    id_field: str  # the hub field that identifies a problem: "problem_idx" or "question_id"

    @abstractmethod
    def pool(self) -> Sequence[Spec]:
        """Every problem of the task, both splits, in a fixed order."""

    @abstractmethod
    def row(self, spec: Spec) -> dict[str, Any]:
        """The problem as a row of its real twin's hub schema."""

    @abstractmethod
    def messages(self, spec: Spec) -> list[dict[str, str]]:
        """The chat prompt the real benchmark would use for this problem."""

    @abstractmethod
    def forms(self, spec: Spec) -> tuple[list[Part], list[Part]]:
        """Two equally correct responses (forms A and B), sharing parts up to a branch point."""

    def size(self, split: str) -> int:
        """How many problems `split` holds: the largest `n` that `rows` accepts."""
        return len(split_pool(self.pool(), split))

    def rows(self, split: str, n: int, seed: int) -> list[dict[str, Any]]:
        """`n` problems of `split` as hub rows, deterministic in `seed`."""
        return [self.row(spec) for spec in select(self.pool(), split, n, seed)]

    def demonstrations(self, split: str, n: int, seed: int) -> list[dict[str, Any]]:
        """SFT chats for the problems of `rows(split, n, seed)` (same order), half form A, half B.

        Each item: `messages` (prompt + assistant response), the problem's id field, `form`.
        """
        specs = select(self.pool(), split, n, seed)
        out = []
        for spec, label in zip(specs, form_labels(specs), strict=True):
            response = join(self.forms(spec)["AB".index(label)])
            out.append({
                "messages": [*self.messages(spec), {"role": "assistant", "content": response}],
                self.id_field: self.row(spec)[self.id_field],
                "form": label,
            })
        return out

    def probes(self, n: int = 16, seed: int = 1234, split: str = "train") -> list[Probe]:
        """A fixed probe set (training problems by default, where RL pushes directly)."""
        return [
            make_probe(str(self.row(spec)[self.id_field]), self.messages(spec), *self.forms(spec))
            for spec in select(self.pool(), split, n, seed)
        ]
