"""What a running tiering job prints: a line per round, every table's status on SIGUSR1."""

from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager
from typing import Callable, Iterator, TextIO


class RoundReport:
    """Called with the job's status document after every poll (``TieringJob.run(on_poll=)``).

    Whenever tables committed a round since the previous poll it writes one line: the time,
    those tables with their batch ids, the rows they tiered in it (and in all), the lag of the
    whole job (snapshot rows + changelog records not yet in the lake) and how many queries are
    active. After ``request()`` it writes each table's status at the next poll. The first poll
    only records where the tables are: rounds committed before this run are not reported.
    """

    def __init__(self, out: TextIO, now: Callable[[], float] = time.time):
        self.out, self.now = out, now
        self._seen: dict[str, dict] | None = None
        self._wanted = False

    def request(self) -> None:
        """Write every table's status after the next poll (safe in a signal handler)."""
        self._wanted = True

    def __call__(self, doc: dict) -> None:
        tables: dict[str, dict] = doc.get("tables") or {}
        seen, self._seen = self._seen, {n: dict(t) for n, t in tables.items()}
        if seen is not None:
            rounds = sorted(n for n, t in tables.items() if t.get("batch_id") is not None
                            and t.get("batch_id") != (seen.get(n) or {}).get("batch_id"))
            if rounds:
                self._write(self.round_line(tables, rounds, seen))
        if self._wanted:
            self._wanted = False
            self._write(self.status_lines(tables))

    def round_line(self, tables: dict[str, dict], rounds: list[str],
                   seen: dict[str, dict]) -> str:
        """``12:00:05 round: db.a (batch 4), db.b (batch 2): 1,204 rows tiered (106,000 in
        all), lag 0; 2 tables, 2 active``."""
        rows = sum(_count(tables[n], "rows_tiered") - _count(seen.get(n) or {}, "rows_tiered")
                   for n in rounds)
        total = sum(_count(t, "rows_tiered") for t in tables.values())
        which = ", ".join(f"{n} (batch {tables[n]['batch_id']})" for n in rounds)
        active = sum(1 for t in tables.values() if t.get("active"))
        return (f"{self._clock()} round: {which}: {rows:,} rows tiered ({total:,} in all), "
                f"lag {_lag(tables.values())}; {_tables(len(tables))}, {active} active")

    def status_lines(self, tables: dict[str, dict]) -> str:
        """A header line, then one line per table: batch, rows tiered, lag, state."""
        lines = [f"{self._clock()} status of {_tables(len(tables))}:"]
        for name, t in sorted(tables.items()):
            batch = t.get("batch_id")
            state = (f"error: {t['error']}" if t.get("error")
                     else "active" if t.get("active") else "stopped")
            lines.append(f"  {name}: batch {'-' if batch is None else batch}, "
                         f"{_count(t, 'rows_tiered'):,} rows tiered, lag {_lag([t])}, {state}, "
                         f"{t.get('restarts') or 0} restarts")
        return "\n".join(lines)

    def _clock(self) -> str:
        return time.strftime("%H:%M:%S", time.localtime(self.now()))

    def _write(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()


def _count(table: dict, key: str) -> int:
    return int(table.get(key) or 0)


def _tables(n: int) -> str:
    return f"{n} table" if n == 1 else f"{n} tables"


def _lag(tables) -> str:
    lags = [t.get("lag") for t in tables]
    return "unknown" if any(v is None for v in lags) else f"{sum(lags):,}"


@contextmanager
def round_lines(out: TextIO) -> Iterator[RoundReport]:
    """A RoundReport on ``out`` whose per-table status SIGUSR1 asks for, for the time of the
    ``with`` block (from the main thread: Python runs signal handlers there). Says so first."""
    report = RoundReport(out)
    previous = signal.signal(signal.SIGUSR1, lambda *_: report.request())
    out.write(f"a line per round; each table's status: kill -USR1 {os.getpid()}\n")
    out.flush()
    try:
        yield report
    finally:
        signal.signal(signal.SIGUSR1, previous)
