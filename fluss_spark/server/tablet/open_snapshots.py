"""OpenSnapshots: snapshot files kept open across the scan sessions that read them.

Opening a snapshot file maps it and reads the index of its record batches (5 ms for a 224 MB
file), and the first read of each page of a fresh mapping faults it in (a sixth of the tablet's
CPU in a scan of 4 MB pages). Snapshot files never change, so sessions of the same snapshot (a
scan's splits, a scan repeated, a session reopened by row) share one open file; a file no
session uses stays open ``keep_ms`` longer, then is closed by the eviction pass.
"""

from __future__ import annotations

import threading
from typing import Any, Callable


class OpenSnapshots:
    """Open snapshot files by path, shared by the sessions reading them (thread-safe)."""

    def __init__(self, opener: Callable[[str], Any], keep_ms: float,
                 clock: Callable[[], float]):
        self._opener = opener
        self.keep_ms = keep_ms
        self._clock = clock
        self._lock = threading.Lock()
        #: path -> [open file, sessions using it, when the last one let it go]
        self._files: dict[str, list[Any]] = {}

    def acquire(self, path: str) -> "SharedSnapshot":
        """The open file at ``path`` for one more session (the opener's errors propagate)."""
        with self._lock:
            entry = self._files.get(path)
            if entry is not None:
                entry[1] += 1
                return SharedSnapshot(self, path, entry[0])
        opened = self._opener(path)          # outside the lock: opening reads the file
        with self._lock:
            entry = self._files.get(path)
            if entry is None:
                entry = self._files[path] = [opened, 0, 0.0]
            elif entry[0] is not opened:     # another session opened it meanwhile
                _close(opened)
            entry[1] += 1
            return SharedSnapshot(self, path, entry[0])

    def release(self, path: str) -> None:
        with self._lock:
            entry = self._files.get(path)
            if entry is not None:
                entry[1] -= 1
                entry[2] = self._clock()

    def expire(self, everything: bool = False) -> int:
        """Close the files no session has used for ``keep_ms`` (all unused ones with
        ``everything``); returns how many were closed."""
        now = self._clock()
        with self._lock:
            gone = [p for p, (_, users, since) in self._files.items()
                    if users <= 0 and (everything or now - since >= self.keep_ms)]
            files = [self._files.pop(p)[0] for p in gone]
        for f in files:
            _close(f)
        return len(files)

    def __len__(self) -> int:
        with self._lock:
            return len(self._files)


class SharedSnapshot:
    """One session's use of a shared snapshot file: reads go to the file, ``close`` lets it go."""

    def __init__(self, owner: OpenSnapshots, path: str, file: Any):
        self._owner, self._path, self._file = owner, path, file
        self._released = False

    def __getattr__(self, name: str) -> Any:
        # The file never changes: what it answers once is kept here (a page's cut asks often).
        value = getattr(self._file, name)
        self.__dict__[name] = value
        return value

    def close(self) -> None:
        if not self._released:
            self._released = True
            self._owner.release(self._path)


def _close(file: Any) -> None:
    close = getattr(file, "close", None)
    if close is not None:
        close()
