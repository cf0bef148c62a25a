"""Each study's predictions file (repro/reporting/predictions/*.yaml) against its
pre-registration and its committed verdict table:

- through the one verdict engine, each committed aggregate's verdict.md and verdict.tex come
  out byte for byte as committed (tests/fixtures/verdicts, written by the rules in Python that
  the files replaced);
- every prediction of a pre-registration's table is in its file and back, with the arms, metric
  and thresholds its row states (parsing prose is brittle, so this checks that each number of a
  rule appears after a comparison sign in the row, not the whole sentence);
- a file that cannot be tested as written fails with one line naming the file and key.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml
from committed import committed

from repro.reporting.load import load_aggregate
from repro.reporting.render import write_report
from repro.reporting.tables import environment_notes, with_footer
from repro.reporting.verdict import evaluate, verdict_tables
from repro.reporting.verdict_spec import (
    PREDICTIONS,
    START,
    Row,
    Spec,
    SpecError,
    load_spec,
    metric_parts,
    spec_for,
)

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = Path(__file__).with_name("fixtures") / "verdicts"
AGGREGATES = {"tiny-study": committed("results/tiny-study/aggregate"),
              "mechanism-study": committed("results/mechanism-study/aggregate"),
              "aggregate": committed("results/aggregate")}
SPECS = sorted(PREDICTIONS.glob("*.yaml"))
# what a metric is called in a pre-registration's prose
PROSE = {"final_accuracy": ("avg@", "Δ"), "auc": ("AUC",), "tokens_to_threshold": ("tokens",),
         "reward_mean": ("reward",)}
SHARES = ("lower_share", "not_lower_share", "higher_share", "below_share", "not_below_share")
# (file, id, condition): where the rule the code applied says more than the row; the committed
# table was produced by the code, so the file keeps it (docs/predictions.md, "Differences")
KNOWN_DIFFERENCES = {
    ("preregistration.yaml", "P4", "holds.mean_diff"):
        "the code also required the mean to be lower; the row says only 'lower in 5/5 seeds'",
}


@pytest.fixture(scope="module")
def aggregates():
    return {name: load_aggregate(path) for name, path in AGGREGATES.items()}


@pytest.mark.parametrize("name", sorted(AGGREGATES))
def test_the_committed_verdict_tables_regenerate_byte_equal(name, aggregates, tmp_path):
    """`repro tables`' verdict.md/.tex, rebuilt from the committed aggregate through the
    predictions file of its experiment, equal the committed ones byte for byte."""
    tables = with_footer(verdict_tables(aggregates[name]), environment_notes(AGGREGATES[name]))
    for path in write_report(tmp_path, "verdict", tables):
        assert path.read_bytes() == (COMMITTED / name / path.name).read_bytes(), path.name


def test_a_registered_experiment_must_have_its_registered_settings(aggregates):
    agg = aggregates["tiny-study"]
    spec = spec_for("tiny-study")
    assert spec.registered_for == "tiny-study" and spec.settings["threshold"] == 0.45
    other = dataclasses.replace(agg, study=dataclasses.replace(agg.study, threshold=0.35))
    with pytest.raises(SpecError, match=r"preregistration\.yaml: settings\.threshold: registered "
                       r"0\.45, but the tiny-study aggregate has 0\.35"):
        evaluate(other, spec)
    no_nosg = dataclasses.replace(agg, study=dataclasses.replace(
        agg.study, ablation_algos=("dfpo_global",)))
    with pytest.raises(SpecError, match=r"roles\.nosg: registered 'dfpo_min_nosg'"):
        evaluate(no_nosg, spec)


def test_each_experiment_reads_its_own_file():
    assert spec_for("mechanism-study").path.name == "preregistration-2.yaml"
    for other in ("tiny-study", "tiny", "paper-qwen3-32b"):
        assert spec_for(other).path.name == "preregistration.yaml"  # the "*" file


# ---- each file against its pre-registration ---------------------------------------------------

def section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:end if end >= 0 else len(text)]


def prereg_rows(spec: Spec) -> dict[str, str]:
    """id -> the text of its row in the pre-registration's predictions table."""
    table = section((ROOT / spec.preregistration).read_text(), "## Predictions")
    rows = [ln for ln in table.splitlines() if ln.startswith("| ") and not ln.startswith("| id")]
    return {ln.strip("| ").split("|")[0].split()[0]: ln for ln in rows}


def gate_text(spec: Spec, gid: str) -> str:
    """The paragraph or bullet of the pre-registration's validity section that states a gate."""
    text = (ROOT / spec.preregistration).read_text()
    validity = section(text, "## Validity")
    chunks = re.split(r"\n(?=- \*\*)|\n\n", validity)
    found = [c for c in chunks if re.match(rf"(- \*\*)?{gid}[.,]", c.strip())]
    assert len(found) == 1, (spec.path.name, gid, found)
    return " ".join(found[0].split())


def arms(spec: Spec, row: Row) -> list[str]:
    """The run labels a row compares, as the pre-registration fixes them."""
    def label(arm: str) -> str:
        if arm in ("proposed", "baseline"):
            return spec.settings[arm]
        return spec.roles[arm].registered if arm in spec.roles else arm
    bs = [] if row.B is None else [row.B] if isinstance(row.B, str) else list(row.B)
    return [label(a) for a in (row.A, *bs)]


def named(arm: str, text: str) -> bool:
    if arm == START:
        return "start" in text
    return re.search(rf"(?<!\w){re.escape(arm)}(?!\w)", text) is not None


def rule_stated(stat: str, value: float, text: str) -> bool:
    """Whether the row states this threshold: a count "k/n" for a share (or its complement, as
    "lower in <= 2/5" states "not lower in >= 3/5"), else the number after a comparison sign."""
    if stat in SHARES:
        n = int(re.search(r"\d+/(\d+)", text).group(1))
        k = round(value * n)
        return f"{k}/{n}" in text or f"{n - k}/{n}" in text
    if stat == "every_unit":
        return "every unit" in text
    if stat == "mean_diff":
        return "mean smaller" in text or "mean ratio" in text
    forms = {f"{value:g}", f"{value:.0%}"}
    return any(re.search(rf"[<>=]\s*\+?{re.escape(f)}(?![\d.])", text) for f in forms)


def stated(spec: Spec) -> list[tuple[Row, str]]:
    rows = prereg_rows(spec)
    return ([(g, gate_text(spec, g.id)) for g in spec.gates]
            + [(p, rows.get(p.id, "")) for p in spec.predictions])


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_every_prediction_of_the_preregistration_is_in_its_file_and_back(path):
    spec = load_spec(path)
    assert (ROOT / spec.preregistration).is_file()
    assert f"config/presets/{spec.registered_for}.yaml" in (ROOT / spec.preregistration
                                                            ).read_text()
    assert list(prereg_rows(spec)) == [p.id for p in spec.predictions]


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_each_row_names_the_arms_and_metric_its_preregistration_states(path):
    """Every arm of a file's row is named in the pre-registration's row; the proposed arm may
    stay implicit where the row says "comparison with B" (study 1's P3-P6)."""
    spec = load_spec(path)
    for row, text in stated(spec):
        a, *bs = arms(spec, row)
        assert all(named(b, text) for b in bs), (row.id, bs, text)
        assert named(a, text) or (a == spec.settings.get("proposed")
                                  and f"comparison with {bs[0]}" in text), (row.id, a, text)
        for expr in row.metric:
            head, inner = metric_parts(expr)
            while inner is not None and metric_parts(inner)[1] is not None:
                head, inner = metric_parts(inner)
            words = PROSE.get(inner or head, (inner or head,))
            assert any(w in text for w in words), (row.id, expr, text)
        if row.difference == "log_ratio":
            assert "log(" in text, (row.id, text)


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_each_threshold_is_one_its_preregistration_states(path):
    spec = load_spec(path)
    text = (ROOT / spec.preregistration).read_text()
    for key, value in spec.settings.items():
        assert named(value, text) if isinstance(value, str) else f"{value:g}" in text, key
    for alpha, label in spec.holm.values():
        assert label in text and f"adjusted p >= {alpha:g}" in text
    for row, row_text in stated(spec):
        for which, rule in (("holds", row.holds), ("fails", row.fails)):
            for stat, _, value in rule.conditions:
                if (path.name, row.id, f"{which}.{stat}") in KNOWN_DIFFERENCES:
                    assert not rule_stated(stat, value, row_text)  # still a difference
                    continue
                assert rule_stated(stat, value, row_text), (row.id, which, stat, value, row_text)


def test_the_threshold_check_can_fail():
    """The checks above on a row whose numbers were changed."""
    assert rule_stated("lo", 5, "lower bound > +5 points")
    assert not rule_stated("lo", 3, "lower bound > +5 points")
    assert not rule_stated("hi", 1, "upper bound < +10 points")
    assert rule_stated("not_lower_share", 0.6, "lower in <= 2/5 seeds")
    assert not rule_stated("not_lower_share", 0.8, "lower in <= 2/5 seeds")
    assert rule_stated("min_share", 0.5, "on >= 50% of steps")


# ---- a file that cannot be tested as written ---------------------------------------------------

def mutated(tmp_path: Path, change) -> Path:
    raw = yaml.safe_load((PREDICTIONS / "preregistration-2.yaml").read_text())
    change(raw)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    return path


def first_prediction(raw: dict) -> dict:
    return raw["predictions"][0]


@pytest.mark.parametrize(("change", "message"), [
    (lambda r: r.update(unit="start/seed"), r"unit: one of seed, model/seed"),
    (lambda r: r.update(colour="red"), r"colour: unknown key"),
    (lambda r: first_prediction(r).update(metric="accuracy"), r"predictions\[P1\]\.metric: "
     r"paired reads final_accuracy, auc, not 'accuracy'"),
    (lambda r: first_prediction(r).update(holds={"lower": "> 0"}),
     r"predictions\[P1\]\.holds: paired has no statistic 'lower'"),
    (lambda r: first_prediction(r).update(holds={"lo": "above 0"}),
     r"predictions\[P1\]\.holds\.lo: need 'OP NUMBER'"),
    (lambda r: first_prediction(r).update(test="t-test"),
     r"predictions\[P1\]\.test: unknown test 't-test'"),
    (lambda r: first_prediction(r).update(family="speed"),
     r"predictions\[P1\]\.family: no family 'speed' \(families: accuracy, train\)"),
    (lambda r: r["families"]["train"].update(holm={"alpha": 0.05, "label": "x"}),
     r"predictions\[P7\]: family train is Holm-adjusted: its tests must be paired"),
    (lambda r: r["gates"][2].update(invalidates=["P2", "P33"]),
     r"gates\[G3\]\.invalidates: no prediction P33"),
    (lambda r: r["gates"][0].pop("label"), r"gates\[G1\]: a gate needs invalidates"),
    (lambda r: r["predictions"][1].update(id="P1"), r"id: ids repeat: P1"),
    (lambda r: r["settings"].update(kappa=0.2), r"settings: not study settings: kappa"),
])
def test_a_file_that_cannot_be_tested_fails_naming_file_and_key(tmp_path, change, message):
    with pytest.raises(SpecError, match=r"bad\.yaml: " + message):
        load_spec(mutated(tmp_path, change))


def test_two_files_for_one_experiment_are_refused(tmp_path):
    for name in ("a.yaml", "b.yaml"):
        (tmp_path / name).write_text((PREDICTIONS / "preregistration-2.yaml").read_text())
    with pytest.raises(SpecError, match=r"a\.yaml, b\.yaml all claim experiment 'mechanism-study'"):
        spec_for("mechanism-study", tmp_path)
    with pytest.raises(SpecError, match="no predictions file for experiment 'tiny'"):
        spec_for("tiny", tmp_path)
