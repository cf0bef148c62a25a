"""LiveCodeBench shards: release tag -> files, contest-date window, test decoding, pins.

The hub repo `livecodebench/code_generation_lite` is read as plain JSONL shards (its loading
script no longer runs under `datasets` >= 4). Private tests are mostly stored as
base64 -> zlib -> pickle -> JSON; pickle from a downloaded file is only decoded when the file's
sha256 matches a pinned value, and then with an unpickler that refuses every global.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import io
import json
import pickle
import re
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


class ShardIntegrityError(ValueError):
    """A shard's sha256 does not match its pin, or pickled tests come from an unpinned shard."""


class PickleRefused(ValueError):
    """Private tests are pickled but the caller did not allow unpickling (no verified pin)."""


def shards_for_release(tag: str, shards: Sequence[str]) -> tuple[str, ...]:
    """LCB tags: release_vN = shards 1..N, vN = shard N, vA_vB = shards A..B,
    release_latest = all."""
    count = len(shards)
    forms = f"release_vN, vN or vA_vB with 1 <= N <= {count}, or release_latest"
    if tag == "release_latest":
        return tuple(shards)
    if match := re.fullmatch(r"release_v(\d+)", tag):
        first, last = 1, int(match[1])
    elif match := re.fullmatch(r"v(\d+)", tag):
        first = last = int(match[1])
    elif match := re.fullmatch(r"v(\d+)_v(\d+)", tag):
        first, last = int(match[1]), int(match[2])
    else:
        raise ValueError(f"unknown LiveCodeBench release tag {tag!r}; use {forms}")
    if not 1 <= first <= last <= count:
        raise ValueError(f"release tag {tag!r} is out of range; use {forms}")
    return tuple(shards[first - 1 : last])


def as_datetime(value: str | dt.date | None) -> dt.datetime | None:
    """A window bound as LCB compares it: a date means midnight of that day."""
    if value is None or isinstance(value, dt.datetime):
        return value
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day)
    return dt.datetime.fromisoformat(value)


def in_window(contest_date: str, start: dt.datetime | None, end: dt.datetime | None) -> bool:
    """LCB's compute_scores filter: start <= contest_date <= end, both inclusive."""
    when = dt.datetime.fromisoformat(contest_date)
    return (start is None or start <= when) and (end is None or when <= end)


def read_shard(path: Path, keep: Callable[[dict[str, Any]], bool]) -> tuple[list[dict], str]:
    """Rows kept by `keep` and the sha256 of exactly the bytes they were parsed from."""
    digest = hashlib.sha256()
    rows = []
    with path.open("rb") as handle:
        for line in handle:
            digest.update(line)
            if line.strip():
                row = json.loads(line)
                if keep(row):
                    rows.append(row)
    return rows, digest.hexdigest()


def check_pin(name: str, actual: str, pins: dict[str, str]) -> bool:
    """True if `name` is pinned and matches (pickle allowed); a mismatch is always an error."""
    pinned = pins.get(name)
    if pinned is None:
        return False
    if pinned.lower() != actual:
        raise ShardIntegrityError(
            f"{name}: sha256 {actual} does not match the pinned sha256 {pinned}; refusing to "
            "read it (a different revision or a modified file)"
        )
    return True


def decode_tests(raw: str, *, allow_pickle: bool) -> list[dict[str, Any]]:
    """LCB's order: plain JSON first, else base64 -> zlib -> pickle -> JSON."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        pass
    if not allow_pickle:
        raise PickleRefused("private tests are stored as a pickle (base64 -> zlib -> pickle)")
    text = _StringsOnly(io.BytesIO(zlib.decompress(base64.b64decode(raw)))).load()
    if not isinstance(text, str):
        raise ValueError(f"pickled tests hold a {type(text).__name__}, expected a JSON string")
    return json.loads(text)


class _StringsOnly(pickle.Unpickler):
    """Loads plain data only: LCB pickles a str, so any global reference is an attack."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")
