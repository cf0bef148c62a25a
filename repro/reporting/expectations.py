"""Where a user's run stands against the committed aggregate: the main job's last step
(`repro expectations`, rule `expectations`) and the ranges the README states under "What to
expect on your machine", which live here as data (`RANGES`): the README's lines are
`readme_lines()` (tests/test_expectations.py holds the page to them), and the summary checks
the run against the same numbers.

The ranges are the tiny default's (experiment "tiny"); another committed study's rerun is said
to be exact or not, with no ranges. The README states its ranges to whole points (about 42-51%,
+29 to +33 points), so a number is inside when it rounds into its range at that precision (the
committed aggregate's own GRPO gain, +28.9, reads +29). The paired method difference has no
range of its own: it must fall inside the committed aggregate's 95% interval. Every number
comes from the verdict engine's readers (repro.reporting.verdict_metrics.final_scores, pooled
over benchmarks as the verdicts pool) and repro.reporting.scores (estimate, compare), so the
summary shows what the verdict table's V and P1 rows show.

The committed aggregate is read from git (repro.results.committed), never from the working tree,
which the run has just rewritten. A run of another study (another preset's settings or runs),
a folder that git does not hold, or a missing or damaged file is said in one line naming it.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

from repro.reporting.aggregate import CURVES_OUT, PROBLEMS_OUT, RUNS_OUT, SAMPLES_OUT
from repro.reporting.compare import cpus, exact_differences
from repro.reporting.load import Aggregate, load_aggregate
from repro.reporting.scores import compare, estimate
from repro.reporting.study import Study
from repro.reporting.verdict_metrics import Part, Scope, final_scores
from repro.reporting.verdict_spec import START
from repro.results.committed import NotCommitted, changed, committed_id, export
from repro.results.manifest import check_inputs

FILES = (CURVES_OUT, RUNS_OUT, PROBLEMS_OUT, SAMPLES_OUT)


@dataclass(frozen=True)
class Range:
    """A headline number's range as the README states it, to `digits` decimals."""

    lo: float
    hi: float
    digits: int = 0

    def holds(self, value: float) -> bool:
        scale = 10 ** self.digits
        shown = math.floor(value * scale + 0.5) / scale  # as the page would print it
        return self.lo <= shown <= self.hi


@dataclass(frozen=True)
class Headline:
    """A number the README sets an expectation for: arm A's accuracy, or A - B paired."""

    label: str
    a: str  # a run label, START, or "proposed"/"baseline" (the study's settings)
    b: str | None
    range: Range | None  # None: the committed aggregate's 95% interval


# The README's "What to expect on your machine", as data (issue 46): over 8 SFT starts on two
# kernel sets (docs/sft-robustness.md, sections 7-9), starts of 42.6-50.9% and GRPO gains of
# +29.3 to +32.4 points.
RANGES = {"start": Range(42, 51), "grpo_gain": Range(29, 33)}
EXPERIMENT = "tiny"  # the tiny default's: the README states ranges for it alone
HEADLINES = {
    "start": Headline("SFT start accuracy (held out)", START, None, RANGES["start"]),
    "grpo_gain": Headline("GRPO gain over the start", "grpo", START, RANGES["grpo_gain"]),
    "paired": Headline("DFPO vs GSPO, paired", "proposed", "baseline", None),
}


def readme_lines() -> list[str]:
    """The README's bullets under "What to expect on your machine" that state the ranges."""
    s, g = RANGES["start"], RANGES["grpo_gain"]
    return [f"- An SFT start of about {s.lo:g}-{s.hi:g}% held out, and a GRPO gain of "
            f"{g.lo:+g} to {g.hi:+g} points over it.",
            "- Paired method differences inside the committed intervals, though not the "
            "committed digits."]


@dataclass(frozen=True)
class Number:
    value: float
    lo: float
    hi: float


def headline_numbers(agg: Aggregate) -> dict[str, Number | None]:
    """Each headline's value and 95% interval (None where the aggregate lacks the runs)."""
    models = tuple(agg.models())
    scope = Scope((Part(models),), by_seed=len(models) == 1)

    def scores(arm: str) -> dict:
        label = getattr(agg.study, arm) if arm in ("proposed", "baseline") else arm
        return final_scores(agg, scope, label)

    out: dict[str, Number | None] = {}
    for key, h in HEADLINES.items():
        if h.b is None:
            est = estimate(scores(h.a))
            out[key] = est and Number(est.mean, est.lo, est.hi)
        else:
            test = compare(scores(h.a), scores(h.b))
            out[key] = test and Number(test.diff, test.lo, test.hi)
    return out


def _other_study(mine: Aggregate, theirs: Aggregate) -> str | None:
    if mine.study != theirs.study:
        return (f"study settings differ (experiment {mine.study.experiment!r}, committed "
                f"{theirs.study.experiment!r})")
    if set(mine.curves) != set(theirs.curves) or set(mine.scores) != set(theirs.scores):
        return (f"other runs or evaluations ({len(mine.curves)} runs, committed "
                f"{len(theirs.curves)})")
    return None


def _line(key: str, mine: Number | None, committed: Number | None, study: Study) -> str:
    h = HEADLINES[key]
    unit, sign = ("%", "") if h.b is None else (" points", "+")
    label = h.label if h.range else f"{h.label} ({study.proposed} - {study.baseline})"
    if mine is None or committed is None:
        return f"- {label}: not in {'this run' if mine is None else 'the committed aggregate'}"
    text = (f"- {label}: {mine.value:{sign}.1f}{unit} (committed {committed.value:{sign}.1f} "
            f"[{committed.lo:{sign}.1f}, {committed.hi:{sign}.1f}])")
    if h.range is None:
        inside = committed.lo <= mine.value <= committed.hi
        return f"{text}: {'inside' if inside else 'OUTSIDE'} the committed interval"
    stated = (f"{h.range.lo:g}-{h.range.hi:g}%" if h.b is None
              else f"{h.range.lo:+g} to {h.range.hi:+g} points")
    return f"{text}: {'inside' if h.range.holds(mine.value) else 'OUTSIDE'} the README's {stated}"


def summary(root: Path, folder: str) -> tuple[list[str], bool]:
    """(the summary's lines, whether the run's aggregate could be read) for the aggregate in
    `root/folder` (`folder` relative to the repository root, as git names it)."""
    lines, readable = _summary(root, folder)
    if committed_id(root, folder) and changed(root, folder):  # never replaced silently
        lines += ["", f"This run replaced the committed files in {folder}; "
                  f"`git checkout -- {folder}` restores them."]
    return [ln.replace(f"{root}/", "") for ln in lines], readable


def _summary(root: Path, folder: str) -> tuple[list[str], bool]:
    path = root / folder
    title = f"**This run's aggregate ({folder}) against the committed one (git HEAD)**"
    try:
        check_inputs([path / name for name in FILES])
        mine = load_aggregate(path)
    except ValueError as err:
        return [title, "", f"Cannot compare: {err}"], False
    with tempfile.TemporaryDirectory(prefix="repro-committed-") as tmp:
        try:
            theirs_path = export(root, folder, Path(tmp))
        except NotCommitted as err:
            return [title, "", f"Not comparable: {err}; nothing to compare."], True
        try:
            check_inputs([theirs_path / name for name in FILES])
            theirs = load_aggregate(theirs_path)
        except ValueError as err:
            return [title, "", f"Cannot read the committed aggregate: {err}"], True
        other = _other_study(mine, theirs)
        if other is not None:
            return [title, "", f"Not comparable: {path / RUNS_OUT} is from another study than "
                    f"the committed one: {other}; the README's ranges are for the committed "
                    "study."], True
        differ = exact_differences(theirs_path, path)
        machines = [", ".join(cpus(p)) for p in (path, theirs_path)]
        numbers = [headline_numbers(a) for a in (mine, theirs)]
    if not differ:
        return [title, "", "Exact: every value equals the committed one, the wall-clock seconds "
                "aside (`repro compare --exact`)."], True
    moved = (f"Not exact: {len(differ)} column(s) differ from the committed aggregate (`repro "
             f"compare --exact`); this run on {machines[0]}, the committed one on {machines[1]}.")
    if mine.study.experiment != EXPERIMENT:
        return [title, "", f"{moved} The README states ranges for the tiny default (experiment "
                f"{EXPERIMENT!r}) alone, not {mine.study.experiment!r}: compare the tables."], True
    lines = [title, "", f"{moved} Against the README's \"What to expect on your machine\":", ""]
    lines += [_line(key, numbers[0][key], numbers[1][key], mine.study) for key in HEADLINES]
    return lines, True
