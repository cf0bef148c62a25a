"""The README defines its words one click away (issue 49): every term its findings table and
front page use without defining, and every kind of id the table cites, is a bold entry of
docs/glossary.md, which the README links."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README, GLOSSARY = ROOT / "README.md", ROOT / "docs" / "glossary.md"
# the words a newcomer met undefined on the front page (issue 49), and the verdict words
TERMS = ("AUC points", "Min-Replace", "Orth-Proj", "Paper clip", "Stage 1", "Committed RL start",
         "Dose", "invalid regime", "holds", "fails", "not shown", "inconclusive", "asym",
         "GSPO", "GRPO", "DFPO", "Fair clip", "Entropy drop", "Points")


def defined() -> set[str]:
    """The bold entries of the glossary (a bullet's '**term**', and '**id**' groups)."""
    return {m.lower() for m in re.findall(r"\*\*([^*]+)\*\*", GLOSSARY.read_text())}


def test_every_term_is_defined_and_linked():
    assert "(docs/glossary.md)" in README.read_text()
    terms = defined()
    assert [t for t in TERMS if t.lower() not in terms] == []


def test_every_id_the_findings_table_cites_is_defined():
    """Ids: V, G1-G3, P1-P9, Q1-Q6; the glossary names each family ("P1-P9") or id."""
    cited = set(re.findall(r"\[study \d, (?:\w+ )?(\w+)\]", README.read_text())) - {"exploratory"}
    terms = defined()
    families = {f: range(int(a), int(b) + 1) for f, a, b in
                (re.fullmatch(r"([a-z])(\d)-[a-z](\d)", t).groups() for t in terms
                 if re.fullmatch(r"[a-z]\d-[a-z]\d", t))}
    missing = [i for i in cited if i.lower() not in terms
               and not (i[0].lower() in families and int(i[1:]) in families[i[0].lower()])]
    assert cited and missing == [], missing
