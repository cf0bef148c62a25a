"""The real benchmark files in ../shared/data/real (see its README), and an offline mirror of
them in the hub layout of the benchmark specs' dataset ids.

The files are never copied into the repository: tests read them in place and build mirrors in
temporary folders. Where the folder is absent (a user's clone) the tests skip with the reason;
under CI (CI=true) its absence fails them, so they never skip there (`.ci/run` checks it too).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fixtures_hub import LCB_ID, LCB_SHARDS, write_aime, write_hmmt

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real"
LCB_RECORD = "lcb_codeforces_1873A.jsonl"


def real_dir() -> Path:
    """../shared/data/real, or skip (fail under CI) with the reason."""
    if (REAL / "aime25.jsonl").is_file():
        return REAL
    reason = (f"real benchmark data not found at {REAL} (../shared/data/real beside the "
              "repository, see the README's 'Real data' section)")
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason}; CI must run these tests")
    pytest.skip(reason)


def real_rows(name: str) -> list[dict]:
    """Rows of aime25.jsonl, hmmt25.jsonl or the LCB record file."""
    path = real_dir() / (name if name.endswith(".jsonl") else f"{name}.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_real_mirror(data_dir: Path) -> Path:
    """MathArena's hub layout and schema (`problem_idx`, `problem`, `answer`; AIME answers as
    integers, HMMT's as LaTeX strings) for the real AIME 2025 and HMMT February 2025 sets.
    The source files carry no `problem_type`; the mirror writes it as an empty list."""
    aime = [{"problem_idx": r["problem_idx"], "problem": r["problem"], "answer": int(r["answer"]),
             "problem_type": []} for r in real_rows("aime25")]
    hmmt = [{"problem_idx": r["problem_idx"], "problem": r["problem"], "answer": r["answer"],
             "problem_type": []} for r in real_rows("hmmt25")]
    write_aime(data_dir, rows=aime)
    write_hmmt(data_dir, rows=hmmt)
    return data_dir


def write_real_lcb_mirror(data_dir: Path) -> Path:
    """The real LCB record as shard 1 of `code_generation_lite` (its 2023-08-21 contest date
    lies in lcb-train's release_v5 window); shards 2-6 exist and are empty."""
    root = Path(data_dir) / LCB_ID
    root.mkdir(parents=True, exist_ok=True)
    for name in LCB_SHARDS:
        (root / name).write_bytes(b"")
    (root / "test.jsonl").write_bytes((real_dir() / LCB_RECORD).read_bytes())
    return root
