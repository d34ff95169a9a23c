"""One clear, rate-limited log line when a tablet's write fails for lack of disk space.

A full disk used to show only in the error each client got back (or not at all): nothing in the
tablet's log said which bucket could not write where. ``report`` logs an ERROR naming the bucket
and the path the first time a write of a bucket fails with ENOSPC (or EDQUOT, or RocksDB's and
Arrow's "No space left on device"), then at most one line per bucket every ``INTERVAL_S``,
counting the failures in between, so a client retrying in a loop cannot flood the log.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)

#: At most one line per bucket this often (the failures in between are counted).
INTERVAL_S = 60.0
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_FULL_TEXTS = ("no space left on device", "disk quota exceeded")


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error`` says the disk (or the quota) is full."""
    if isinstance(error, OSError) and error.errno in _FULL_ERRNOS:
        return True
    text = str(error).lower()
    return any(t in text for t in _FULL_TEXTS)


class _Reporter:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._lock = threading.Lock()
        #: bucket label -> (monotonic time of the last line, failures since it)
        self._last: dict[str, tuple[float, int]] = {}

    def report(self, label: str, path: object, what: str, error: BaseException) -> bool:
        """Log (rate-limited) when ``error`` is a full disk; True if it was one."""
        if not is_disk_full(error):
            return False
        now = self.clock()
        with self._lock:
            last = self._last.get(label)
            if last is not None and now - last[0] < INTERVAL_S:
                self._last[label] = (last[0], last[1] + 1)
                return True
            suppressed = last[1] if last is not None else 0
            self._last[label] = (now, 0)
            if len(self._last) > 10_000:        # buckets come and go: forget the oldest
                for key in sorted(self._last, key=lambda k: self._last[k][0])[:5_000]:
                    del self._last[key]
        more = f" ({suppressed} more failed writes of this bucket since the last report)" \
            if suppressed else ""
        log.error("%s: no space left on the disk: %s %s failed; free space there, writes of "
                  "this bucket fail until then%s", label, what, path, more)
        return True


_reporter = _Reporter()


def report(label: str, path: object, what: str, error: BaseException) -> bool:
    """``label``: the bucket; ``path``: what was being written; ``what``: e.g. "appending to"."""
    return _reporter.report(label, path, what, error)
