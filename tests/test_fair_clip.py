"""Studies 3 and 4's fair GSPO clip (repro.reporting.fair_clip): the rule against made-up pilot
logs, its numbers against each pre-registration's text, and study 3's preset's `gspo_fair` clips
against the rule applied to the committed pilot aggregate."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from committed import committed
from presets import resolved

from repro.objectives.gspo import GSPOConfig
from repro.reporting.fair_clip import (
    PAPER_MAX_SHARE,
    RULES,
    TARGET_SHARE,
    eps_text,
    fair_clips,
    gspo_clips,
    markdown,
)

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = RULES["offpolicy-pilot"].candidates


@pytest.fixture(scope="module")
def pilot() -> dict:
    return resolved("offpolicy-pilot.yaml")


def write_curves(folder: Path, shares: dict[str, list[float]], units: int = 1) -> Path:
    """A train_curves.parquet with `units` units per label, each with the per-step clip_frac."""
    rows = [(label, f"tiny-preamble-{u}", 7, value) for label, values in shares.items()
            for u in range(units) for value in values]
    folder.mkdir(parents=True, exist_ok=True)
    columns = ["run_algo", "run_model", "run_seed", "clip_frac"]
    table = pa.table({name: [row[i] for row in rows] for i, name in enumerate(columns)})
    pq.write_table(table, folder / "train_curves.parquet")
    return folder


def pilot_shares(pilot: dict, paper: float, candidates: dict[float, float]) -> dict:
    """Every pilot GSPO label's steps, its mean the given share (per source alike)."""
    out = {}
    for label, (_, low, high) in gspo_clips(pilot).items():
        share = paper if low != high else candidates[low]
        out[label] = [share - 0.01, share + 0.01]  # the rule reads the mean over steps
    return out


def test_the_paper_clip_stays_when_it_clips_at_most_20_percent(pilot, tmp_path):
    shares = dict.fromkeys(CANDIDATES, 0.15)
    clips = fair_clips(pilot, write_curves(tmp_path, pilot_shares(pilot, 0.20, shares)))
    paper = GSPOConfig()
    assert [c.source for c in clips] == ["reuse", "stale", "bf16"]
    assert all((c.eps_low, c.eps_high) == (paper.eps_low, paper.eps_high) for c in clips)
    assert all(c.paper_share == pytest.approx(0.20) for c in clips)


def test_above_20_percent_the_candidate_nearest_15_percent_is_chosen(pilot, tmp_path):
    shares = {1e-3: 0.40, 3e-3: 0.22, 7e-3: 0.13, 1e-2: 0.09, 2e-2: 0.02}
    clips = fair_clips(pilot, write_curves(tmp_path, pilot_shares(pilot, 0.21, shares)))
    assert all((c.eps_low, c.eps_high) == (7e-3, 7e-3) for c in clips)
    assert "eps 7e-3 clips 13.0%" in clips[0].rule
    table = markdown(clips)
    assert table.count("| 7e-3 |") == 3 and "21.0%" in table


def test_a_tie_goes_to_the_tighter_clip(pilot, tmp_path):
    shares = {1e-3: 0.40, 3e-3: 0.20, 7e-3: 0.10, 1e-2: 0.05, 2e-2: 0.01}
    clips = fair_clips(pilot, write_curves(tmp_path, pilot_shares(pilot, 0.5, shares)))
    assert {c.eps_low for c in clips} == {3e-3}


def test_a_missing_pilot_run_or_another_candidate_set_is_refused(pilot, tmp_path):
    shares = pilot_shares(pilot, 0.5, dict.fromkeys(CANDIDATES, 0.1))
    shares.pop("gspo_e7e-3-stale")
    with pytest.raises(ValueError, match="gspo_e7e-3-stale"):
        fair_clips(pilot, write_curves(tmp_path / "a", shares))
    other = {**pilot, "algorithms": {**pilot["algorithms"], "gspo_e7e-3-bf16": {
        "algorithm": "gspo", "source": "bf16",
        "objective": {"eps_low": 5e-3, "eps_high": 5e-3}}}}
    full = pilot_shares(pilot, 0.5, dict.fromkeys(CANDIDATES, 0.1))
    with pytest.raises(ValueError, match=r"'bf16'.*preregistration-3.md's are"):
        fair_clips(other, write_curves(tmp_path / "b", full))
    # the source is the entry's, never the label's suffix: an entry without one is refused
    unnamed = {**pilot, "algorithms": {**pilot["algorithms"], "gspo-bf16": {"algorithm": "gspo"}}}
    with pytest.raises(ValueError, match=r"gspo-bf16.*source"):
        fair_clips(unnamed, write_curves(tmp_path / "c", full))


@pytest.mark.parametrize("experiment", sorted(RULES))
def test_the_rules_numbers_are_the_pre_registrations(experiment):
    registered = RULES[experiment]
    text = (ROOT / registered.prereg).read_text()
    rule = re.search(r"\*\*Fair GSPO\*\*:(.*?)\n- \*\*", text, re.S).group(1)
    rule = " ".join(rule.split())
    paper = GSPOConfig()
    assert f"({eps_text(paper.eps_low)} / {eps_text(paper.eps_high)})" in rule
    assert f"at most {PAPER_MAX_SHARE:.0%} of tokens" in rule
    assert "{" + ", ".join(map(eps_text, registered.candidates)) + "}" in rule
    assert f"nearest {TARGET_SHARE:.0%}" in rule
    assert ("over both pilot starts" in rule) == (registered.units == 2)


def test_study_4s_rule_reads_both_pilot_starts(tmp_path):
    """Study 4's pilot: two starts per label, the share their mean over all steps; a label
    with one start is refused, and study 3's grid is not study 4's."""
    pilot4 = resolved("offpolicy4-pilot.yaml")
    grid = RULES["offpolicy4-pilot"].candidates
    shares = dict(zip(grid, (0.40, 0.30, 0.22, 0.17, 0.12, 0.08, 0.03, 0.01), strict=True))
    curves = pilot_shares(pilot4, 0.35, shares)
    clips = fair_clips(pilot4, write_curves(tmp_path / "a", curves, units=2))
    assert [(c.source, c.eps_low, c.eps_high) for c in clips] == [("reuse", 1.5e-3, 1.5e-3)]
    assert "| 1.5e-3 |" in markdown(clips) and "eps 1.5e-3 clips 17.0%" in clips[0].rule
    with pytest.raises(ValueError, match=r"2 unit\(s\) per label"):
        fair_clips(pilot4, write_curves(tmp_path / "b", curves, units=1))
    with pytest.raises(ValueError, match="no registered fair-clip rule"):
        fair_clips(pilot4 | {"experiment": "offpolicy5-pilot"}, tmp_path / "a")


def test_the_study_presets_fair_gspo_is_the_rule_on_the_committed_pilot(pilot):
    study = resolved("offpolicy-study.yaml")
    paper = GSPOConfig()
    for clip in fair_clips(pilot, committed("results/offpolicy-pilot/aggregate")):
        objective = study["algorithms"][f"gspo_fair-{clip.source}"].get("objective", {})
        found = (objective.get("eps_low", paper.eps_low), objective.get("eps_high", paper.eps_high))
        assert found == (clip.eps_low, clip.eps_high), clip.source


def test_the_results_page_shows_the_pilots_table_as_the_rule_gives_it(pilot):
    page = (ROOT / "docs" / "results.md").read_text()
    assert markdown(fair_clips(pilot, committed("results/offpolicy-pilot/aggregate"))) in page


def test_study_4s_fair_gspo_is_the_rule_on_its_committed_pilot():
    pilot4 = resolved("offpolicy4-pilot.yaml")
    study4 = resolved("offpolicy4-study.yaml")
    (clip,) = fair_clips(pilot4, committed("results/offpolicy4-pilot/aggregate"))
    objective = study4["algorithms"]["gspo_fair-reuse"]["objective"]
    assert (objective["eps_low"], objective["eps_high"]) == (clip.eps_low, clip.eps_high)
