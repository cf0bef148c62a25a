"""`repro report`: the data tables of the project's pages (docs/results.md, the README's
findings table), regenerated between their fences

    <!-- repro report: NAME -->

    ...generated: edit the section's code (report_sections), not the page...

    <!-- /repro report -->

from the committed aggregates (repro.reporting.report_sections). Every section is built before
a page is touched, and a page is written atomically, so bad input (an aggregate that lacks a
table) leaves it as it was. `check` returns the unified diff a rerun would make instead."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from repro.atomic import atomic_file
from repro.reporting.aggregate import CURVES_OUT, PROBLEMS_OUT, RUNS_OUT
from repro.reporting.report_findings import README
from repro.reporting.report_sections import RESULTS, Section, Store

# page -> section name -> Section
SECTIONS: dict[str, dict[str, Section]] = {"docs/results.md": RESULTS, "README.md": README}

FENCE = re.compile(r"^<!-- repro report: ([\w-]+) -->\n(.*?)^<!-- /repro report -->$",
                   re.S | re.M)
OPEN = re.compile(r"^<!-- (/?)repro report", re.M)


class ReportError(ValueError):
    """Bad input: one line naming the page, section, study and what is missing."""


def build(store: Store, sections: dict[str, Section], page: str) -> dict[str, str]:
    """Every section's Markdown; each aggregate is checked for the tables it needs first."""
    for name, section in sections.items():
        for folder in section.aggregates:
            for table in (CURVES_OUT, RUNS_OUT, PROBLEMS_OUT):
                if not (store.root / folder / table).is_file():
                    raise ReportError(f"{page}, section {name}: {section.study}'s aggregate "
                                      f"{folder} lacks its {table.split('.')[0]} table "
                                      f"({table}); the page is unchanged")
    out = {}
    for name, section in sections.items():
        try:
            out[name] = section.build(store).rstrip("\n")
        except (ValueError, KeyError, OSError) as err:
            raise ReportError(f"{page}, section {name} ({section.study}, "
                              f"{', '.join(section.aggregates)}): {err}; the page is "
                              "unchanged") from None
    return out


def fill(text: str, built: dict[str, str], page: str) -> str:
    """`text` with every fence's body replaced by its section; a fence the page lacks, an
    unknown or repeated one, or an unclosed one is an error."""
    found = [m.group(1) for m in FENCE.finditer(text)]
    if len(OPEN.findall(text)) != 2 * len(found):
        raise ReportError(f"{page}: a '<!-- repro report' fence is not closed or not on its "
                          "own line")
    problems = [f"unknown section {n!r}" for n in found if n not in built]
    problems += [f"section {n!r} twice" for n in set(found) if found.count(n) > 1]
    problems += [f"no fence for section {n!r}" for n in built if n not in found]
    if problems:
        raise ReportError(f"{page}: {'; '.join(problems)}")
    return FENCE.sub(lambda m: f"<!-- repro report: {m.group(1)} -->\n\n{built[m.group(1)]}"
                               "\n\n<!-- /repro report -->", text)


def regenerate(root: Path) -> dict[str, tuple[str, str]]:
    """page -> (its text now, its text regenerated), every section built first."""
    store, built = Store(root), {}
    for page, sections in SECTIONS.items():  # every section of every page before any write
        built[page] = build(store, sections, page)
    out = {}
    for page in SECTIONS:
        text = (root / page).read_text(encoding="utf-8")
        out[page] = (text, fill(text, built[page], page))
    return out


def check(root: Path) -> str:
    """The unified diff between the pages and what `repro report` would write ("" if none)."""
    return "".join("".join(difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"{page} (committed)",
        f"{page} (repro report)")) for page, (old, new) in regenerate(root).items())


def write(root: Path) -> list[str]:
    """Regenerate every page's sections; the pages that changed."""
    changed = []
    for page, (old, new) in regenerate(root).items():
        if new != old:
            atomic_file(root / page, lambda tmp, new=new: tmp.write_text(new, encoding="utf-8"))
            changed.append(page)
    return changed
