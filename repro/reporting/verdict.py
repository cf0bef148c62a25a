"""The verdict table: each pre-registered prediction with its numbers and "holds", "fails" or
"inconclusive", decided by the rules its study's predictions file states
(repro/reporting/predictions/*.yaml, one per docs/preregistration*.md; schema:
docs/predictions.md). One engine for every study: the file names the arms, metric, test and
thresholds; this module reads the aggregate, applies the gates, Holm-adjusts the families and
prints the table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from repro.evaluation.stats import holm
from repro.reporting import verdict_rules as rules
from repro.reporting.load import Aggregate
from repro.reporting.render import Table
from repro.reporting.tables_train import regime_table
from repro.reporting.verdict_metrics import (
    Part,
    Scope,
    Unit,
    curves,
    score_pair,
    unit_values,
)
from repro.reporting.verdict_spec import Row, Spec, SpecError, metric_parts, spec_for

HOLDS, FAILS, INCONCLUSIVE = "holds", "fails", "inconclusive"
START_COLUMN = "run_model"  # the runs column of the start (model) an RL run began from
# descriptive tables a predictions file may add after its verdicts ("reported without a verdict")
EXTRA_TABLES: dict[str, Callable[[Aggregate], Table]] = {"regime": regime_table}


@dataclass(frozen=True)
class Verdict:
    block: str | None  # the model or subset of the row's block; None with one block
    pid: str
    claim: str
    numbers: str
    verdict: str


@dataclass(frozen=True)
class Tested:
    """A row's statistics before its verdict: `stats` None when there is nothing to compare."""

    row: Row
    stats: dict[str, Any] | None
    numbers: Callable[[dict[str, Any]], str]  # the numbers text, given the final statistics
    subs: tuple[Tested, ...] = ()  # a composite's parts


def bind(agg: Aggregate, spec: Spec, arm: str) -> str | None:
    """The run label of an arm: a study setting (proposed, baseline), a role (the first
    ablation whose label ends so; None without one), or the label itself."""
    if arm in ("proposed", "baseline"):
        return getattr(agg.study, arm)
    role = spec.roles.get(arm)
    if role is None:
        return arm
    return next((a for a in agg.study.ablation_algos if a.endswith(role.ablation_ending)), None)


def check_registered(agg: Aggregate, spec: Spec) -> None:
    """An aggregate of the experiment the file was registered for must have been run with the
    settings and arms it registers."""
    if agg.study.experiment != spec.registered_for:
        return
    for key, value in spec.settings.items():
        got = getattr(agg.study, key)
        if got != (tuple(value) if isinstance(value, list) else value):
            raise SpecError(f"{spec.path}: settings.{key}: registered {value!r}, but the "
                            f"{agg.study.experiment} aggregate has {got!r}")
    for name, role in spec.roles.items():
        if bind(agg, spec, name) != role.registered:
            raise SpecError(f"{spec.path}: roles.{name}: registered {role.registered!r}, but the "
                            f"{agg.study.experiment} aggregate binds {bind(agg, spec, name)!r}")


def _decide(row: Row, stats: Mapping[str, Any] | None) -> str:
    if stats is None:
        return INCONCLUSIVE
    if row.holds.met(stats):
        return HOLDS
    return FAILS if row.fails.otherwise or row.fails.met(stats) else INCONCLUSIVE


def _column(expr: str) -> str:
    head, inner = metric_parts(expr)
    return head if inner is None else _column(inner)


def _test(agg: Aggregate, spec: Spec, scope: Scope, row: Row, expr: str) -> Tested:
    """Run one row's test on one metric in one scope."""
    a = bind(agg, spec, row.A)
    bs = [bind(agg, spec, b) for b in ((row.B,) if isinstance(row.B, str) else row.B or ())]
    b = bs[0] if bs else None
    no_data = Tested(row, None, lambda s: spec.no_data)
    if a is None or None in bs:
        return no_data
    if row.test == "paired":
        pair = score_pair(agg, scope, expr, a, b)
        stats = rules.paired(*pair, scope.clusters)
        return no_data if stats is None else Tested(row, stats, lambda s: row.numbers.format(
            **s, delta=spec.delta.format(**s), twin=_twin(agg, spec, scope, row, a, b),
            by_model=_by_model(scope, row, pair)))
    if row.test == "slope":
        sizes = sorted({g for part, model, _ in scope.runs(a)
                        for g in agg.group_sizes(model, (a, b))})
        stats, count = rules.slope({g: score_pair(agg, scope, expr, a, b, g) for g in sizes},
                                   row.min_sizes, scope.clusters)
        if stats is None:
            return Tested(row, None, lambda s: (row.no_data or spec.no_data).format(sizes=count))
        return Tested(row, stats, lambda s: row.numbers.format(**s))
    if row.test == "level":
        stats = rules.level(curves(agg, scope, a, metric_parts(expr)[1]))
        return no_data if stats is None else Tested(row, stats, lambda s: row.numbers.format(**s))
    if row.test == "differ":
        column = metric_parts(expr)[1]
        found = rules.differ(curves(agg, scope, a, column),
                             [curves(agg, scope, x, column) for x in bs])
        if found is None:
            return no_data
        overall, per_other = found
        return Tested(row, overall, lambda s: "; ".join(
            row.numbers.format(B=x, **o) for x, o in zip(bs, per_other, strict=True)))
    values = [unit_values(agg, scope, x, expr, spec.final_steps) for x in (a, b)]
    stats = (rules.unit_mean(*values, row.difference or "minus", scope.clusters)
             if row.test == "unit_mean"
             else {"sign": rules.sign, "ratio": rules.ratio}[row.test](*values))
    return no_data if stats is None else Tested(row, stats, lambda s: row.numbers.format(**s))


def _twin(agg: Aggregate, spec: Spec, scope: Scope, row: Row, a: str, b: str) -> str:
    if row.twin is None:
        return ""
    stats = rules.paired(*score_pair(agg, scope, row.twin.metric, a, b), scope.clusters)
    return spec.no_data if stats is None else row.twin.numbers.format(**stats)


def _by_model(scope: Scope, row: Row, pair: tuple[dict, dict]) -> str:
    """Each model's (or subset/model's) paired Δ, in the scope's order."""
    if row.by_model is None:
        return ""
    out = []
    for part in scope.parts:
        for model in part.models:
            group = f"{part.prefix}{model}"
            only = [{u: v for u, v in side.items()
                     if scope.by_seed or str(u).rsplit("/", 1)[0] == group} for side in pair]
            stats = rules.paired(*only, scope.clusters)
            if stats is not None:
                out.append(row.by_model.format(model=group, **stats))
    return ", ".join(out)


def _tested(agg: Aggregate, spec: Spec, scope: Scope, row: Row) -> Tested:
    if len(row.metric) == 1:
        return _test(agg, spec, scope, row, row.metric[0])
    subs = tuple(_test(agg, spec, scope, row, m) for m in row.metric)
    return Tested(row, {}, lambda s: "; ".join(
        f"{_column(m)}: {t.numbers(t.stats or {})}" for m, t in zip(row.metric, subs, strict=True)),
        subs)


def _verdict(t: Tested) -> str:
    if t.subs:  # a composite: holds if every part holds, fails if any fails
        parts = [_verdict(s) for s in t.subs]
        return (HOLDS if all(p == HOLDS for p in parts)
                else FAILS if FAILS in parts else INCONCLUSIVE)
    return _decide(t.row, t.stats)


def _claim(agg: Aggregate, spec: Spec, row: Row) -> str:
    def shown(arm: str) -> str:
        label = bind(agg, spec, arm)
        return label if label is not None else spec.roles[arm].missing

    b = row.B if row.B is None or isinstance(row.B, str) else tuple(map(shown, row.B))
    return spec.claim_prefix.format(id=row.id) + row.claim.format(
        id=row.id, A=shown(row.A), B=shown(b) if isinstance(b, str) else b, study=agg.study,
        holds=row.holds.values(), fails=row.fails.values())


def _block(agg: Aggregate, spec: Spec, name: str | None, scope: Scope, gated: bool,
           invalid_label: str | None = None) -> tuple[list[Verdict], bool]:
    """The gates (if `gated`) and predictions of one block, and whether every gate held.
    `invalid_label`: every prediction reads it (a pooled block without a valid subset)."""
    out: list[Verdict] = []
    invalid: dict[str, str] = {}
    for gate in spec.gates if gated else ():
        t = _tested(agg, spec, scope, gate)
        verdict = _verdict(t)
        out.append(Verdict(name, gate.id, _claim(agg, spec, gate),
                           t.numbers(t.stats or {}), verdict))
        if verdict != HOLDS:
            targets = (p.id for p in spec.predictions) if "all" in gate.invalidates \
                else gate.invalidates
            for pid in targets:
                invalid.setdefault(pid, gate.label)
    tested = [_tested(agg, spec, scope, p) for p in spec.predictions]
    for family in spec.holm:
        members = [t for t in tested if t.row.family == family]
        adjusted = holm([t.stats["p"] if t.stats else 1.0 for t in members])
        for t, p in zip(members, adjusted, strict=True):
            if t.stats is not None:
                t.stats["p_holm"] = p
    for t in tested:
        verdict = _verdict(t)
        if t.row.family in spec.holm and verdict == HOLDS:
            alpha, label = spec.holm[t.row.family]
            verdict = label if t.stats["p_holm"] >= alpha else verdict
        verdict = invalid_label or invalid.get(t.row.id, verdict)
        out.append(Verdict(name, t.row.id, _claim(agg, spec, t.row), t.numbers(t.stats or {}),
                           verdict))
    return out, all(v.verdict == HOLDS for v in out if v.pid in {g.id for g in spec.gates})


def _runs_column(agg: Aggregate, name: str) -> list[Any]:
    return agg.runs.column(name).to_pylist()


def check_nesting(agg: Aggregate, spec: Spec) -> None:
    """The cluster column must be one of the aggregate's runs, and units that share a start
    (several RL seeds of one arm from one model) must be declared to nest."""
    if spec.cluster is not None and spec.cluster not in agg.runs.column_names:
        raise SpecError(f"{spec.path}: cluster: the aggregate's runs have no column "
                        f"{spec.cluster!r} (columns: {', '.join(agg.runs.column_names)})")
    if spec.cluster is None:
        seeds: dict[tuple, set] = {}
        for key in zip(*(_runs_column(agg, c) for c in (START_COLUMN, "run_algo", "run_group_size",
                                                     "run_seed")), strict=True):
            seeds.setdefault(key[:3], set()).add(key[3])
        most = max(map(len, seeds.values()), default=0)
        if most > 1:
            raise SpecError(f"{spec.path}: cluster: not declared, but the units nest ({most} RL "
                            f"seeds of one arm share a start); declare cluster: {START_COLUMN}")


def unit_clusters(agg: Aggregate, spec: Spec, scope: Scope) -> dict[Unit, str]:
    """unit -> its value of the cluster column (one per unit, whatever arm: else refused)."""
    found: dict[tuple[str, int], set[str]] = {}
    for model, seed, value in zip(*(_runs_column(agg, c) for c in (START_COLUMN, "run_seed",
                                                              spec.cluster)), strict=True):
        found.setdefault((model, seed), set()).add(str(value))
    out = {}
    for part in scope.parts:
        for (model, seed), values in found.items():
            if model in part.models:
                if len(values) > 1:
                    raise SpecError(f"{spec.path}: cluster: {spec.cluster} takes {len(values)} "
                                    f"values within the unit {model}/{seed}")
                out[scope.key(part, model, seed)] = values.pop()
    return out


def evaluate(agg: Aggregate, spec: Spec, estimator: str | None = None) -> list[Verdict]:
    """Every row of the study's verdict table, block by block, with the registered estimator
    or the one named (a secondary reading)."""
    check_registered(agg, spec)
    check_nesting(agg, spec)
    nested = (estimator or spec.estimator) == "nested" and spec.cluster is not None

    def scoped(scope: Scope) -> Scope:
        return replace(scope, clusters=unit_clusters(agg, spec, scope)) if nested else scope

    unknown = set(spec.tables) - set(EXTRA_TABLES)
    if unknown:
        raise SpecError(f"{spec.path}: tables: unknown {', '.join(sorted(unknown))} (known: "
                        f"{', '.join(EXTRA_TABLES)})")
    models, by_seed = tuple(agg.models()), spec.unit == "seed"
    if spec.per_model:
        blocks = [(m, Scope((Part((m,)),), by_seed)) for m in models]
    elif spec.subsets:
        blocks = [(s.name, Scope((Part(tuple(m for m in models if s.holds_model(m)), s.label),),
                                 by_seed=False)) for s in spec.subsets]
    else:
        if by_seed and len(models) > 1:
            raise SpecError(f"{spec.path}: unit: seed pools {len(models)} models; use unit: "
                            "model/seed or blocks: model")
        blocks = [(None, Scope((Part(models),), by_seed))]
    rows, valid = [], []
    for name, scope in blocks:
        block_rows, ok = _block(agg, spec, name, scoped(scope), gated=True)
        rows += block_rows
        if ok:
            valid += [Part(p.models, p.label, f"{name}/") for p in scope.parts]
    if spec.pooled:
        label = None if valid else (spec.gates[0].label if spec.gates else None)
        rows += _block(agg, spec, "pooled", scoped(Scope(tuple(valid), by_seed=False)),
                       gated=False, invalid_label=label)[0]
    return rows


def verdict_tables(agg: Aggregate) -> list[Table]:
    """The verdict table of the aggregate's experiment, and the descriptive tables its
    predictions file adds."""
    return verdict_tables_of(agg, spec_for(agg.study.experiment))


def secondary_tables(agg: Aggregate, estimator: str) -> list[Table]:
    """The verdict table read with a secondary estimator the predictions file dates, without
    the descriptive tables; none when the file names no such reading."""
    spec = spec_for(agg.study.experiment)
    if estimator not in spec.secondary:
        return []
    return verdict_tables_of(agg, spec, estimator)[:1]


def estimator_note(agg: Aggregate, spec: Spec, estimator: str) -> str:
    """What the table's intervals resample: every nested table says so (a flat registered
    table's own notes say how it resampled, as registered)."""
    if estimator != "nested":
        return ("Estimator: flat bootstrap: units resampled as independent, then problems "
                f"(the registered estimator is {spec.estimator}).")
    starts = len(set(_runs_column(agg, spec.cluster))) if spec.cluster else 0
    how = ("nested bootstrap: the starts (runs column "
           f"{spec.cluster}, {starts} in the aggregate) resampled with replacement, then the RL "
           "seeds within each drawn start, then the problems; units that share a start are one "
           "cluster, a start with one unit is resampled as a unit") if spec.cluster else (
           "no unit shares a start, so the nested bootstrap is the flat one over units and "
           "problems")
    if estimator == spec.estimator:
        return f"Estimator: {how}."
    return (f"Secondary analysis of {spec.secondary[estimator]}, not the registered verdicts "
            f"(those use the {spec.estimator} estimator, as registered): the same rules and "
            f"thresholds, intervals and p from a {how}.")


def verdict_tables_of(agg: Aggregate, spec: Spec, estimator: str | None = None) -> list[Table]:
    estimator = estimator or spec.estimator
    rows = evaluate(agg, spec, estimator)
    blocks = list(dict.fromkeys(v.block for v in rows))
    column = [] if len(blocks) <= 1 else ["model" if spec.per_model else spec.subset_column]
    secondary = estimator != spec.estimator
    notes = [n.format(experiment=agg.study.experiment, models=", ".join(agg.models()))
             for n in spec.notes]
    if estimator == "nested" or secondary:  # a flat registered table's notes say it already
        notes.append(estimator_note(agg, spec, estimator))
    table = Table(
        spec.title.format(experiment=agg.study.experiment)
        + (f" [secondary: {estimator} estimator, {spec.secondary[estimator]}]" if secondary
           else ""),
        [*column, "id", "prediction", "numbers", "verdict"],
        [[*([v.block] if column else []), v.pid, v.claim, v.numbers, v.verdict] for v in rows],
        notes)
    return [table, *(EXTRA_TABLES[name](agg) for name in spec.tables)]

