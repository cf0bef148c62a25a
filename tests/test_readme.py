"""The README as a front page (issue 39): short, in short sentences, and its findings table tied
to the committed aggregates.

The findings table's pre-registered rows are checked against the verdict tables that the one
verdict engine computes from each study's committed aggregate (the same tables `snakemake
tables` writes); its exploratory row is checked in tests/test_mechanism_claims.py.
"""

from __future__ import annotations

import re
import statistics
from functools import cache
from pathlib import Path

import pytest
from committed import committed

from repro.reporting.report_findings import readme_word  # the word rule `repro report` applies

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RESULTS = ROOT / "docs" / "results.md"
MAX_LINES = 150
MAX_MEDIAN_WORDS = 25
STUDIES = {"1": "tiny-study", "2": "mechanism-study",  # "study N" in the table -> its aggregate
           "3": "offpolicy-study", "4": "offpolicy4-study"}
NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?(?:e[+-]?\d+)?")
# [study N, ID] or, in a study with blocks, [study N, BLOCK ID] (e.g. "stale G2")
EVIDENCE = re.compile(r"\[study (\d), ((?:\w+ )?\w+)\]\(docs/results\.md#([\w-]+)\)")


def prose_sentences(lines: list[str]) -> list[str]:
    """Sentences of Markdown prose. Left out: fenced code blocks, table rows (lines starting
    with '|'), headings and blank lines. The remaining lines are joined into paragraphs (a
    blank line, a heading, a table or a '- ' bullet starts a new one; the bullet marker is
    dropped), and a paragraph is split into sentences after '.', '?' or '!' followed by
    whitespace; a paragraph's end also ends a sentence."""
    paragraphs: list[list[str]] = [[]]
    fenced = False
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
            paragraphs.append([])
            continue
        if fenced or not stripped or stripped.startswith(("|", "#")):
            paragraphs.append([])
            continue
        if stripped.startswith("- "):
            paragraphs.append([])
            stripped = stripped[2:]
        paragraphs[-1].append(stripped)
    sentences = []
    for paragraph in paragraphs:
        text = " ".join(paragraph)
        sentences += [s for s in re.split(r"(?<=[.?!])\s+", text) if s.strip()]
    return sentences


def words(sentence: str) -> int:
    """Whitespace-separated tokens holding at least one letter or digit."""
    return sum(1 for token in sentence.split() if re.search(r"\w", token))


def test_the_readme_is_at_most_150_lines():
    n = len(README.read_text().splitlines())
    assert n <= MAX_LINES, f"README.md has {n} lines; move the detail to docs/ (<= {MAX_LINES})"


def test_the_median_sentence_of_the_readmes_first_100_lines_is_short():
    sentences = prose_sentences(README.read_text().splitlines()[:100])
    assert len(sentences) >= 20, sentences  # the splitter found the prose
    lengths = [words(s) for s in sentences]
    median = statistics.median(lengths)
    assert median <= MAX_MEDIAN_WORDS, (median, max(zip(lengths, sentences, strict=True)))


def test_the_sentence_counter_counts_what_its_docstring_says():
    text = ["# Title", "", "One two three. Four five", "six seven!", "", "- A bullet here.",
            "- Another", "", "| a | table | row |", "```bash", "not. counted. at all.", "```"]
    assert [words(s) for s in prose_sentences(text)] == [3, 4, 3, 1]


def findings() -> list[dict[str, str]]:
    """Rows of the README's findings table (the table whose header starts with 'claim')."""
    lines = README.read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("| claim |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, (c.strip() for c in line.strip("|").split("|")),
                             strict=True)))
    return rows


@cache
def computed_verdicts(study: str) -> dict[str, tuple[str, str]]:
    """{id: (numbers, verdict)} of the verdict table the engine computes from the committed
    aggregate of `study`; where the table has blocks (study 3's sources), {"BLOCK ID": ...}."""
    from repro.reporting.load import load_aggregate
    from repro.reporting.verdict import verdict_tables

    table = verdict_tables(load_aggregate(committed(f"results/{study}/aggregate")))[0]
    assert table.header[-3:] == ["prediction", "numbers", "verdict"], table.header
    if table.header[0] == "id":
        return {row[0]: (row[-2], row[-1]) for row in table.rows}
    assert table.header[1] == "id", table.header
    return {f"{row[0]} {row[1]}": (row[-2], row[-1]) for row in table.rows}


def test_the_findings_table_names_each_studys_evidence():
    rows = findings()
    assert list(rows[0]) == ["claim", "verdict", "effect [95% CI]", "evidence"], list(rows[0])
    cited = [EVIDENCE.fullmatch(r["evidence"]) for r in rows]
    assert all(cited), [r["evidence"] for r, m in zip(rows, cited, strict=True) if not m]
    assert {m.group(1) for m in cited} == set(STUDIES)  # every study is in the table


def cited(row: dict[str, str]) -> tuple[str, str]:
    """(study number, prediction id or 'exploratory') of a findings row."""
    return EVIDENCE.fullmatch(row["evidence"]).group(1, 2)


PRE_REGISTERED = [row for row in findings() if cited(row)[1] != "exploratory"]


@pytest.mark.parametrize("row", PRE_REGISTERED, ids=lambda r: "study {}, {}".format(*cited(r)))
def test_each_pre_registered_finding_is_what_its_committed_aggregate_gives(row):
    """The verdict word is the engine's, and every number of the effect cell is one of the
    numbers the engine's table shows for that prediction (the exploratory row:
    tests/test_mechanism_claims.py)."""
    study, pid = cited(row)
    numbers, verdict = computed_verdicts(STUDIES[study])[pid]
    assert row["verdict"] == readme_word(pid, numbers, verdict), (pid, row["verdict"], verdict)
    shown = NUMBER.findall(row["effect [95% CI]"])
    assert shown, row
    assert set(shown) <= set(NUMBER.findall(numbers)), (pid, shown, numbers)


def test_a_failed_gate_above_zero_reads_not_shown_and_only_then():
    assert readme_word("reuse G2", "Δ = +7.4 [+0.4, +15.2] points, 3 units", "fails") == \
        "not shown"
    assert readme_word("reuse G2", "Δ = +4.0 [-0.4, +9.2] points, 3 units", "fails") == "fails"
    assert readme_word("P2", "AUC Δ = -4.3 [-6.4, -2.5] points", "fails") == "fails"
    assert readme_word("P1", "AUC Δ = +9.4 [+7.0, +11.8] points", "holds") == "holds"


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).strip().replace(" ", "-")


@pytest.mark.parametrize("page", [README, RESULTS], ids=["README.md", "docs/results.md"])
def test_links_into_the_results_page_reach_a_heading(page):
    anchors = {slug(ln.lstrip("#")) for ln in RESULTS.read_text().splitlines()
               if ln.startswith("#")}
    links = re.findall(r"\((?:docs/results\.md)?#([\w-]+)\)", page.read_text())
    assert links, page
    assert set(links) <= anchors, sorted(set(links) - anchors)


def test_every_relative_link_of_the_readme_reaches_a_file_and_every_page_is_indexed():
    """The README's last section is the index of docs/: each Markdown page there is linked."""
    links = re.findall(r"\]\(([^)#:]+)(?:#[\w-]*)?\)", README.read_text())
    assert [link for link in links if not (ROOT / link).is_file()] == []
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert pages - set(links) == set(), "pages missing from the README's index"
