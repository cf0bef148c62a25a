"""The README's findings table, generated: each row's claim and citation are data here; its
verdict word and its effect come from the verdict engine's table of the cited study (or, for an
exploratory row, from the engine's paired test), so a changed aggregate or a changed verdict
rule changes the row. Rows are ordered bad news first (by verdict), in the listed order within
a verdict. To reword a claim, edit FINDINGS and run `repro report`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from repro.reporting.report_sections import (
    CI,
    STUDY_1,
    STUDY_2,
    STUDY_3,
    STUDY_4,
    Section,
    Store,
    paired_on,
)

STUDIES = {  # the number the table cites -> (aggregate, anchor of its section in docs/results.md)
    "1": (STUDY_1, "study-1-the-pre-registered-tiny-study-dfpo-vs-gspo-5-seeds"),
    "2": (STUDY_2, "study-2-the-mechanism-study-pre-registered"),
    "3": (STUDY_3, "study-3-realistic-off-policy-sources-pre-registered"),
    "4": (STUDY_4, "study-4-minibatch-reuse-from-ten-gated-starts-pre-registered"),
}
# bad news first; a verdict not listed here goes last
ORDER = ("fails", "not shown", "invalid regime", "unstable", "inconclusive", "holds")


@dataclass(frozen=True)
class Finding:
    claim: str
    study: str  # "1" to "4"
    cite: str  # the engine's id, "BLOCK ID" in a table with blocks, or "exploratory"
    effect: str = "{0} [{1}, {2}] points"  # filled with `pattern`'s groups
    pattern: str = CI  # applied to the engine's numbers text; its first match
    pair: tuple[str, str] | None = None  # exploratory: AUC of A - B, claimed below 0


FINDINGS = (
    Finding("DFPO beats a fairly clipped GSPO, minibatch reuse, 10 gated starts", "4",
            "Q1", "{0} [{1}, {2}] AUC points"),
    Finding("Orth-Proj beats a fairly clipped GSPO, minibatch reuse, 10 gated starts", "4",
            "Q2", "{0} [{1}, {2}] AUC points"),
    Finding("GRPO gains >= 3 points over its start, minibatch reuse, 10 gated starts (gate)",
            "4", "G2"),
    Finding("DFPO ends more accurate than GSPO", "1", "P1"),
    Finding("Stop-gradient is essential to DFPO", "1", "P7"),
    Finding("Min-Replace beats no transform", "2", "P2", "{0} [{1}, {2}] AUC points"),
    Finding("Per-group cancellation beats one global rescale", "2", "P3",
            "{0} [{1}, {2}] AUC points"),
    Finding("DFPO loses less entropy than GSPO", "2", "P9", "{0} [{1}, {2}] drop, DFPO - GSPO"),
    Finding("GRPO gains > 5 points over its start, minibatch reuse (gate; gain > 0 shown)", "3",
            "reuse G2"),
    Finding("GRPO gains > 5 points over its start, 2-step staleness (gate; gain > 0 shown)", "3",
            "stale G2"),
    Finding("GRPO gains > 5 points over its start, bf16 sampler (gate; gain > 0 shown)", "3",
            "bf16 G2"),
    Finding("Cancellation costs accuracy (Orth-Proj vs no transform)", "2", "exploratory",
            "{0} [{1}, {2}] AUC points", pair=("dfpo_orth_prod", "dfpo_none_prod")),
    Finding("DFPO beats a fairly clipped GSPO, minibatch reuse", "3", "reuse Q1",
            "{0} [{1}, {2}] AUC points"),
    Finding("DFPO beats a fairly clipped GSPO, 2-step staleness", "3", "stale Q1",
            "{0} [{1}, {2}] AUC points"),
    Finding("DFPO beats a fairly clipped GSPO, bf16 sampler", "3", "bf16 Q1",
            "{0} [{1}, {2}] AUC points"),
    Finding("DFPO removes the shared-token asymmetry", "1", "P3", "asym {0} vs {1}",
            r"asym: .*?means (\S+) vs ([^;\s]+)"),
    Finding("RL learns: GRPO beats its SFT start on held-out problems", "1", "V"),
    Finding("DFPO beats GSPO with its paper clip, under the dose", "2", "P1",
            "{0} [{1}, {2}] AUC points"),
)


def readme_word(cite: str, numbers: str, verdict: str) -> str:
    """The findings table's word for the engine's verdict: the same, except a gate that fails
    although its whole interval lies above 0 reads "not shown" (the gain its bar asks for was
    not shown; a reader must not take "fails" for "no gain": issue 47)."""
    word = verdict.split(" (")[0]
    interval = re.search(r"\[([+-]?\d+(?:\.\d+)?),", numbers)
    gate = cite.split()[-1].startswith("G")
    if word == "fails" and gate and interval and float(interval.group(1)) > 0:
        return "not shown"
    return word


def engine_rows(store: Store, folder: str) -> dict[str, tuple[str, str]]:
    """{id or "BLOCK ID": (numbers, verdict)} of the engine's verdict table."""
    table = store.verdicts(folder)[0]
    blocks = table.header[0] != "id"
    return {(f"{row[0]} {row[1]}" if blocks else row[0]): (row[-2], row[-1])
            for row in table.rows}


def _row(store: Store, f: Finding) -> tuple[str, str, str]:
    """(verdict, effect, evidence) of one finding."""
    folder, anchor = STUDIES[f.study]
    evidence = f"[study {f.study}, {f.cite}](docs/results.md#{anchor})"
    if f.pair is not None:
        stats = paired_on(store.aggregate(folder), "auc", *f.pair)
        if stats is None:
            raise ValueError(f"no paired units for {' - '.join(f.pair)} ({f.claim})")
        numbers = f"{stats['diff']:+.1f} [{stats['lo']:+.1f}, {stats['hi']:+.1f}]"
        verdict = "shown" if stats["hi"] < 0 else "not shown"
    else:
        rows = engine_rows(store, folder)
        if f.cite not in rows:
            raise ValueError(f"the verdict table has no row {f.cite!r} ({f.claim})")
        numbers, verdict = rows[f.cite]
        verdict = readme_word(f.cite, numbers, verdict)
    found = re.search(f.pattern, numbers)
    if found is None:
        raise ValueError(f"{f.cite}: no {f.pattern!r} in the engine's numbers {numbers!r}")
    return verdict, f.effect.format(*found.groups()), evidence


def findings_table(store: Store) -> str:
    rows = [(f.claim, *_row(store, f)) for f in FINDINGS]
    rank = {v: i for i, v in enumerate(ORDER)}
    rows.sort(key=lambda r: rank.get(r[1], len(ORDER)))
    lines = ["| claim | verdict | effect [95% CI] | evidence |", "|---|---|---|---|"]
    return "\n".join([*lines, *(f"| {' | '.join(r)} |" for r in rows)])


README = {"findings": Section("studies 1-4", (STUDY_1, STUDY_2, STUDY_3, STUDY_4),
                              findings_table)}
