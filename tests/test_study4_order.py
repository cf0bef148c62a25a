"""Study 4's order, checked from the data (issue 47): every committed run of its pilot and its
confirmatory study ran from a clean tree at a commit that descends from the pre-registration's,
and started after it; every confirmatory run also descends from the commit that set
`gspo_fair`'s eps from the pilot (docs/preregistration-4.md, the run log) and from the one that
committed the admission of all ten starts (results/offpolicy4-study/admission.txt). The manifests
(`git_commit`, `git_dirty`, `started`) are committed beside each aggregate."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from committed import committed

from repro.results.committed import NotCommitted

ROOT = Path(__file__).resolve().parents[1]
PREREG = "docs/preregistration-4.md"
PRESET = "config/presets/offpolicy4-study.yaml"
STUDIES = {"offpolicy4-pilot": False, "offpolicy4-study": True}  # name -> confirmatory


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture(scope="module")
def history() -> None:
    if not (ROOT / ".git").exists() or git("rev-parse", "--is-shallow-repository") == "true":
        pytest.skip("needs the repository's full history (a git clone, not a shallow one)")


def first_commit(path: str, pattern: str | None = None) -> str:
    """The oldest commit that added `path` (or, with `pattern`, added a line matching it)."""
    args = ["-G", pattern] if pattern else ["--diff-filter=A"]
    commits = git("log", "--format=%H", "--reverse", *args, "--", path).splitlines()
    assert commits, f"{path}: no commit adds it (or a line matching {pattern})"
    return commits[0]


def manifests(study: str) -> list[dict]:
    try:
        runs = committed(f"results/{study}/runs")
    except NotCommitted:
        return []  # not run yet (the confirmatory study, until a session commits it)
    return [json.loads(p.read_text()) for p in sorted(runs.rglob("manifest.json"))]


def test_every_study4_run_follows_its_preregistration(history):
    prereg = first_commit(PREREG)
    registered = datetime.fromisoformat(git("show", "-s", "--format=%cI", prereg))
    eps = yaml.safe_load((ROOT / PRESET).read_text())["algorithms"]["gspo_fair-reuse"][
        "objective"]["eps_low"]
    amendment = first_commit(PRESET, rf"eps_low: {eps:.1e}".replace("e-0", "e-"))
    runs = 0
    for rel, confirmatory in STUDIES.items():
        found = manifests(rel)
        # the admission (all ten starts in the band) is committed before any confirmatory run
        admission = ((first_commit("results/offpolicy4-study/admission.txt"),)
                     if confirmatory and found else ())
        for m in found:
            commit = m["git_commit"]
            assert not m["git_dirty"], (rel, commit)
            assert datetime.fromisoformat(m["started"]) > registered, (rel, m["started"])
            for before in (prereg, amendment, *admission) if confirmatory else (prereg,):
                done = subprocess.run(["git", "-C", str(ROOT), "merge-base", "--is-ancestor",
                                       before, commit], check=False).returncode
                assert done == 0, f"{rel}: run at {commit} does not descend from {before}"
            runs += 1
    assert runs >= 20  # the pilot's 20 at least
