"""Warnings about client addresses, at most one per address and interval."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger("fluss_spark.transport.server")

#: Refusals and evictions are logged at most once per client address per this many seconds.
LOG_INTERVAL_S = 10.0
#: Addresses the log limiter remembers; past it all further addresses share one entry.
LOG_MAX_ADDRESSES = 4096


class LogLimiter:
    """At most one warning per client address per interval (a flood cannot fill the logs);
    the next line says how many were left out. Thread-safe."""

    def __init__(self, interval_s: float = LOG_INTERVAL_S,
                 max_addresses: int = LOG_MAX_ADDRESSES):
        self.interval_s, self.max_addresses = interval_s, max_addresses
        self._last: dict[str, list[float]] = {}    # address -> [time logged, lines left out since]
        self._lock = threading.Lock()

    def warning(self, ip: str, msg: str, *args: Any) -> None:
        now = time.monotonic()
        with self._lock:
            if ip not in self._last and len(self._last) >= self.max_addresses:
                self._prune(now)
                if len(self._last) >= self.max_addresses:
                    ip = "*other addresses*"
            entry = self._last.get(ip)
            if entry is not None and now - entry[0] < self.interval_s:
                entry[1] += 1
                return
            skipped = entry[1] if entry is not None else 0
            self._last[ip] = [now, 0]
        if skipped:
            msg += " (%d similar lines about %s left out in the last %.0fs)"
            args = (*args, skipped, ip, self.interval_s)
        log.warning(msg, *args)

    def prune(self) -> None:
        with self._lock:
            self._prune(time.monotonic())

    def _prune(self, now: float) -> None:
        for ip in [ip for ip, (t, _) in self._last.items() if now - t >= self.interval_s]:
            del self._last[ip]
