"""The rehearsal's offline data: a mirror in the hub layout of every file the paper presets read
(what `hf download ID --repo-type dataset --local-dir DIR/ID` writes), then the lock that `repro
data pin` writes for it, as a user on an offline cluster does (docs/gpu.md, "Real datasets").

- MathArena/aime_2025, MathArena/hmmt_feb_2025: the real problems and answers of the folder
  given (../shared/data/real: aime25.jsonl, hmmt25.jsonl), in MathArena's parquet schema.
- livecodebench/code_generation_lite: shard 1 holds the one real record
  (lcb_codeforces_1873A.jsonl, 2023-08-21: lcb-train's release_v5 window, pickled private
  tests) and synth-lcb train rows dated into that window (short prompts: the real statement is
  ~2k tokens of the character tokenizer, which made it most of a step's compute when it was
  lcb-train's only row), shard 6 synth-lcb eval rows (LCB's row schema, contest dates in the v6
  window: the evaluation's), shards 2-5 empty.
- open-r1/OpenR1-Math-220k: synth-aime rows in OpenR1's columns (uuid, problem, answer,
  problem_type, source), since no real row of it is stored here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from repro.benchmarks import benchmark_names, get_benchmark
from repro.benchmarks.pins import pin
from repro.tasks.synth_aime import rows as synth_aime_rows
from repro.tasks.synth_lcb import rows as synth_lcb_rows

# Every benchmark the registry loads from the hub (a synthetic one needs no mirror); the paper
# presets read exactly these (tests/test_rehearse.py).
BENCHMARKS = tuple(n for n in benchmark_names() if get_benchmark(n).source != "synthetic")
PARQUET = "data/train-00000-of-00001.parquet"
LCB_RECORD = "lcb_codeforces_1873A.jsonl"
LCB_EVAL_ROWS = 8  # synth-lcb rows in shard 6
LCB_TRAIN_ROWS = 7  # synth-lcb rows beside the real record in shard 1
LCB_TRAIN_DATE = "2024-06-01T00:00:00"  # inside lcb-train's window (2023-05-01..2025-01-31)
OPENR1_ROWS = 64
README = ("---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: "
          "data/train-*\n---\n# Rehearsal mirror of {dataset} (repro/bench/rehearse_data.py)\n")
MATHARENA = {  # benchmark -> (real file, answer type): AIME answers are integers, HMMT's LaTeX
    "aime25": ("aime25.jsonl", pa.int64()),
    "hmmt25": ("hmmt25.jsonl", pa.string()),
}


def write_mirror(real_dir: Path, data_dir: Path) -> None:
    """Write every dataset of BENCHMARKS under `data_dir` (hub layout); `real_dir` holds the
    real files (its README says where they come from)."""
    missing = [name for name in (*[f for f, _ in MATHARENA.values()], LCB_RECORD)
               if not (real_dir / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{real_dir}: lacks {missing} (the real benchmark files, "
                                "../shared/data/real beside the repository)")
    for name, (file, answer) in MATHARENA.items():
        rows = [json.loads(line) for line in (real_dir / file).read_text().splitlines() if line]
        schema = pa.schema([("problem_idx", pa.int64()), ("problem", pa.string()),
                            ("answer", answer), ("problem_type", pa.list_(pa.string()))])
        _parquet(data_dir, get_benchmark(name).dataset, schema, [
            {"problem_idx": r["problem_idx"], "problem": r["problem"],
             "answer": int(r["answer"]) if answer == pa.int64() else r["answer"],
             "problem_type": []} for r in rows])

    spec = get_benchmark("livecodebench")
    root = data_dir / spec.dataset
    root.mkdir(parents=True, exist_ok=True)
    for shard in spec.shards:
        (root / shard).write_bytes(b"")
    train = [row | {"contest_date": LCB_TRAIN_DATE} for row in
             synth_lcb_rows("train", LCB_TRAIN_ROWS, 0)]
    (root / spec.shards[0]).write_bytes((real_dir / LCB_RECORD).read_bytes() + "".join(
        json.dumps(row) + "\n" for row in train).encode())
    synth = synth_lcb_rows("eval", LCB_EVAL_ROWS, 0)
    (root / spec.shards[-1]).write_text("".join(json.dumps(row) + "\n" for row in synth))

    schema = pa.schema([(c, pa.string()) for c in
                        ("uuid", "problem", "answer", "problem_type", "source")])
    _parquet(data_dir, get_benchmark("openr1-math").dataset, schema, [
        {"uuid": f"synth-aime-{r['problem_idx']}", "problem": r["problem"],
         "answer": str(r["answer"]), "problem_type": r["problem_type"][0],
         "source": "synth-aime"} for r in synth_aime_rows("train", OPENR1_ROWS, 0)])


def write_mirror_and_lock(real_dir: Path, folder: Path) -> Path:
    """`folder/hub` (the mirror) and `folder/data.lock.yaml` pinning every file of it, written
    by `repro data pin`'s own code (no download: the files are there). Returns the lock."""
    write_mirror(real_dir, folder / "hub")
    lock = folder / "data.lock.yaml"
    pin([get_benchmark(name) for name in BENCHMARKS], folder / "hub", lock)
    return lock


def _parquet(data_dir: Path, dataset: str, schema: pa.Schema, rows: list[dict]) -> None:
    root = data_dir / dataset
    (root / "data").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), root / PARQUET)
    (root / "README.md").write_text(README.format(dataset=dataset))
