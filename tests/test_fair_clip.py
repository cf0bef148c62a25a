"""Study 3's fair GSPO clip (repro.reporting.fair_clip): the rule against made-up pilot logs, its
numbers against the pre-registration's text, and the study preset's `gspo_fair` clips against
the rule applied to the committed pilot aggregate."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from committed import committed

from repro.objectives.gspo import GSPOConfig
from repro.plan import load_config
from repro.reporting.fair_clip import (
    CANDIDATES,
    PAPER_MAX_SHARE,
    TARGET_SHARE,
    eps_text,
    fair_clips,
    gspo_clips,
    markdown,
)

ROOT = Path(__file__).resolve().parents[1]
PILOT = ROOT / "config" / "presets" / "offpolicy-pilot.yaml"
STUDY = ROOT / "config" / "presets" / "offpolicy-study.yaml"


@pytest.fixture(scope="module")
def pilot() -> dict:
    return load_config(ROOT / "config" / "config.yaml", [PILOT])


def write_curves(folder: Path, shares: dict[str, list[float]]) -> Path:
    """A train_curves.parquet with one unit per label and its per-step clip_frac."""
    rows = [(label, "tiny-preamble-0", 7, value) for label, values in shares.items()
            for value in values]
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
    with pytest.raises(ValueError, match=r"'bf16'.*pre-registration"):
        fair_clips(other, write_curves(tmp_path / "b", full))
    # the source is the entry's, never the label's suffix: an entry without one is refused
    unnamed = {**pilot, "algorithms": {**pilot["algorithms"], "gspo-bf16": {"algorithm": "gspo"}}}
    with pytest.raises(ValueError, match=r"gspo-bf16.*source"):
        fair_clips(unnamed, write_curves(tmp_path / "c", full))


def test_the_rules_numbers_are_the_pre_registrations():
    text = (ROOT / "docs" / "preregistration-3.md").read_text()
    rule = re.search(r"\*\*Fair GSPO\*\*:(.*?)\n- \*\*", text, re.S).group(1)
    rule = " ".join(rule.split())
    paper = GSPOConfig()
    assert f"({eps_text(paper.eps_low)} / {eps_text(paper.eps_high)})" in rule
    assert f"at most {PAPER_MAX_SHARE:.0%} of tokens" in rule
    assert "{" + ", ".join(map(eps_text, CANDIDATES)) + "}" in rule
    assert f"nearest {TARGET_SHARE:.0%}" in rule


def test_the_study_presets_fair_gspo_is_the_rule_on_the_committed_pilot(pilot):
    study = load_config(ROOT / "config" / "config.yaml", [STUDY])
    paper = GSPOConfig()
    for clip in fair_clips(pilot, committed("results/offpolicy-pilot/aggregate")):
        objective = study["algorithms"][f"gspo_fair-{clip.source}"].get("objective", {})
        found = (objective.get("eps_low", paper.eps_low), objective.get("eps_high", paper.eps_high))
        assert found == (clip.eps_low, clip.eps_high), clip.source


def test_the_results_page_shows_the_pilots_table_as_the_rule_gives_it(pilot):
    page = (ROOT / "docs" / "results.md").read_text()
    assert markdown(fair_clips(pilot, committed("results/offpolicy-pilot/aggregate"))) in page
