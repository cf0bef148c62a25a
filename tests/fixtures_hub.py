"""Write small benchmark fixtures in the exact hub layouts (invented problems, never real ones).

`write_*` take a DATA_DIR and write `DATA_DIR/<dataset id>/...` as `hf download ID --repo-type
dataset --local-dir DATA_DIR/ID` would: MathArena repos hold `data/train-00000-of-00001.parquet`
(+ a README whose `configs` point `train` at `data/train-*`, as on the hub), LiveCodeBench holds
the JSONL shards `test.jsonl`, `test2.jsonl` ... `test6.jsonl` at the repo root. Passing `commit`
also writes the `.cache/huggingface/download/<file>.metadata` record `hf download` leaves.
The LCB private-test encoder is written out here on purpose, independent of the code under test.
"""

from __future__ import annotations

import base64
import hashlib
import json
import pickle
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

AIME_ID = "MathArena/aime_2025"
HMMT_ID = "MathArena/hmmt_feb_2025"
LCB_ID = "livecodebench/code_generation_lite"
MATHARENA_FILE = "data/train-00000-of-00001.parquet"
LCB_SHARDS = ["test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl",
              "test6.jsonl"]

AIME_ROWS = [
    {"problem_idx": 1, "problem": "Fixture A1: find the sum of all positive divisors of $28$.",
     "answer": 56, "problem_type": ["Number Theory"]},
    {"problem_idx": 2, "problem": "Fixture A2: how many lattice points lie on $x^2+y^2=25$?",
     "answer": 12, "problem_type": ["Geometry"]},
    {"problem_idx": 3, "problem": "Fixture A3: compute $7^3 \\bmod 1000$.",
     "answer": 343, "problem_type": ["Number Theory", "Algebra"]},
]
HMMT_ROWS = [
    {"problem_idx": 1, "problem": "Fixture H1: compute $\\frac{1}{3}+\\frac{2}{5}$.",
     "answer": "\\frac{11}{15}", "problem_type": ["Algebra"]},
    {"problem_idx": 2, "problem": "Fixture H2: the diagonal of a square of side $4$.",
     "answer": "4\\sqrt{2}", "problem_type": ["Geometry"]},
    {"problem_idx": 3, "problem": "Fixture H3: the area outside a unit circle inside its "
     "circumscribed square, divided by 4.", "answer": "1-\\frac{\\pi}{4}",
     "problem_type": ["Geometry"]},
    {"problem_idx": 4, "problem": "Fixture H4: compute $6! \\cdot 2^{10}$ in factored form.",
     "answer": "2^{10} \\cdot 6!", "problem_type": ["Combinatorics"]},
    {"problem_idx": 5, "problem": "Fixture H5: both roots of $x^2-x-1=0$.",
     "answer": "\\frac{1+\\sqrt{5}}{2}, \\frac{1-\\sqrt{5}}{2}", "problem_type": ["Algebra"]},
]
MATH_SCHEMA = {
    AIME_ID: pa.schema([("problem_idx", pa.int64()), ("problem", pa.string()),
                        ("answer", pa.int64()), ("problem_type", pa.list_(pa.string()))]),
    HMMT_ID: pa.schema([("problem_idx", pa.int64()), ("problem", pa.string()),
                        ("answer", pa.string()), ("problem_type", pa.list_(pa.string()))]),
}
README = """---
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*
---
# Test fixture: invented problems in the layout of {dataset}
"""

SUM_STARTER = "class Solution:\n    def pairSum(self, nums: List[int], k: int) -> int:\n        "


def lcb_compress(tests: list[dict[str, str]]) -> str:
    """LCB's private-test storage: JSON string -> pickle -> zlib -> base64."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def lcb_row(
    question_id: str, contest_date: str, *, functional: bool = False, compressed: bool = True
) -> dict[str, Any]:
    """One LCB row: every structured column a JSON string, as on the hub."""
    if functional:
        testtype, meta, starter = "functional", {"func_name": "pairSum"}, SUM_STARTER
        public = [{"input": "[1, 2, 3]\n2", "output": "5", "testtype": testtype}]
        private = [{"input": "[4]\n1", "output": "4", "testtype": testtype},
                   {"input": "[0, 0]\n2", "output": "0", "testtype": testtype}]
    else:
        testtype, meta, starter = "stdin", {}, ""
        public = [{"input": "3\n1 2 3\n", "output": "6\n", "testtype": testtype}]
        private = [{"input": "1\n7\n", "output": "7\n", "testtype": testtype},
                   {"input": "2\n-1 1\n", "output": "0\n", "testtype": testtype}]
    return {
        "question_title": f"Fixture {question_id}",
        "question_content": f"Fixture {question_id}: print the sum of the given integers.",
        "platform": "leetcode" if functional else "atcoder",
        "question_id": question_id,
        "contest_id": question_id.split("_")[0],
        "contest_date": contest_date,
        "starter_code": starter,
        "difficulty": "easy",
        "public_test_cases": json.dumps(public),
        "private_test_cases": lcb_compress(private) if compressed else json.dumps(private),
        "metadata": json.dumps(meta),
    }


# shard -> rows; v6 (test6.jsonl) has both window bounds, an inside row, and rows outside it
LCB_ROWS = {
    "test.jsonl": [lcb_row("abc301_a", "2023-05-13T00:00:00"),
                   lcb_row("9001", "2023-06-04T00:00:00", functional=True, compressed=False)],
    "test2.jsonl": [lcb_row("abc350_b", "2024-04-20T00:00:00", compressed=False)],
    "test3.jsonl": [lcb_row("abc360_c", "2024-06-30T00:00:00")],
    "test4.jsonl": [lcb_row("9002", "2024-08-11T00:00:00", functional=True)],
    "test5.jsonl": [lcb_row("abc388_d", "2025-01-11T00:00:00"),
                    lcb_row("abc390_a", "2025-02-01T00:00:00", compressed=False)],
    "test6.jsonl": [
        lcb_row("abc400_c", "2025-05-01T00:00:00"),  # end bound, inclusive
        lcb_row("9104", "2025-03-16T00:00:00", functional=True),
        lcb_row("abc391_b", "2025-02-01T00:00:00", compressed=False),  # start bound, inclusive
        lcb_row("abc390_z", "2025-01-31T00:00:00"),  # one day early
        lcb_row("abc401_a", "2025-05-02T00:00:00", compressed=False),  # one day late
    ],
}


def write_aime(data_dir: Path, commit: str | None = None, rows: list[dict] | None = None) -> Path:
    return _write_matharena(Path(data_dir) / AIME_ID, AIME_ID, rows or AIME_ROWS, commit)


def write_hmmt(data_dir: Path, commit: str | None = None, rows: list[dict] | None = None) -> Path:
    return _write_matharena(Path(data_dir) / HMMT_ID, HMMT_ID, rows or HMMT_ROWS, commit)


def write_lcb(data_dir: Path, commit: str | None = None) -> dict[str, str]:
    """Write the six shards; returns their sha256 pins (file name -> sha256)."""
    root = Path(data_dir) / LCB_ID
    root.mkdir(parents=True, exist_ok=True)
    pins = {}
    for name, rows in LCB_ROWS.items():
        data = "".join(json.dumps(row) + "\n" for row in rows).encode()
        (root / name).write_bytes(data)
        pins[name] = hashlib.sha256(data).hexdigest()
        _record_commit(root, name, commit)
    return pins


def write_hub_cache(cache_dir: Path, dataset_id: str, commit: str, write: Any) -> Path:
    """A standard HF hub cache entry (refs/main -> snapshots/<commit>) filled by `write`."""
    repo = Path(cache_dir) / ("datasets--" + dataset_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    staging = repo / "staging"
    write(staging)  # writes staging/<dataset id>/...
    snapshot = repo / "snapshots" / commit
    snapshot.parent.mkdir(parents=True)
    (staging / dataset_id).rename(snapshot)
    return snapshot


def _write_matharena(root: Path, dataset_id: str, rows: list[dict], commit: str | None) -> Path:
    (root / "data").mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=MATH_SCHEMA[dataset_id])
    pq.write_table(table, root / MATHARENA_FILE)
    (root / "README.md").write_text(README.format(dataset=dataset_id))
    _record_commit(root, MATHARENA_FILE, commit)
    return root


def _record_commit(root: Path, name: str, commit: str | None) -> None:
    if commit is not None:
        meta = root / ".cache" / "huggingface" / "download" / f"{name}.metadata"
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_text(f"{commit}\netag\n{(root / name).stat().st_mtime}\n")
