"""Progress of long ``fluss-spark`` work on stderr: a bar on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, TextIO


class Progress:
    """Rows done out of ``total`` (None: unknown) for ``what``, shown while the work runs.

    On a terminal: a ``rich`` progress bar (rows done, rate, time left). Elsewhere (a pipe, a
    log file), with ``lines``: a plain line at most every ``every_s`` seconds, the first once
    ``every_s`` has passed, so short work prints nothing; without ``lines``: nothing.
    ``enabled=False`` (``--json``) shows nothing anywhere. Used as a context manager, or
    closed with ``close()``.
    """

    def __init__(self, what: str, total: int | None, enabled: bool = True, *,
                 lines: bool = False, out: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic, every_s: float = 1.0):
        self.what, self.total = what, total
        self.out = out or sys.stderr
        self.clock, self.every_s = clock, every_s
        self.done = 0
        self._started = self._last = clock()
        self._bar: Any = None
        self._task: Any = None
        self.lines = enabled and lines
        if enabled and self.out.isatty():
            self._bar = _rich_bar(self.out)
            if self._bar is not None:
                self._task = self._bar.add_task(what, total=total)
                self._bar.start()
                self.lines = False

    def add(self, n: int) -> None:
        """Count ``n`` more rows (once per batch, not per row)."""
        self.done += n
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done)
        elif self.lines:
            now = self.clock()
            if now - self._last >= self.every_s:
                self._last = now
                self.out.write(self.line(now) + "\n")
                self.out.flush()

    def line(self, now: float) -> str:
        """The plain progress line: rows done (of the total, in percent) and the rate."""
        rate = self.done / max(now - self._started, 1e-9)
        done = (f"{self.done:,}/{self.total:,} rows ({100 * self.done // self.total}%)"
                if self.total else f"{self.done:,} rows")
        return f"{self.what}: {done}, {rate:,.0f} rows/s"

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _rich_bar(out: TextIO) -> Any:
    """A ``rich`` progress bar writing to ``out``, or None where rich is not installed (the
    plain lines stand in)."""
    try:
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress as RichProgress,
                                   TextColumn, TimeRemainingColumn)
    except ImportError:
        return None
    return RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("rows"), TimeRemainingColumn(),
                        console=Console(file=out), transient=False)
