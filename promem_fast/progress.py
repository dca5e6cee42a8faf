"""Progress of a run on stderr: tqdm's bar on a terminal, a plain line every few sessions elsewhere.

A bar redrawn with carriage returns turns a log file or a CI console into one unreadable line, and showing
nothing leaves a long run silent for hours; a plain line now and then reads well in both.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

PLAIN_EVERY = 100
"""Sessions between two plain lines at most (fewer for short runs: about ten lines a run)."""


class PlainProgress:
    """``extract: 200/1000 sessions (20%), 3.1 sessions/s`` every ``every`` sessions and at the end."""

    def __init__(self, total: int | None, stream: TextIO, every: int | None = None) -> None:
        self.total, self.stream, self.done = total, stream, 0
        self.every = every or (max(1, min(PLAIN_EVERY, total // 10)) if total else PLAIN_EVERY)
        self._started = time.perf_counter()

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.done % self.every == 0 or self.done == self.total:
            self._line()

    def close(self) -> None:
        if self.done % self.every and self.done != self.total:
            self._line()

    def _line(self) -> None:
        elapsed = time.perf_counter() - self._started
        rate = f", {self.done / elapsed:.3g} sessions/s" if elapsed > 0 else ""
        share = f" ({100 * self.done // self.total}%)" if self.total else ""
        of = f"/{self.total}" if self.total else ""
        print(f"extract: {self.done}{of} sessions{share}{rate}", file=self.stream, flush=True)


def progress(enabled: bool, total: int | None) -> Any:
    """A bar on a terminal, plain lines otherwise, or ``None`` when progress is off."""
    if not enabled:
        return None
    if sys.stderr.isatty():
        from tqdm import tqdm

        return tqdm(total=total, unit="session", desc="extract", dynamic_ncols=True)
    return PlainProgress(total, sys.stderr)
