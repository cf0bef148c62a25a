"""Outcomes without a ceiling (issue 19, item 5; building blocks for docs/preregistration-2.md):
the area under held-out accuracy over the training budget (primary), final accuracy
(secondary), both paired per seed against the study's baseline, and the start's
correctable-error share (how much of the start's failure RL could fix at all).

AUC: per (seed, problem), the trapezoid rule over the budget fractions f_1 < ... < f_m at which
the compared runs were all evaluated (RL checkpoints, frac > 0: the start is not a point),
divided by the span f_m - f_1. It is a mean accuracy in [0, 1] (a constant curve's AUC is the
constant) that rewards learning early as well as ending high, so two methods that both reach a
ceiling still differ. Being linear in the problem scores, per-problem AUCs go through the same
paired seed-and-problem bootstrap as avg@k (`repro.reporting.scores.compare`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from repro.reporting.load import Aggregate, SeedScores
from repro.reporting.render import NOT_RUN, Table, per_model
from repro.reporting.scores import estimate
from repro.reporting.study import INIT_ALGO, INIT_FRAC
from repro.reporting.tables_eval import ci_cell, delta_cell, final_scores, same_seeds
from repro.tasks import SYNTHETIC


def budget_auc(fracs: Sequence[float], values: Sequence[float]) -> float:
    """Trapezoid area under `values` over increasing `fracs`, normalised by the span."""
    if len(fracs) < 2 or len(fracs) != len(values) or list(fracs) != sorted(set(fracs)):
        raise ValueError(f"need >= 2 increasing fractions with one value each, got {fracs}")
    steps = zip(fracs, fracs[1:], values, values[1:], strict=False)  # consecutive pairs
    area = sum((b - a) * (u + v) / 2 for a, b, u, v in steps)
    return area / (fracs[-1] - fracs[0])


def auc_scores(by_frac: Mapping[float, SeedScores], fracs: Sequence[float]) -> SeedScores:
    """seed -> problem -> AUC over `fracs`, for the seeds and problems every fraction has."""
    if len(fracs) < 2 or any(not by_frac.get(f) for f in fracs):
        return {}
    out: SeedScores = {}
    for seed in sorted(set.intersection(*(set(by_frac[f]) for f in fracs))):
        problems = set.intersection(*(set(by_frac[f][seed]) for f in fracs))
        out[seed] = {p: budget_auc(fracs, [by_frac[f][seed][p] for f in fracs])
                     for p in sorted(problems)}
    return out


def run_fractions(agg: Aggregate, model: str, algo: str, bench: str,
                  group_size: int) -> dict[float, SeedScores]:
    """frac -> per-seed problem scores of the RL checkpoints of (model, algo, G) on `bench`."""
    return {key[3]: scores for key, scores in agg.scores.items()
            if key[:3] == (model, algo, group_size) and key[4] == bench and key[3] > INIT_FRAC}


def common_fractions(runs: Mapping[str, Mapping[float, SeedScores]]) -> list[float]:
    """The fractions at which every run with any evaluation was evaluated."""
    live = [set(r) for r in runs.values() if r]
    return sorted(set.intersection(*live)) if live else []


def budget_table(agg: Aggregate) -> list[Table]:
    return [_auc_table(agg), _error_table(agg)]


def _auc_table(agg: Aggregate) -> Table:
    s = agg.study
    benches, g = agg.benchmarks(), s.main_group_size
    grids: dict[tuple[str, str], list[float]] = {}

    def rows_for(model: str) -> list[list[str]]:
        cells: dict[str, list[str]] = {a: [] for a in s.main_algos}
        for b in benches:
            runs = {a: run_fractions(agg, model, a, b, g) for a in s.main_algos}
            fracs = grids[model, b] = common_fractions(runs)
            auc = same_seeds({a: auc_scores(r, fracs) for a, r in runs.items()})
            final = same_seeds({a: final_scores(agg, model, a, b, g) for a in s.main_algos})
            for a in s.main_algos:
                for scores in (auc, final):
                    delta = ("(baseline)" if a == s.baseline
                             else delta_cell(scores[a], scores[s.baseline]))
                    cells[a] += [ci_cell(estimate(scores[a])), delta]
        return [[a, *cells[a]] for a in s.main_algos if any(c != NOT_RUN for c in cells[a])]

    header = ["method", *(c for b in benches for c in (
        f"{b} AUC (%)", f"{b} Δ AUC vs {s.baseline}", f"{b} final (%)",
        f"{b} Δ final vs {s.baseline}"))]
    header, rows = per_model(agg.models(), header, rows_for)
    grid = "; ".join(f"{m}/{b}: {', '.join(f'{f:g}' for f in fr) or 'none'}"
                     for (m, b), fr in sorted(grids.items()))
    notes = [
        "Primary outcome: AUC, the area under held-out avg@k over the budget fractions every "
        "compared run was evaluated at (trapezoid rule, divided by the span of the fractions, "
        f"so in % like avg@k; fractions: {grid or 'none'}); runs at G = {g}. Secondary: avg@k "
        f"at frac = {s.final_frac:g}. Cells: mean over seeds and problems [95% bootstrap].",
        f"Δ vs {s.baseline}: mean of per-seed paired differences [95% interval, bootstrap over "
        "seeds and problems] (p, seeds paired); only the seeds every row has. A run with fewer "
        "than two evaluated fractions has no AUC.",
    ]
    return Table(f"Budget outcomes: AUC over the budget and final accuracy ({s.experiment})",
                 header, rows, notes)


@dataclass(frozen=True)
class ErrorShares:
    """The start's wrong samples on one benchmark, by kind."""

    errors: int  # wrong samples, all seeds
    kinds: dict[str, float]  # share of each kind, pooled over seeds
    correctable: float  # share of a correctable kind, pooled over seeds (NaN without errors)
    per_seed: list[float]  # the same share per seed (seeds with errors)


def error_shares(counts: Mapping[int, Counter[str]], correctable: Sequence[str]) -> ErrorShares:
    """Shares from seed -> Counter of the start's error kinds; `correctable`: the kinds RL can
    fix (the task module's CORRECTABLE)."""
    pooled: Counter[str] = sum(counts.values(), Counter())
    errors = sum(pooled.values())

    def share(c: Counter[str]) -> float:
        total = sum(c.values())
        return sum(c[k] for k in correctable) / total if total else math.nan

    return ErrorShares(errors, {k: n / errors for k, n in sorted(pooled.items())},
                       share(pooled), [share(c) for _, c in sorted(counts.items()) if c])


def _error_table(agg: Aggregate) -> Table:
    several = len(agg.models()) > 1
    rows = []
    for (model, bench), counts in sorted(agg.start_errors.items()):
        e = error_shares(counts, SYNTHETIC[bench].CORRECTABLE)
        spread = (f"{100 * min(e.per_seed):.1f}-{100 * max(e.per_seed):.1f}" if e.per_seed
                  else "n/a")
        kinds = ", ".join(f"{k} {100 * v:.1f}%" for k, v in e.kinds.items()) or "n/a"
        rows.append([*([model] if several else []), bench, str(len(counts)), str(e.errors),
                     "n/a" if math.isnan(e.correctable) else f"{100 * e.correctable:.1f}",
                     spread, kinds])
    header = (["model"] if several else []) + [
        "benchmark", "seeds", "wrong samples", "correctable (%)", "per seed (%)", "kinds"]
    notes = [f"The start ({INIT_ALGO}, frac = {INIT_FRAC:g}) on the held-out problems: the share "
             "of its wrong samples whose error is of a kind RL can correct (the task's CORRECTABLE "
             "kinds; synth-rule and synth-preamble: the reversed rule, vs arithmetic slips, other "
             "boxes and missing answers), pooled over seeds, and the range of the per-seed shares. "
             "Only benchmarks whose task classifies errors (`error_kind`) are listed."]
    return Table(f"The start's correctable-error share ({agg.study.experiment})", header, rows,
                 notes)
