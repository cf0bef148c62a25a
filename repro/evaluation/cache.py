"""Resumable generation: each finished batch of completions is appended to a cache in the
evaluation's output folder, so an evaluation killed mid-run (preemption, OOM) regenerates only
the batches it had not finished.

A batch's entry is keyed by everything its completions depend on: the model (hub id, or each
file's name, size and mtime for a local folder, so a retrained policy never reuses old
samples), the engine, the sampling parameters, the batch's position and its prompts. The
engines seed each call from the sampling seed and the position within the call, so a resumed
run produces exactly what an uninterrupted one would. A torn last line (killed while writing)
is ignored. The cache is deleted once the result tables are written.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from repro.generation.base import Completion

CACHE_FILE = ".generation-cache.jsonl"


def model_identity(model: str | Path) -> Any:
    path = Path(model)
    if not path.is_dir():
        return str(model)
    return [[str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns]
            for p in sorted(path.rglob("*")) if p.is_file()]


class GenerationCache:
    """Completed batches of one evaluation, read back on resume."""

    def __init__(self, folder: Path, model: str | Path, engine: str, sampling: dict[str, Any]):
        self.path = Path(folder) / CACHE_FILE
        self._base = json.dumps({"model": model_identity(model), "engine": engine,
                                 "sampling": sampling}, sort_keys=True, default=str)
        self._done: dict[str, list[list[Completion]]] = {}
        if self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                    self._done[entry["key"]] = [[Completion(c["text"], tuple(c["token_ids"]),
                                                            c["finish_reason"]) for c in row]
                                                for row in entry["completions"]]
                except (ValueError, KeyError, TypeError):
                    continue  # a line torn by a kill: that batch is generated again

    def _key(self, start: int, prompts: list[str]) -> str:
        h = hashlib.sha256(self._base.encode())
        h.update(json.dumps([start, prompts]).encode())
        return h.hexdigest()

    def get(self, start: int, prompts: list[str]) -> list[list[Completion]] | None:
        return self._done.get(self._key(start, prompts))

    def put(self, start: int, prompts: list[str], rows: list[list[Completion]]) -> None:
        """Append one finished batch (flushed to disk before the next batch starts)."""
        key = self._key(start, prompts)
        self._done[key] = rows
        line = json.dumps({"key": key, "completions": [[{
            "text": c.text, "token_ids": list(c.token_ids), "finish_reason": c.finish_reason,
        } for c in row] for row in rows]})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    @property
    def resumed(self) -> int:
        return len(self._done)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
