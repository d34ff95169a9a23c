"""Keeps the query's KV snapshot lease alive from the driver while its snapshot phase runs."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from fluss_spark.errors import FlussError, LeaseNotFound

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Renews one lease at a third of its duration; ``tick()`` does one due renewal.

    ``tick()`` is called by a daemon thread of the driver-side source process (``start()``) and
    opportunistically by the enumerator on every ``latestOffset``; tests call it with a fake clock.
    When the coordinator no longer knows the lease (it expired, or was dropped by an operator),
    ``lost`` becomes True: the pins are gone and the enumerator re-asserts them.
    """

    def __init__(self, admin: Any, lease_id: str, duration_ms: int, *,
                 clock: Callable[[], float] = time.time, interval_ms: int | None = None):
        self.admin = admin
        self.lease_id = lease_id
        self.duration_ms = duration_ms
        self.interval_ms = interval_ms or max(1, duration_ms // 3)
        self.clock = clock
        self.next_due_ms = self._now_ms() + self.interval_ms
        self.lost = False
        self.renewals = 0
        self.expires_at_ms: int | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def acquired(self) -> None:
        """The enumerator just (re)acquired pins, which also extends the lease: reset the timer."""
        with self._lock:
            self.lost = False
            self.next_due_ms = self._now_ms() + self.interval_ms

    def tick(self, force: bool = False) -> bool:
        """Renew if due (or ``force``); returns True if a renewal was sent and succeeded."""
        with self._lock:
            if self._stop.is_set() or self.lost:
                return False
            now = self._now_ms()
            if not force and now < self.next_due_ms:
                return False
            try:
                self.expires_at_ms = self.admin.renew_kv_snapshot_lease(self.lease_id,
                                                                        self.duration_ms)
            except LeaseNotFound:
                log.warning("KV snapshot lease %r is gone (expired or dropped); its snapshots "
                            "are no longer protected, the source re-acquires them", self.lease_id)
                self.lost = True
                return False
            except FlussError as e:
                # A failed renewal is retried soon; the lease outlives a few missed renewals.
                log.warning("renewing KV snapshot lease %r failed: %s", self.lease_id, e)
                self.next_due_ms = now + min(self.interval_ms, 5_000)
                return False
            self.renewals += 1
            self.next_due_ms = now + self.interval_ms
            return True

    def start(self) -> None:
        """Renew from a daemon thread (the driver-side source process lives as long as the query)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"fluss-lease-{self.lease_id}",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        wait_s = min(self.interval_ms / 1000.0, 1.0)
        while not self._stop.wait(wait_s):
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - the thread must survive a surprise and retry
                log.exception("lease keeper for %r failed", self.lease_id)

    def stop(self) -> None:
        """Stop renewing (the lease itself is left to expire or be released)."""
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=2.0)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()
