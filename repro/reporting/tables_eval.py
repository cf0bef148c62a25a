"""Tables from the evaluations: the main comparison and the ablations (variants, group size).

Every avg@k cell is `bootstrap_ci` over a [seeds, problems] matrix and every Δ is the mean of
per-seed paired differences (same seed, same problems, same sampling seed), with a bootstrap over
seeds and problems (repro.reporting.scores.compare). Ablation rows keep only the seeds every
compared run has, so no row averages over seeds another row lacks.
"""

from __future__ import annotations

from repro.reporting.load import Aggregate, SeedScores
from repro.reporting.render import NOT_RUN, Table, fmt_ci, fmt_num, fmt_paired, per_model
from repro.reporting.scores import Estimate, compare, estimate, pool
from repro.reporting.study import INIT_ALGO, INIT_FRAC
from repro.reporting.tables_train import mechanism

NO_BASELINE = "no baseline"


def final_scores(agg: Aggregate, model: str, algo: str, bench: str, group_size: int) -> SeedScores:
    """Per-seed problem scores of (algo, G) at the study's final checkpoint."""
    return agg.seed_scores(model, algo, bench, group_size, agg.study.final_frac)


def ci_cell(est: Estimate | None) -> str:
    return NOT_RUN if est is None else fmt_ci(est.mean, est.lo, est.hi)


def delta_cell(scores: SeedScores, base: SeedScores) -> str:
    if not scores:
        return NOT_RUN
    if not base:
        return NO_BASELINE
    test = compare(scores, base)
    return "n/a" if test is None else fmt_paired(test.diff, test.lo, test.hi, test.p_value,
                                                 test.seeds)


def same_seeds(runs: dict[str, SeedScores]) -> dict[str, SeedScores]:
    """Each run restricted to the seeds that every run with data has."""
    live = [v for v in runs.values() if v]
    common = set.intersection(*(set(v) for v in live)) if live else set()
    return {k: {s: v[s] for s in sorted(common)} if v else v for k, v in runs.items()}


def _k_text(agg: Aggregate) -> str:
    return ", ".join(f"{bench} k = {'/'.join(map(str, sorted(agg.k[bench])))}"
                     for bench in agg.benchmarks()) or "no evaluations"


def main_table(agg: Aggregate) -> list[Table]:
    s = agg.study
    benches, models, g = agg.benchmarks(), agg.models(), s.main_group_size
    scores = {(m, a, b): final_scores(agg, m, a, b, g)
              for m in models for a in s.main_algos for b in benches}
    init = {(m, b): agg.seed_scores(m, INIT_ALGO, b, None, INIT_FRAC)
            for m in models for b in benches}

    def rows_for(model: str) -> list[list[str]]:
        rows = []
        if any(init[model, b] for b in benches):
            rows.append([INIT_ALGO, *(c for b in benches
                                      for c in (ci_cell(estimate(init[model, b])), "—", "—"))])
        for algo in s.main_algos:
            cells = []
            for b in benches:
                mine, base = scores[model, algo, b], scores[model, s.baseline, b]
                delta = "(baseline)" if algo == s.baseline else delta_cell(mine, base)
                start = delta_cell(mine, init[model, b]) if init[model, b] else NOT_RUN
                cells += [ci_cell(estimate(mine)), start, delta]
            rows.append([algo, *cells])
        return rows

    header = ["method", *(c for b in benches for c in (
        f"{b} avg@k (%)", f"{b} Δ vs {INIT_ALGO}", f"{b} Δ vs {s.baseline}"))]
    header, rows = per_model(models, header, rows_for)
    seeds = sorted({len(v) for v in scores.values() if v})
    init_text = f"{INIT_ALGO}: the SFT starting point before RL; " if any(init.values()) else ""
    notes = [
        f"avg@k in % ({_k_text(agg)}) at frac = {s.final_frac:g} of the training budget, runs at "
        f"G = {g}; {init_text}mean over seeds with its 95% bootstrap interval (seeds and problems "
        f"resampled). Seeds per cell: {', '.join(map(str, seeds)) or 'none'}.",
        f"Δ vs {INIT_ALGO} / vs {s.baseline}: mean of the per-seed paired differences in points "
        "(the start is evaluated at every run seed with that seed's sampling seed: common "
        "random numbers), [95% interval] from a bootstrap over seeds and problems, two-sided "
        "p, and the number of seeds paired.",
    ]
    no_base = [m for m in models if not any(scores[m, s.baseline, b] for b in benches)]
    if no_base:
        notes.append(f"The baseline {s.baseline} has no evaluation ({', '.join(no_base)}): "
                     "no Δ could be computed.")
    return [Table(f"Main results: avg@k ({s.experiment})", header, rows, notes)]


def ablation_tables(agg: Aggregate) -> list[Table]:
    return [_variant_table(agg), _group_table(agg)]


def _variant_table(agg: Aggregate) -> Table:
    s = agg.study
    benches = agg.benchmarks()
    algos = list(dict.fromkeys([s.baseline, s.proposed, *s.ablation_algos]))

    def rows_for(model: str) -> list[list[str]]:
        rows = []
        by_bench = {b: same_seeds({a: final_scores(agg, model, a, b, s.main_group_size)
                                   for a in algos}) for b in benches}
        for algo in algos:
            means = mechanism(agg.seed_curves(model, algo, s.main_group_size))
            cells = []
            for b in benches:
                mine = by_bench[b][algo]
                delta = ("(reference)" if algo == s.proposed
                         else delta_cell(mine, by_bench[b][s.proposed]))
                cells += [ci_cell(estimate(mine)), delta]
            rows.append([
                algo, *cells,
                *(fmt_num(means[m]) if means else NOT_RUN for m in ("asym", "residual_full")),
            ])
        return rows

    header = ["method", *(c for b in benches for c in (f"{b} avg@k (%)",
                                                       f"{b} Δ vs {s.proposed}")),
              "asym", "residual_full"]
    header, rows = per_model(agg.models(), header, rows_for)
    notes = [f"Runs at G = {s.main_group_size}, frac = {s.final_frac:g}; only the seeds every "
             f"row has; Δ vs {s.proposed}: paired by seed as in the main table (seeds shown); "
             "asym and residual_full: mean over steps (NaN steps ignored), then over seeds."]
    return Table(f"Ablations (a): variants of {s.proposed} ({s.experiment})", header, rows, notes)


def _group_table(agg: Aggregate) -> Table:
    s = agg.study
    others = [a for a in s.group_algos if a != s.baseline]

    def rows_for(model: str) -> list[list[str]]:
        rows = []
        for g in agg.group_sizes(model, s.group_algos):
            pooled = same_seeds({a: pooled_scores(agg, model, a, g) for a in s.group_algos})
            rows.append([
                str(g),
                *(ci_cell(estimate(pooled[a])) for a in s.group_algos),
                *(delta_cell(pooled[a], pooled[s.baseline]) for a in others),
            ])
        return rows

    header = ["G", *(f"{a} avg@k (%)" for a in s.group_algos),
              *(f"Δ ({a} - {s.baseline})" for a in others)]
    header, rows = per_model(agg.models(), header, rows_for)
    notes = [f"avg@k pooled over the problems of all benchmarks "
             f"({', '.join(agg.benchmarks()) or 'no evaluations'}) "
             f"and averaged over the seeds every algorithm of the row has, frac = "
             f"{s.final_frac:g}; Δ: paired by seed as in the main table (seeds shown)."]
    return Table(f"Ablations (b): group size ({s.experiment})", header, rows, notes)


def pooled_scores(agg: Aggregate, model: str, algo: str, group_size: int) -> SeedScores:
    """Per-seed scores of (algo, G) over every benchmark's problems at the final checkpoint."""
    return pool({b: final_scores(agg, model, algo, b, group_size) for b in agg.benchmarks()})
