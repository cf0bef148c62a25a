"""The paper's published numbers, as data (`repro paper-reference` writes them as Parquet).

Paper: "Design Conditions for Intra-Group Learning of Sequence-Level Rewards: Token Gradient
Cancellation", arXiv 2604.13088 v1 (v2 is a different method). The numbers were not read off the
PDF: they come from a secondary summary of v1 (tag [WK], a wiki summary of the PDF; [SEED], a
seed summary, unverified), and every row's note says which. Values the summary does not give
are left out, not guessed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from repro.results import PAPER_REFERENCE, write_table

SOURCE = "arXiv 2604.13088 v1, as given by a secondary summary of the paper (not read off the PDF)"
BASELINE = "GSPO"  # the paper's reference method
MAIN_MODEL = "Qwen3-32B"  # the model with every method in Table 1
OUR_LABELS = {  # paper method -> our run label
    "GRPO": "grpo",
    "GSPO": "gspo",
    "GRPO-fix": "grpo_fix",
    "DFPO (Min-Replace)": "dfpo_min",
    "DFPO": "dfpo_min",  # Tables 2 and 4 say DFPO; Min-Replace is the paper's main variant
}
BENCHMARK_LABELS = {"aime25": "AIME25", "hmmt25": "HMMT25", "livecodebench": "LiveCodeBench v6"}

_METHODS = ("GRPO", "GSPO", "GRPO-fix", "DFPO (Min-Replace)")
_TABLE1 = (  # benchmark, model, values in _METHODS order (None: not reported), note
    ("aime25", MAIN_MODEL, (76.9, 76.9, 80.6, 82.5), "[WK]"),
    ("livecodebench", MAIN_MODEL, (64.5, 64.7, 69.1, 71.6), "[WK]; LiveCodeBench v6"),
    ("hmmt25", MAIN_MODEL, (55.5, 55.8, 59.6, 61.4), "[WK]"),
    ("aime25", "Qwen3-Next-80B-A3B-Thinking", (None, 89.8, None, 93.2), "[WK]"),
    ("hmmt25", "Qwen3-Next-80B-A3B-Thinking", (None, 75.8, None, 80.1),
     "[SEED 004]: from a seed summary, unverified"),
)


def reference_rows() -> list[dict[str, Any]]:
    """One PAPER_REFERENCE row per published number."""
    rows = [
        _row("1", bench, model, method, None, "avg@32", value,
             f"{note}; avg@32 (%), compute-matched, 5 seeds")
        for bench, model, values, note in _TABLE1
        for method, value in zip(_METHODS, values, strict=True)
        if value is not None
    ]
    table2_note = "[WK][SEED]: training-reward threshold κ = 0.70 (unverified); model not stated"
    rows += [_row("2", None, None, method, None, "compute_rel_gspo", value, table2_note)
             for method, value in (("GSPO", 1.00), ("DFPO", 0.91))]
    rows += [_row("4", "aime25", MAIN_MODEL, "DFPO", g, "delta_vs_gspo", value,
                  "[WK]: avg@32 points, DFPO - GSPO; G = 4 and 8 not reported")
             for g, value in ((2, 3.1), (16, 5.7))]
    return rows


def write_reference(path: Path) -> None:
    write_table(reference_rows(), PAPER_REFERENCE, path, config={"source": SOURCE})


def _row(table: str, benchmark: str | None, model: str | None, method: str,
         group_size: int | None, metric: str, value: float, note: str) -> dict[str, Any]:
    return {"table": table, "benchmark": benchmark, "model": model, "method": method,
            "group_size": group_size, "metric": metric, "value": value, "note": note}
