"""A study's pre-registered predictions as data: the YAML files of `predictions/` (one per
pre-registration, schema in docs/predictions.md), read and checked here before any number is
computed, so a typo fails with one line naming the file and key instead of a wrong table.
"""

from __future__ import annotations

import fnmatch
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from repro.reporting.study import Study

PREDICTIONS = Path(__file__).with_name("predictions")
START = "start"  # the arm name of the SFT start (evaluated at frac 0, no group size)
UNITS = ("seed", "model/seed")
# how a table's intervals resample the units: as independent (flat) or nested in their cluster
ESTIMATORS = ("flat", "nested")
OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq}
# test kind -> the statistics its holds/fails conditions may name
STATISTICS = {
    "paired": ("diff", "lo", "hi", "p", "units", "problems"),
    "sign": ("lower_share", "not_lower_share", "higher_share", "mean_diff", "mean_ratio",
             "units"),
    "ratio": ("below_share", "not_below_share", "mean_ratio", "units"),
    "slope": ("slope", "lo", "hi"),
    "unit_mean": ("mean", "lo", "hi", "units"),
    "level": ("value", "count"),
    "differ": ("min_share", "every_unit"),
}
SCORES = ("final_accuracy", "auc")  # per (unit, problem) scores, for paired and slope
SCALARS = ("tokens_to_threshold",)  # one number per unit
PER_RUN = ("mean", "final", "drop")  # summaries of a run's train-log column
METRICS_OF = {"paired": SCORES, "slope": ("final_accuracy",), "level": ("steps",),
              "differ": ("steps",), "sign": SCALARS + PER_RUN + ("abs",),
              "ratio": SCALARS + PER_RUN + ("abs",), "unit_mean": SCALARS + PER_RUN + ("abs",)}
DIFFERENCES = ("minus", "log_ratio")
_CALL = re.compile(r"^(\w+)\((.+)\)$")
_CONDITION = re.compile(r"^\s*(>=|<=|==|>|<)\s*([-+0-9.eE]+)\s*$")


class SpecError(ValueError):
    """A predictions file that cannot be tested as written."""


@dataclass(frozen=True)
class Rule:
    """Conditions that must all hold (`stat op value`), or `otherwise`: whenever the other rule
    does not."""

    conditions: tuple[tuple[str, str, float], ...] = ()
    otherwise: bool = False

    def met(self, stats: Mapping[str, float]) -> bool:
        return bool(self.conditions) and all(OPS[op](stats[name], value)
                                             for name, op, value in self.conditions)

    def values(self) -> dict[str, float]:
        """statistic -> threshold, for claims that quote it (`{holds[lo]:g}`)."""
        return {name: value for name, _, value in self.conditions}


@dataclass(frozen=True)
class Twin:
    """A second metric reported beside a paired test, without a verdict."""

    metric: str
    numbers: str


@dataclass(frozen=True)
class Row:
    """A gate or prediction: A vs B (or A alone) on a metric, decided by a test's rules."""

    id: str
    claim: str
    A: str
    B: str | tuple[str, ...] | None
    metric: tuple[str, ...]  # several: a composite that holds if every one holds
    test: str
    holds: Rule
    fails: Rule
    numbers: str
    family: str | None = None
    twin: Twin | None = None
    by_model: str | None = None  # template of one model's Δ, listed in `{by_model}`
    difference: str | None = None  # unit_mean: D_u = A - B ("minus") or log(A / B)
    min_sizes: int = 3  # slope: the fewest group sizes with paired runs
    no_data: str | None = None  # slope: what prints with too few group sizes (`{sizes}`)
    invalidates: tuple[str, ...] = ()  # gates: the ids a failed gate relabels ("all": every one)
    label: str | None = None  # gates: the verdict those predictions then read


@dataclass(frozen=True)
class Role:
    """An arm bound from the aggregate's study settings: the first ablation ending so."""

    ablation_ending: str
    registered: str
    missing: str


@dataclass(frozen=True)
class Subset:
    """A slice of the aggregate with its own gates and rows: some models, arms under a label."""

    name: str
    models: tuple[str, ...] = ("*",)
    label: str = "{arm}"

    def holds_model(self, model: str) -> bool:
        return any(fnmatch.fnmatchcase(model, pattern) for pattern in self.models)


@dataclass(frozen=True)
class Spec:
    path: Path
    preregistration: str
    registered_for: str
    experiments: tuple[str, ...] | None  # None: every experiment without a file of its own
    settings: dict[str, Any]
    unit: str
    title: str
    no_data: str
    delta: str
    gates: tuple[Row, ...]
    predictions: tuple[Row, ...]
    holm: dict[str, tuple[float, str]] = field(default_factory=dict)  # family -> alpha, label
    roles: dict[str, Role] = field(default_factory=dict)
    per_model: bool = False  # one block of rows per model
    subsets: tuple[Subset, ...] = ()  # one block per subset ...
    subset_column: str = "subset"
    pooled: bool = False  # ... and one over the subsets whose gates hold
    final_steps: int = 5
    claim_prefix: str = ""
    notes: tuple[str, ...] = ()
    tables: tuple[str, ...] = ()
    cluster: str | None = None  # the runs column of the start units nest in (None: independent)
    estimator: str = "nested"  # the registered one (flat: the file's notes say how)
    secondary: dict[str, str] = field(default_factory=dict)  # estimator -> date of that reading


def _fail(path: Path, key: str, why: str) -> SpecError:
    return SpecError(f"{path}: {key}: {why}")


def _rule(path: Path, key: str, raw: Any, test: str) -> Rule:
    if raw == "otherwise":
        return Rule(otherwise=True)
    if not isinstance(raw, dict) or not raw:
        raise _fail(path, key, f"need {{statistic: 'OP NUMBER'}} or 'otherwise', got {raw!r}")
    conditions = []
    for name, text in raw.items():
        match = _CONDITION.match(str(text))
        if name not in STATISTICS[test]:
            raise _fail(path, key, f"{test} has no statistic {name!r} "
                        f"(it has {', '.join(STATISTICS[test])})")
        if match is None:
            raise _fail(path, f"{key}.{name}", f"need 'OP NUMBER' (OP one of {', '.join(OPS)}), "
                        f"got {text!r}")
        conditions.append((name, match.group(1), float(match.group(2))))
    return Rule(tuple(conditions))


def metric_parts(expr: str) -> tuple[str, str | None]:
    """("mean", "asym") for "mean(asym)", ("abs", "final(x)") for "abs(final(x))", and
    ("auc", None) for a bare name."""
    match = _CALL.match(expr.strip())
    return (match.group(1), match.group(2).strip()) if match else (expr.strip(), None)


def _check_metric(path: Path, key: str, expr: str, test: str) -> None:
    head, inner = metric_parts(expr)
    if head not in METRICS_OF[test]:
        raise _fail(path, key, f"{test} reads {', '.join(METRICS_OF[test])}, not {expr!r}")
    if head == "abs":
        _check_metric(path, key, inner or "", test)
    elif (head in PER_RUN or head == "steps") and not (inner and inner.isidentifier()):
        raise _fail(path, key, f"{head}(COLUMN) needs a train-log column, got {expr!r}")
    elif head in SCORES + SCALARS and inner is not None:
        raise _fail(path, key, f"{head} takes no argument, got {expr!r}")


ROW_KEYS = {f.name for f in fields(Row)}


def _row(path: Path, where: str, raw: Any, families: dict[str, dict], gate: bool) -> Row:
    if not isinstance(raw, dict) or "id" not in raw:
        raise _fail(path, where, f"need a mapping with an id, got {raw!r}")
    key = f"{where}[{raw['id']}]"
    family = raw.get("family")
    if family is not None and family not in families:
        raise _fail(path, f"{key}.family", f"no family {family!r} (families: "
                    f"{', '.join(families) or 'none'})")
    data = {k: v for k, v in families.get(family, {}).items() if k != "holm"} | raw
    unknown = set(data) - ROW_KEYS
    if unknown:
        raise _fail(path, key, f"unknown key(s) {', '.join(sorted(unknown))}")
    for need in ("claim", "A", "metric", "test", "holds", "fails"):
        if need not in data:
            raise _fail(path, key, f"needs {need}")
    test = data["test"]
    if test not in STATISTICS:
        raise _fail(path, f"{key}.test", f"unknown test {test!r} (one of {', '.join(STATISTICS)})")
    metrics = data["metric"] if isinstance(data["metric"], list) else [data["metric"]]
    for m in metrics:
        _check_metric(path, f"{key}.metric", str(m), test)
    twin = data.get("twin")
    if twin is not None:
        if not isinstance(twin, dict) or set(twin) != {"metric", "numbers"}:
            raise _fail(path, f"{key}.twin", "need {metric, numbers}")
        _check_metric(path, f"{key}.twin.metric", twin["metric"], "paired")
        twin = Twin(twin["metric"], twin["numbers"])
    if test == "unit_mean" and data.get("difference") not in DIFFERENCES:
        raise _fail(path, f"{key}.difference", f"unit_mean needs one of {', '.join(DIFFERENCES)}")
    b = data.get("B")
    if test not in ("level",) and b is None:
        raise _fail(path, key, f"{test} compares A with B: needs B")
    invalidates = data.get("invalidates", ())
    if gate and (not invalidates or not data.get("label")):
        raise _fail(path, key, "a gate needs invalidates (ids or 'all') and label")
    return Row(
        id=str(data["id"]), claim=str(data["claim"]), A=str(data["A"]),
        B=tuple(map(str, b)) if isinstance(b, list) else None if b is None else str(b),
        metric=tuple(map(str, metrics)), test=test,
        holds=_rule(path, f"{key}.holds", data["holds"], test),
        fails=_rule(path, f"{key}.fails", data["fails"], test),
        numbers=str(data.get("numbers", "{delta}")), family=family, twin=twin,
        by_model=data.get("by_model"), difference=data.get("difference"),
        min_sizes=int(data.get("min_sizes", 3)), no_data=data.get("no_data"),
        invalidates=("all",) if invalidates == "all" else tuple(map(str, invalidates)),
        label=data.get("label"))


SPEC_KEYS = {"preregistration", "registered_for", "experiments", "settings", "roles", "unit",
             "blocks", "final_steps", "title", "claim_prefix", "no_data", "delta", "notes",
             "tables", "gates", "families", "predictions", "cluster", "estimator", "secondary"}


def _inference(path: Path, raw: dict) -> tuple[str | None, str, dict[str, str]]:
    """cluster (a column name, or none), the registered estimator and the dated secondary
    readings: {ESTIMATOR: "YYYY-MM-DD"}."""
    cluster = raw.get("cluster")
    if cluster is not None and not (isinstance(cluster, str) and cluster.isidentifier()):
        raise _fail(path, "cluster", f"need a column of the aggregate's runs or none, got "
                    f"{cluster!r}")
    estimator = raw.get("estimator", "nested")
    if estimator not in ESTIMATORS:
        raise _fail(path, "estimator", f"one of {', '.join(ESTIMATORS)}, got {estimator!r}")
    secondary = raw.get("secondary") or {}
    if not isinstance(secondary, dict):
        raise _fail(path, "secondary", f"need {{ESTIMATOR: DATE}}, got {secondary!r}")
    for name, date in secondary.items():
        if name not in ESTIMATORS or name == estimator:
            raise _fail(path, f"secondary.{name}", f"need an estimator other than the registered "
                        f"{estimator} (one of {', '.join(ESTIMATORS)})")
        if not re.fullmatch(r"\d{4}-\d\d-\d\d", str(date)):
            raise _fail(path, f"secondary.{name}", f"need the date of the reading, YYYY-MM-DD, "
                        f"got {date!r}")
    return (None if cluster == "none" else cluster), estimator, \
        {str(k): str(v) for k, v in secondary.items()}


def load_spec(path: Path) -> Spec:
    """One predictions file, checked: every key known, every test, metric and rule readable,
    every id unique and every gate's target an id of the file."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise SpecError(f"{path}: cannot read ({err})") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: need a mapping at the top")
    unknown = set(raw) - SPEC_KEYS
    if unknown:
        raise _fail(path, ", ".join(sorted(unknown)), "unknown key(s)")
    for need in ("preregistration", "registered_for", "experiments", "unit", "title",
                 "predictions"):
        if need not in raw:
            raise _fail(path, need, "missing")
    if raw["unit"] not in UNITS:
        raise _fail(path, "unit", f"one of {', '.join(UNITS)}, got {raw['unit']!r}")
    settings = raw.get("settings") or {}
    known = {f.name for f in fields(Study)}
    if set(settings) - known:
        raise _fail(path, "settings", f"not study settings: {', '.join(set(settings) - known)}")
    families = raw.get("families") or {}
    holm = {}
    for name, fam in families.items():
        if "holm" in fam:
            h = fam["holm"]
            if not isinstance(h, dict) or set(h) != {"alpha", "label"}:
                raise _fail(path, f"families.{name}.holm", "need {alpha, label}")
            holm[name] = (float(h["alpha"]), str(h["label"]))
    gates = tuple(_row(path, "gates", g, families, gate=True) for g in raw.get("gates") or ())
    predictions = tuple(_row(path, "predictions", p, families, gate=False)
                        for p in raw["predictions"])
    for p in predictions:
        if p.family in holm and p.test != "paired":
            raise _fail(path, f"predictions[{p.id}]", f"family {p.family} is Holm-adjusted: "
                        "its tests must be paired (they give the p-values)")
    ids = [r.id for r in (*gates, *predictions)]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise _fail(path, "id", f"ids repeat: {', '.join(repeated)}")
    for g in gates:
        stray = set(g.invalidates) - {"all", *(p.id for p in predictions)}
        if stray:
            raise _fail(path, f"gates[{g.id}].invalidates", f"no prediction {', '.join(stray)}")
    roles = {name: Role(**r) for name, r in (raw.get("roles") or {}).items()}
    per_model, subsets, column, pooled = _blocks(path, raw.get("blocks"), raw["unit"])
    experiments = raw["experiments"]
    cluster, estimator, secondary = _inference(path, raw)
    return Spec(
        path=path, preregistration=str(raw["preregistration"]),
        registered_for=str(raw["registered_for"]),
        experiments=None if experiments == "*" else tuple(map(str, experiments)),
        settings=settings, unit=raw["unit"], title=str(raw["title"]),
        no_data=str(raw.get("no_data", "no data")),
        delta=str(raw.get("delta", "Δ = {diff:+.1f} [{lo:+.1f}, {hi:+.1f}] points, {units} units")),
        gates=gates, predictions=predictions, holm=holm, roles=roles, per_model=per_model,
        subsets=subsets, subset_column=column, pooled=pooled,
        final_steps=int(raw.get("final_steps", 5)), claim_prefix=str(raw.get("claim_prefix", "")),
        notes=tuple(map(str, raw.get("notes") or ())), tables=tuple(raw.get("tables") or ()),
        cluster=cluster, estimator=estimator, secondary=secondary)


def _blocks(path: Path, raw: Any, unit: str) -> tuple[bool, tuple[Subset, ...], str, bool]:
    """blocks: absent (one block), `model` (one per model), or {by, subsets, pooled}."""
    if raw is None:
        return False, (), "subset", False
    if raw == "model":
        return True, (), "model", False
    if not isinstance(raw, dict) or not isinstance(raw.get("subsets"), dict):
        raise _fail(path, "blocks", "need 'model' or {by: NAME, subsets: {NAME: {models, "
                    "label}}, pooled: BOOL}")
    if unit != "model/seed":
        raise _fail(path, "blocks", "subsets need unit: model/seed")
    subsets = []
    for name, sub in raw["subsets"].items():
        sub = sub or {}
        if set(sub) - {"models", "label"} or "{arm}" not in sub.get("label", "{arm}"):
            raise _fail(path, f"blocks.subsets.{name}", "keys models (globs) and label "
                        "(a template with {arm})")
        subsets.append(Subset(str(name), tuple(sub.get("models", ("*",))),
                              sub.get("label", "{arm}")))
    return False, tuple(subsets), str(raw.get("by", "subset")), bool(raw.get("pooled", False))


def spec_for(experiment: str, folder: Path = PREDICTIONS) -> Spec:
    """The predictions file whose `experiments` name this experiment, else the one for "*"."""
    specs = [load_spec(path) for path in sorted(folder.glob("*.yaml"))]
    named = [s for s in specs if s.experiments is not None and experiment in s.experiments]
    fallback = [s for s in specs if s.experiments is None]
    if len(named) > 1 or len(fallback) > 1:
        clash = named if len(named) > 1 else fallback
        raise SpecError(f"{folder}: {', '.join(s.path.name for s in clash)} all claim "
                        f"experiment {experiment!r}")
    if not named and not fallback:
        raise SpecError(f"{folder}: no predictions file for experiment {experiment!r}")
    return (named or fallback)[0]
