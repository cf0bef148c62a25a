"""The data tables of docs/results.md and the README, each built from committed aggregates
through the one verdict engine (repro.reporting.verdict and its metrics and rules): what
`repro report` writes between a page's `<!-- repro report: NAME -->` fences. A section names
its study, the aggregate folders it reads and the function that renders it; the prose around
the fences is the page's."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from repro.reporting.figures_data import registered, subset_arm
from repro.reporting.load import Aggregate, load_aggregate
from repro.reporting.render import Table, to_markdown
from repro.reporting.verdict import secondary_tables, verdict_tables
from repro.reporting.verdict_metrics import Part, Scope, curves, pooled_scope, score_pair
from repro.reporting.verdict_rules import paired
from repro.reporting.verdict_spec import START, spec_for


class Store:
    """What one `repro report` run reads: each aggregate loaded once, its verdict tables
    computed once, whichever sections use them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._aggregates: dict[str, Aggregate] = {}
        self._verdicts: dict[tuple[str, str | None], list[Table]] = {}

    def aggregate(self, folder: str) -> Aggregate:
        if folder not in self._aggregates:
            self._aggregates[folder] = load_aggregate(self.root / folder)
        return self._aggregates[folder]

    def verdicts(self, folder: str, secondary: str | None = None) -> list[Table]:
        """The engine's tables under the registered estimator, or its `secondary` reading."""
        if (folder, secondary) not in self._verdicts:
            agg = self.aggregate(folder)
            self._verdicts[folder, secondary] = (verdict_tables(agg) if secondary is None
                                                 else secondary_tables(agg, secondary))
        return self._verdicts[folder, secondary]


Build = Callable[[Store], str]


@dataclass(frozen=True)
class Section:
    study: str  # as the page names it, for messages
    aggregates: tuple[str, ...]  # the folders it reads, relative to the repository root
    build: Build


def on(study: str, folder: str, build: Callable[[Aggregate, Store], str]) -> Section:
    """A section that reads one aggregate."""
    return Section(study, (folder,), lambda store: build(store.aggregate(folder), store))


def engine_table(folder: str, index: int) -> Callable[[Aggregate, Store], str]:
    """The verdict engine's table number `index` (0: the verdicts, then the descriptive tables
    its predictions file adds), as `repro tables` writes it into verdict.md."""
    return lambda agg, store: to_markdown(store.verdicts(folder)[index])


def paired_on(agg: Aggregate, metric: str, a: str, b: str) -> dict[str, float] | None:
    """Paired A - B on `metric` ("final" accuracy or "auc") over every unit of the aggregate,
    by the verdict engine's paired test with the registered estimator (units: seeds for one
    model under a seed-unit predictions file, else model/seed); A or B may be START."""
    models, spec = tuple(agg.models()), spec_for(agg.study.experiment)
    by_seed = spec.unit == "seed" and len(models) == 1
    scope = registered(agg, spec, Scope((Part(models),), by_seed) if by_seed
                       else pooled_scope(agg))
    return paired(*score_pair(agg, scope, metric, a, b), scope.clusters)


def comparisons(metric: str, rows: tuple[tuple[str, str, str], ...], head: str
                ) -> Callable[[Aggregate, Store], str]:
    """(label, A, B) rows of paired A - B on `metric` (paired_on)."""
    def build(agg: Aggregate, store: Store) -> str:
        by_seed = spec_for(agg.study.experiment).unit == "seed" and len(agg.models()) == 1
        cells = []
        for label, a, b in rows:
            stats = paired_on(agg, metric, a, b)
            if stats is None:
                raise ValueError(f"no paired units for {a} - {b} ({label})")
            cells.append([f"{label} (`{a}` - `{b}`)",
                          f"{stats['diff']:+.1f} [{stats['lo']:+.1f}, {stats['hi']:+.1f}], "
                          f"{stats['units']}", _p(stats["p"])])
        return _table([f"comparison ({head}, A - B)",
                       f"Δ, points [95% CI], {'seeds' if by_seed else 'units'}",
                       "p (two-sided)"], cells)
    return build


def _p(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"{p:.3f}" if p < 0.01 else f"{p:.2f}"


def nested_reading(folder: str, keys: tuple[tuple[str, ...], ...], header: list[str],
                   units: bool) -> Callable[[Aggregate, Store], str]:
    """The rows `keys` ((id,) or (block, id)) of the engine's registered (flat) verdict table
    beside its dated nested reading: each reading's interval (with its units if `units`) and
    the nested verdict."""
    shown = CI + (r"(?: points)?, (\d+) units" if units else "")

    def interval(numbers: str, key: tuple[str, ...]) -> str:
        found = re.search(shown, numbers)
        if found is None:
            raise ValueError(f"{' '.join(key)}: no interval in the engine's numbers {numbers!r}")
        text = f"{found[1]} [{found[2]}, {found[3]}]"
        return f"{text}, {found[4]} units" if units else text

    def build(agg: Aggregate, store: Store) -> str:
        flat, nested = store.verdicts(folder)[0], store.verdicts(folder, "nested")[0]
        width = len(flat.header) - 3  # the block column, if any, and the id
        engine = {tuple(f[:width]): (f[-2], n[-2], n[-1])
                  for f, n in zip(flat.rows, nested.rows, strict=True)}
        rows = []
        for key in keys:
            if key not in engine:
                raise ValueError(f"the verdict table has no row {' '.join(key)}")
            flat_numbers, nested_numbers, verdict = engine[key]
            rows.append([*key, interval(flat_numbers, key), interval(nested_numbers, key),
                         verdict])
        return _table(header, rows)
    return build


def source_regime(agg: Aggregate, store: Store) -> str:
    """An off-policy study's dose per source (studies 3 and 4): the spread of s under both
    readings and the proposed arm's weight shift, the baseline's (the fair GSPO's) clipped share
    and mean log-ratio; means over every logged step of every unit."""
    s, spec = agg.study, spec_for(agg.study.experiment)
    arm = {name: next(a for sub in spec.subsets if (a := subset_arm(sub, label)))
           for name, label in (("proposed", s.proposed), ("baseline", s.baseline))}
    rows = []
    for sub in spec.subsets:
        scope = Scope((Part(tuple(m for m in agg.models() if sub.holds_model(m)), sub.label),),
                      by_seed=False)

        def mean(which: str, column: str, scope: Scope = scope) -> float:
            values = list(curves(agg, scope, arm[which], column).values())
            return float(np.nanmean(np.concatenate(values))) if values else float("nan")

        rows.append([sub.name, f"{mean('proposed', 's_spread_product'):.1%}",
                     f"{mean('proposed', 's_spread'):.2%}", f"{mean('proposed', 'w_shift'):.1%}",
                     f"{mean('baseline', 'clip_frac'):.1%}",
                     f"{mean('baseline', 'log_ratio_mean'):.1e}"])
    return _table(["source (dose)", "spread of s, product", "spread of s, mean",
                   f"{arm['proposed']}'s w_shift", f"{arm['baseline']}'s clipped share",
                   f"{arm['baseline']}'s mean log-ratio"], rows)


def fair_clip_section(study: str, preset: str, folder: str) -> Section:
    """A pilot's GSPO clipped share per source and candidate clip, and the clip its registered
    rule chose (repro fair-clip on the pilot `preset`'s committed aggregate `folder`)."""

    def build(agg: Aggregate, store: Store) -> str:
        from repro.plan import load_config
        from repro.reporting.fair_clip import fair_clips, markdown

        root = store.root
        config = load_config(root / "config" / "config.yaml",
                             [root / "config" / "presets" / f"{preset}.yaml"])
        return markdown(fair_clips(config, root / folder))

    return on(study, folder, build)


def _table(header: list[str], rows: list[list[str]]) -> str:
    """A bare Markdown table (no title, no notes): the page's prose introduces it."""
    lines = to_markdown(Table("", header, rows, [])).splitlines()
    return "\n".join(lines[2:])


TINY_FINDINGS = (
    ("RL learns and generalises: GRPO - start", "grpo", START),
    ("DFPO Min-Replace - GSPO", "dfpo_min", "gspo"),
    ("DFPO Orth-Proj - GSPO", "dfpo_orth", "gspo"),
    ("GRPO - GSPO", "grpo", "gspo"),
    ("GRPO-fix - GSPO", "grpo_fix", "gspo"),
    ("stop-gradient matters: Min-Replace - no stop-gradient", "dfpo_min", "dfpo_min_nosg"),
)
EXPLORATORY_2 = (
    ("Orth-Proj - identity", "dfpo_orth_prod", "dfpo_none_prod"),
    ("Orth-Proj - Min-Replace", "dfpo_orth_prod", "dfpo_min_prod"),
    ("Min-Replace, mean - product reading", "dfpo_min", "dfpo_min_prod"),
)

TINY, STUDY_1, STUDY_2, PILOT, STUDY_3, PILOT_4, STUDY_4 = (
    "results/aggregate", "results/tiny-study/aggregate", "results/mechanism-study/aggregate",
    "results/offpolicy-pilot/aggregate", "results/offpolicy-study/aggregate",
    "results/offpolicy4-pilot/aggregate", "results/offpolicy4-study/aggregate")

CI = r"([+-]?\d+(?:\.\d+)?) \[([+-]?\d+(?:\.\d+)?), ([+-]?\d+(?:\.\d+)?)\]"

# docs/results.md's sections, in page order (repro.reporting.report adds the README's)
RESULTS: dict[str, Section] = {
    "tiny-default-findings": on("tiny default", TINY,
                                comparisons("final", TINY_FINDINGS, "final avg@k")),
    "study-1-verdicts": on("study 1", STUDY_1, engine_table(STUDY_1, 0)),
    "study-2-verdicts": on("study 2", STUDY_2, engine_table(STUDY_2, 0)),
    "study-2-exploratory": on("study 2", STUDY_2, comparisons("auc", EXPLORATORY_2, "AUC")),
    "study-2-regime": on("study 2", STUDY_2, engine_table(STUDY_2, 1)),
    "study-2-nested": on("study 2", STUDY_2, nested_reading(
        STUDY_2, tuple((i,) for i in ("G2", "P1", "P2", "P3", "P7", "P8", "P9")),
        ["id", "registered (flat)", "nested, stage-2 starts as clusters", "verdict, nested"],
        units=False)),
    "study-3-fair-clip": fair_clip_section("study 3's pilot", "offpolicy-pilot", PILOT),
    "study-3-verdicts": on("study 3", STUDY_3, engine_table(STUDY_3, 0)),
    "study-3-regime": on("study 3", STUDY_3, source_regime),
    "study-3-nested": on("study 3", STUDY_3, nested_reading(
        STUDY_3, (("reuse", "G2"), ("reuse", "Q1"), ("reuse", "Q3"), ("stale", "Q1"),
                  ("bf16", "Q1")),
        ["source", "id", "registered (flat)", "nested", "verdict, nested"], units=True)),
    "study-4-fair-clip": fair_clip_section("study 4's pilot", "offpolicy4-pilot", PILOT_4),
    "study-4-verdicts": on("study 4", STUDY_4, engine_table(STUDY_4, 0)),
    "study-4-regime": on("study 4", STUDY_4, source_regime),
}
