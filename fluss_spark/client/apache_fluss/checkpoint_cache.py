"""Local copies of KV snapshot checkpoints, kept open for the next read of the same snapshot.

A micro-batch reads rows ``[a, b)`` of a bucket's snapshot and the next one rows ``[b, c)``:
without a cache each read would copy the whole checkpoint again and step over its first rows.
Spark reuses its Python workers, so one process usually serves a bucket's consecutive splits.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from fluss_spark.clock import monotonic_ms

#: Unused copies a process keeps (each is one bucket's snapshot on local disk).
DEFAULT_CAPACITY = 2


@dataclass
class Checkpoint:
    """One snapshot's files copied into ``dir`` and open read-only as ``db``."""

    key: str
    dir: str
    db: Any
    users: int = 0
    last_used_ms: int = 0
    #: ``(row, values standing at that row)`` left by the last read that stopped there.
    cursor: tuple[int, Any] | None = field(default=None, repr=False)

    def values_from(self, row: int) -> Any:
        """The values from row ``row`` on: the saved cursor if it stands there, else a new
        one from ``db.values_from(row)``."""
        if self.cursor is not None and self.cursor[0] == row:
            values, self.cursor = self.cursor[1], None
            return values
        return self.db.values_from(row)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class CheckpointCache:
    """Checkpoints of one process, by snapshot directory; at most ``capacity`` unused ones.

    Copies live in ``<root>/<pid>/``, removed at exit; directories of processes that are gone
    (a worker killed -9) are removed when a cache is made.
    """

    def __init__(self, *, root: str | None = None, capacity: int = DEFAULT_CAPACITY):
        self.capacity = capacity
        self.root = root or os.path.join(tempfile.gettempdir(), "fluss-kv-snapshots")
        self._dir = os.path.join(self.root, str(os.getpid()))
        self._entries: dict[str, Checkpoint] = {}
        self._lock = threading.Lock()
        self._sweep()
        atexit.register(self.clear)

    def _sweep(self) -> None:
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return
        for name in names:
            if name.isdigit() and int(name) != os.getpid() and not _alive(int(name)):
                shutil.rmtree(os.path.join(self.root, name), ignore_errors=True)

    def acquire(self, key: str, open_into: Callable[[str], Any]) -> Checkpoint:
        """The open checkpoint of snapshot ``key``; if this process has none, ``open_into(dir)``
        copies the snapshot into the empty directory ``dir`` and returns it opened."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                entry.users += 1
                return entry
        os.makedirs(self._dir, exist_ok=True)
        into = tempfile.mkdtemp(dir=self._dir)
        try:
            db = open_into(into)
        except BaseException:
            shutil.rmtree(into, ignore_errors=True)
            raise
        with self._lock:
            existing = self._entries.get(key)
            if existing is None:
                entry = self._entries[key] = Checkpoint(key, into, db, users=1)
                return entry
            existing.users += 1     # another thread copied it meanwhile: keep one copy
        _close(db, into)
        return existing

    def release(self, entry: Checkpoint, cursor: tuple[int, Any] | None = None, *,
                finished: bool = False) -> None:
        """Done with ``entry``; ``cursor`` is where the next read of it may start. A copy read
        to its ``finished`` end goes at once: the splits of a snapshot come in row order, so
        none is left to read it (a retried task copies it again)."""
        with self._lock:
            entry.users -= 1
            entry.last_used_ms = monotonic_ms()
            if cursor is not None:
                entry.cursor = cursor
            idle = sorted((e for e in self._entries.values() if e.users == 0),
                          key=lambda e: e.last_used_ms)
            evicted = idle[:max(0, len(idle) - self.capacity)]
            if finished and entry.users == 0 and entry not in evicted:
                evicted.append(entry)
        self._remove(evicted)

    def clear(self) -> None:
        """Close and remove every copy nobody is reading."""
        with self._lock:
            idle = [e for e in self._entries.values() if e.users == 0]
        self._remove(idle)

    def _remove(self, entries: list[Checkpoint]) -> None:
        with self._lock:
            # Only what nobody took meanwhile: a copy in use is never closed under its reader.
            entries = [e for e in entries if e.users == 0 and self._entries.get(e.key) is e]
            for e in entries:
                del self._entries[e.key]
        for e in entries:
            e.cursor = None       # the iterator goes before the database it reads is closed
            _close(e.db, e.dir)

    def __len__(self) -> int:
        return len(self._entries)


def _close(db: Any, directory: str) -> None:
    try:
        db.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


__all__ = ["Checkpoint", "CheckpointCache", "DEFAULT_CAPACITY"]
