"""Keeps the query's KV snapshot lease alive from the driver while its snapshot phase runs."""

from __future__ import annotations

import logging
import threading
from typing import Callable, Mapping

from fluss_spark.client.cluster import Cluster
from fluss_spark.clock import Clock, monotonic_ms
from fluss_spark.connector.offsets import UnitKey, unit_order
from fluss_spark.errors import FlussError, LeaseNotFound

log = logging.getLogger(__name__)

#: ``{(table_id, partition_id or None): {bucket: snapshot_id}}``: pins of read units.
UnitPins = Mapping[UnitKey, Mapping[int, int]]


def split_pins(pins: UnitPins) -> tuple[dict[int, dict[int, int]],
                                        dict[int, dict[int, dict[int, int]]]]:
    """Units' pins as a lease call takes them: tables' own ``{table_id: {bucket: snapshot_id}}``
    and partitions' ``{table_id: {partition_id: {bucket: snapshot_id}}}``."""
    tables: dict[int, dict[int, int]] = {}
    partitions: dict[int, dict[int, dict[int, int]]] = {}
    for (tid, pid), buckets in sorted(pins.items(), key=lambda kv: unit_order(kv[0])):
        if not buckets:
            continue
        if pid is None:
            tables[tid] = dict(buckets)
        else:
            partitions.setdefault(tid, {})[pid] = dict(buckets)
    return tables, partitions


def acquire_pins(cluster: Cluster, lease_id: str, duration_ms: int, pins: UnitPins,
                 holder: str | None) -> dict[UnitKey, dict[int, int]]:
    """Acquire units' pins under the lease; returns the unavailable ones by unit."""
    tables, partitions = split_pins(pins)
    # Partition pins go only where there are some: a cluster whose leases predate them takes
    # the call as before.
    unavailable = cluster.acquire_kv_snapshot_lease(lease_id, duration_ms, tables, holder=holder,
                                                    partitions=partitions or None)
    out: dict[UnitKey, dict[int, int]] = {}
    for t, buckets in unavailable.items():
        if buckets:
            out[(int(t), None)] = {int(b): int(s) for b, s in buckets.items()}
    for t, parts in unavailable.partitions.items():
        for p, pinned in parts.items():
            if pinned:
                out[(int(t), int(p))] = {int(b): int(s) for b, s in pinned.items()}
    return out


#: Longest pause before a failed renewal is tried again (the lease outlives a few misses).
_RETRY_MS = 5_000


class LeaseKeeper:
    """Renews one lease at a third of its duration; ``tick()`` does one due renewal.

    ``tick()`` is called by a daemon thread of the driver-side source process (``start()``) and
    opportunistically by the enumerator on every ``latestOffset``; tests call it with a fake clock.
    When the coordinator no longer knows the lease (it expired, or was dropped by an operator),
    ``lost`` becomes True: the pins are gone and the enumerator re-asserts them.

    A cluster whose ``capabilities().lease_renewal`` is ``reacquire`` has no renew call: the
    keeper acquires the pins the query still holds (``pins()``) again under the same holder,
    which extends the lease. A pin that comes back unavailable means the lease had lapsed and
    retention took its snapshot, so that too makes the lease ``lost``. ``lock`` is shared with
    whoever releases pins, so a re-acquire never brings back a table released meanwhile.
    """

    def __init__(self, cluster: Cluster, lease_id: str, duration_ms: int, *,
                 clock: Clock = monotonic_ms, interval_ms: int | None = None,
                 pins: Callable[[], UnitPins] | None = None, holder: str | None = None,
                 lock: threading.RLock | None = None, renewal: str | None = None):
        """``renewal``: the cluster's ``capabilities().lease_renewal`` when the caller knows it
        (asking ``cluster`` connects it, a few round trips the thread can make later)."""
        self.cluster = cluster
        self.lease_id = lease_id
        self.duration_ms = duration_ms
        self._fixed_interval = interval_ms is not None
        self.interval_ms = interval_ms or max(1, duration_ms // 3)
        self.clock = clock
        self.reacquire = (renewal or cluster.capabilities().lease_renewal) == "reacquire"
        if self.reacquire and pins is None:
            raise ValueError("a cluster that renews by re-acquiring needs the pins to acquire")
        self.pins = pins
        self.holder = holder
        self.next_due_ms = self.clock() + self.interval_ms
        self.lost = False
        self.renewals = 0
        #: The lease's expiry (epoch ms) after the last renew call; None when re-acquiring.
        self.expires_at_ms: int | None = None
        self._stop = threading.Event()
        self._lock = lock or threading.RLock()
        self._thread: threading.Thread | None = None

    def set_duration(self, duration_ms: int) -> None:
        """Renew for ``duration_ms`` from now on (at a third of it, unless an interval was set)."""
        with self._lock:
            self.duration_ms = duration_ms
            if not self._fixed_interval:
                self.interval_ms = max(1, duration_ms // 3)

    def acquired(self) -> None:
        """The enumerator just (re)acquired pins, which also extends the lease: reset the timer."""
        with self._lock:
            self.lost = False
            self.next_due_ms = self.clock() + self.interval_ms

    def tick(self, force: bool = False) -> bool:
        """Renew if due (or ``force``); returns True if a renewal was sent and succeeded."""
        with self._lock:
            if self._stop.is_set() or self.lost:
                return False
            now = self.clock()
            if not force and now < self.next_due_ms:
                return False
            try:
                intact = self._renew()
            except LeaseNotFound:
                intact = False
            except FlussError as e:
                log.warning("renewing KV snapshot lease %r failed: %s", self.lease_id, e)
                self.next_due_ms = now + min(self.interval_ms, _RETRY_MS)
                return False
            if not intact:
                log.warning("KV snapshot lease %r is gone (expired or dropped); its snapshots "
                            "are no longer protected, the source re-acquires them", self.lease_id)
                self.lost = True
                return False
            self.renewals += 1
            self.next_due_ms = now + self.interval_ms
            return True

    def _renew(self) -> bool:
        """One renewal; False when the lease (or some of its pins) is gone."""
        if not self.reacquire:
            self.expires_at_ms = self.cluster.renew_kv_snapshot_lease(self.lease_id,
                                                                      self.duration_ms)
            return True
        assert self.pins is not None
        pins = self.pins()
        if not pins:
            return True           # nothing left to protect: the lease goes with its last pin
        unavailable = acquire_pins(self.cluster, self.lease_id, self.duration_ms, pins,
                                   self.holder)
        return not any(unavailable.values())

    def start(self) -> None:
        """Renew from a daemon thread (the driver-side source process lives as long as the
        query)."""
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
