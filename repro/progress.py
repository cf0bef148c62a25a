"""Progress of long loops: a tqdm bar on a terminal, periodic one-line reports elsewhere.

Inside Snakemake logs (or any redirected stderr) a bar's carriage returns pile up into one huge
line per job; there a plain line every `every` seconds (and one at the end) says the same.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from tqdm import tqdm

LINE_EVERY_S = 30.0


class LineProgress:
    """The subset of tqdm's interface the project uses, written as occasional whole lines."""

    def __init__(self, total: int, desc: str, unit: str, *, initial: int = 0,
                 stream: TextIO | None = None, every: float = LINE_EVERY_S) -> None:
        self.total, self.desc, self.unit, self.n = total, desc, unit, initial
        self.stream = stream or sys.stderr
        self.every = every
        self.start = self.last = time.monotonic()
        self.postfix = ""

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            self._line(now)

    def set_postfix(self, **values: Any) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def _line(self, now: float) -> None:
        elapsed = now - self.start
        share = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        rate = self.n / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.n) / rate if rate > 0 and self.total else None
        eta = f", ~{left:.0f} s left" if left is not None else ""
        extra = f", {self.postfix}" if self.postfix else ""
        print(f"{self.desc}: {self.n}/{self.total} {self.unit}{share}, {elapsed:.0f} s{eta}{extra}",
              file=self.stream, flush=True)

    def close(self) -> None:
        self._line(time.monotonic())

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress(total: int, desc: str, unit: str = "it", *, initial: int = 0,
             stream: TextIO | None = None) -> Any:
    """A tqdm bar when `stream` (default stderr) is a terminal, else a `LineProgress`."""
    stream = stream or sys.stderr
    if stream.isatty():
        return tqdm(total=total, desc=desc, unit=unit, initial=initial, file=stream)
    return LineProgress(total, desc, unit, initial=initial, stream=stream)
