"""`synth-preamble` (issue 19, item 3): synth-rule's problems with a ~20-token preamble of four
equally taught phrasings and >= 96-token responses; its probes' preamble_kl / phrasing_kl
(checked against a one-context-at-a-time computation); the error classifier of the start's
correctable-error share. Lengths are counted with the tiny tokenizer."""

from __future__ import annotations

import math
import re
from collections import Counter

import pytest
import torch

from repro.benchmarks import get_benchmark, row_to_problem
from repro.graders.math import MathGrader
from repro.models import TinyModelConfig, build_tiny
from repro.models.tokenizer import build_tokenizer
from repro.tasks import (
    synth_preamble,
    synth_rule,
    synthetic_demonstrations,
    synthetic_probes,
    synthetic_rows,
    synthetic_size,
)
from repro.tasks.base import select
from repro.training.probes import PreambleSet, preamble_drift, prompt_ids

NAME = "synth-preamble"
TRACE = re.compile(r"<think>(.*?)The task is (\d+)([+-])(\d+)\. Working it out, "
                   r"\2\3\4=(\d+)\. Check: \5([+-])\4=\2, so it holds\.</think>\n")


@pytest.fixture(scope="module")
def grader():
    g = MathGrader()
    yield g
    g.close()


TOKENIZER = build_tokenizer()


def _tokens(text: str) -> int:
    return len(TOKENIZER(text, add_special_tokens=False).input_ids)


def test_rows_are_synth_rule_rows_and_generation_is_deterministic() -> None:
    for split in ("train", "eval"):
        assert synthetic_size(NAME, split) == synthetic_size("synth-rule", split)
        assert synthetic_rows(NAME, split, 50, 3) == synthetic_rows("synth-rule", split, 50, 3)
    first = synthetic_demonstrations(NAME, "train", 64, 7)
    assert first == synthetic_demonstrations(NAME, "train", 64, 7)
    assert first != synthetic_demonstrations(NAME, "train", 64, 8)
    assert synthetic_probes(NAME) == synthetic_probes(NAME)


def test_preambles_are_about_twenty_tokens_and_responses_at_least_96() -> None:
    phrasings = synth_preamble.PREAMBLES
    assert len(set(phrasings)) >= 3 and len({p[0] for p in phrasings}) == len(phrasings)
    assert all(16 <= _tokens(p) <= 24 for p in phrasings)
    demos = synthetic_demonstrations(NAME, "train", synthetic_size(NAME, "train"), 0)
    lengths = [_tokens(d["messages"][-1]["content"]) for d in demos]
    assert min(lengths) >= 96, min(lengths)
    assert max(lengths) < 160  # fits a training budget of 160 new tokens


def test_demonstrations_cross_phrasing_rule_and_form_evenly(grader) -> None:
    n = 640
    rows = synthetic_rows(NAME, "train", n, 5)
    demos = synthetic_demonstrations(NAME, "train", n, 5)
    spec = get_benchmark(NAME)
    pairs, expected = [], []
    for row, demo in zip(rows, demos, strict=True):
        response = demo["messages"][-1]["content"]
        m = TRACE.match(response)
        assert m, response
        assert m[1] == synth_preamble.PREAMBLES[demo["preamble"]]
        a, op, b, value = int(m[2]), m[3], int(m[4]), int(m[5])
        assert value == (a + b if op == "+" else a - b) == row["answer"]
        boxed = re.search(r"\\boxed\{(\d+)\}", response)[1]
        assert boxed == (str(value) if demo["rule"] == "correct" else str(int(str(value)[::-1])))
        pairs.append((row_to_problem(spec, row, allow_pickle=True), response))
        expected.append(demo["rule"] == "correct" or boxed == str(value))
    counts = Counter(d["preamble"] for d in demos)
    assert sorted(counts) == [0, 1, 2, 3] and max(counts.values()) - min(counts.values()) <= 16
    assert set(Counter((d["rule"], d["form"]) for d in demos).values()) == {n // 4}
    assert [g.correct for g in grader.grade_many(pairs)] == expected


def test_grader_accepts_every_phrasing_in_both_forms(grader) -> None:
    spec = get_benchmark(NAME)
    task = synth_preamble.TASK
    pairs = []
    for problem_spec in select(task.pool(), "eval", 8, 1):
        problem = row_to_problem(spec, task.row(problem_spec), allow_pickle=True)
        for phrasing in range(len(synth_preamble.PREAMBLES)):
            for form in task.rule_forms(problem_spec, "correct", phrasing):
                pairs.append((problem, "".join(text for text, _ in form)))
    assert len({text for _, text in pairs}) == 8 * 4 * 2
    assert all(g.correct for g in grader.grade_many(pairs))


def test_probes_carry_every_phrasing_after_the_think_tag() -> None:
    probes = synthetic_probes(NAME, n=4)
    assert all(p.preambles == synth_preamble.PREAMBLES and p.preamble_prefix == "<think>"
               for p in probes)
    assert all(p.form_a.startswith("<think>" + synth_preamble.PREAMBLES[0]) for p in probes)
    assert all(not p.preambles for p in synthetic_probes("synth-rule", n=4))


@pytest.mark.parametrize(("extracted", "kind"), [
    ("59", "reversed"), (" 59 ", "reversed"), ("94", "arithmetic"), ("3/4", "other"),
    ("95", "other"), (None, "no_answer"),
])
def test_error_kind_of_a_wrong_answer_to_95(extracted, kind) -> None:
    assert synth_rule.error_kind(95, extracted) == kind
    assert kind == "no_answer" or kind in synth_rule.ERROR_KINDS


def test_error_kind_reads_the_graders_extraction(grader) -> None:
    """A reversed-rule demonstration, graded, is classified correctable; palindromes excepted."""
    spec = get_benchmark(NAME)
    rows = synthetic_rows(NAME, "train", 64, 2)
    demos = synthetic_demonstrations(NAME, "train", 64, 2)
    wrong = [(row, d) for row, d in zip(rows, demos, strict=True) if d["rule"] == "reversed"
             and str(row["answer"]) != str(row["answer"])[::-1]]
    grades = grader.grade_many([(row_to_problem(spec, row, allow_pickle=True),
                                 d["messages"][-1]["content"]) for row, d in wrong])
    assert wrong and not any(g.correct for g in grades)
    kinds = {synth_preamble.error_kind(row["answer"], g.extracted)
             for (row, _), g in zip(wrong, grades, strict=True)}
    assert kinds == {"reversed"} and set(synth_preamble.CORRECTABLE) == {"reversed"}


def _by_hand(model, tok, probe) -> tuple[list[torch.Tensor], list[float]]:
    """Per phrasing: the next-token log-distributions at each preamble token, each from its own
    unpadded context, and the phrasing's summed log-prob."""
    prompt = prompt_ids(tok, probe)
    head = tok(probe.preamble_prefix, add_special_tokens=False).input_ids
    dists, totals = [], []
    for phrasing in probe.preambles:
        body = tok(phrasing, add_special_tokens=False).input_ids
        total = 0.0
        for j, token in enumerate(body):
            ctx = torch.tensor([prompt + head + body[:j]])
            with torch.no_grad():
                logp = torch.log_softmax(model(input_ids=ctx).logits[0, -1].double(), -1)
            dists.append(logp)
            total += float(logp[token])
        totals.append(total)
    return dists, totals


def test_preamble_drift_is_zero_at_the_start_and_matches_a_hand_computation() -> None:
    model, tok = build_tiny(TinyModelConfig(seed=3))
    probes = synthetic_probes(NAME, n=2)
    preambles = PreambleSet(tok, probes)
    start = preambles.measure(model)
    assert preamble_drift(preambles.measure(model), start) == {"preamble_kl": 0.0,
                                                                "phrasing_kl": 0.0}
    assert all(math.isnan(v) for v in preamble_drift(None, start).values())
    before = [_by_hand(model, tok, p) for p in probes]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    after = [_by_hand(model, tok, p) for p in probes]
    kl_tokens, kl_phrasing = [], []
    for (d0, t0), (d1, t1) in zip(before, after, strict=True):
        kl_tokens += [float((a.exp() * (a - b)).sum()) for a, b in zip(d0, d1, strict=True)]
        q0, q1 = (torch.log_softmax(torch.tensor(t, dtype=torch.float64), 0) for t in (t0, t1))
        kl_phrasing.append(float((q0.exp() * (q0 - q1)).sum()))
    drift = preamble_drift(preambles.measure(model), start)
    assert drift["preamble_kl"] > 0 and drift["phrasing_kl"] > 0
    assert drift["preamble_kl"] == pytest.approx(sum(kl_tokens) / len(kl_tokens), rel=1e-5)
    assert drift["phrasing_kl"] == pytest.approx(sum(kl_phrasing) / len(kl_phrasing), rel=1e-4)
