"""The query's one KV snapshot lease as the driver holds it: id, holder, pins, renewal, retries."""

from __future__ import annotations

import logging
import threading
from typing import Callable, Mapping

from fluss_spark.client.cluster import Cluster
from fluss_spark.clock import Clock, monotonic_ms
from fluss_spark.connector.lease_keeper import LeaseKeeper, UnitPins, acquire_pins
from fluss_spark.connector.offsets import UnitKey
from fluss_spark.connector.options import SourceOptions
from fluss_spark.errors import FlussError, LeaseHeldByOther, LeaseNotFound, UnsupportedVersion

log = logging.getLogger(__name__)


class LeaseSession:
    """Acquires, renews and releases ONE lease under ONE holder for a query run.

    The id and the holder are bound once per run (``bind``), from the checkpoint's offset, before
    anything is acquired. One exception: a new query's first batch pins its snapshots before
    Spark logs the offset that names the lease (``provisional``), so that no logged offset names
    an unpinned snapshot. Until the checkpoint names it the lease is held for
    ``scan.kv.snapshot.lease.grace`` only (renewed while the driver lives), so a driver killed in
    that window leaves nothing for longer; ``confirm`` extends it to the full duration. Calls that
    fail with a retriable error (a coordinator that lost ZooKeeper for a moment, a dropped
    connection) are retried by the client within ``client.request.timeout``; acquire and release
    are idempotent, so a retry after a lost answer is harmless.

    The session remembers the pins it holds (granted, not yet released): a cluster that renews a
    lease by acquiring it again (``Capabilities.lease_renewal == "reacquire"``) is renewed by
    acquiring exactly those. Pins are kept per read unit (a table, or one partition of a
    partitioned table); a table's release covers all of its partitions.
    """

    def __init__(self, options: SourceOptions, cluster: Callable[[], Cluster],
                 connect: Callable[[], Cluster], *, clock: Clock = monotonic_ms,
                 renew_in_thread: bool = True):
        """``cluster()`` is the enumerator's cluster; ``connect()`` opens the keeper's own
        (its thread never shares a socket with the enumerator)."""
        self.options = options
        self._cluster = cluster
        self._connect = connect
        self.clock = clock
        self.renew_in_thread = renew_in_thread
        self.lease_id: str | None = None
        self.holder: str | None = None
        #: Bound before the checkpoint names the lease: held for the grace only.
        self.provisional = False
        self.keeper: LeaseKeeper | None = None
        self._keeper_cluster: Cluster | None = None
        self._supported: bool | None = None
        #: {unit: {bucket: snapshot_id}} granted under the lease and not released.
        self._pins: dict[UnitKey, dict[int, int]] = {}
        # Shared with the keeper: a renewal by re-acquiring never overlaps a release.
        self._lock = threading.RLock()

    @property
    def bound(self) -> bool:
        return self.lease_id is not None

    def bind(self, lease_id: str, holder: str, *, provisional: bool = False) -> None:
        """Use this lease id and holder; ``provisional``: the checkpoint does not name them yet."""
        self.lease_id, self.holder, self.provisional = lease_id, holder, provisional

    def is_new(self, lease_id: str, *, generated: bool) -> bool:
        """Whether no lease ``lease_id`` exists, so a short first life cuts nobody's protection
        short (an acquire sets the WHOLE lease's expiry, and an id given by option may be shared:
        the tiering job's is). An id this run generated is new; another is asked about where
        the cluster can describe leases, and taken as existing where it cannot."""
        if generated:
            return True
        try:
            self._cluster().describe_kv_snapshot_lease(lease_id)
        except LeaseNotFound:
            return True
        except FlussError:      # UnsupportedVersion (Apache Fluss 0.9.1) or unreachable
            return False
        return False

    @property
    def duration_ms(self) -> int:
        """How long an acquire or renewal keeps the lease: the grace until the checkpoint names
        it (never longer than the full duration), then ``scan.kv.snapshot.lease.duration``."""
        full = self.options.lease_duration_ms
        return min(self.options.lease_grace_ms, full) if self.provisional else full

    def confirm(self) -> None:
        """The checkpoint names the lease now: acquires and renewals use the full duration (the
        enumerator's acquire at binding extends it at once)."""
        self.provisional = False
        if self.keeper is not None:
            self.keeper.set_duration(self.duration_ms)

    def release_all(self, names: Mapping[int, str]) -> None:
        """Unpin everything this run pinned (a start that failed, or a provisional lease the
        checkpoint does not name): a run that cannot start leaves no pins behind."""
        for table_id in sorted({k[0] for k in self.held()}):
            self.release(table_id, {}, names.get(table_id, str(table_id)),
                         why="is not read by this run")

    def _bound_id(self) -> str:
        if self.lease_id is None:
            raise RuntimeError("the lease session is used before it is bound to a checkpoint")
        return self.lease_id

    def supported(self, tables: list[str]) -> bool:
        """Whether the cluster has the lease API; an older server gets one warning."""
        if self._supported is None:
            try:
                self._supported = bool(self._cluster().capabilities().leases)
            except UnsupportedVersion:
                self._supported = False
            if not self._supported:
                log.warning("the Fluss cluster at %s has no KV snapshot lease API (an older "
                            "server): the snapshot phase of %s runs UNPROTECTED, a snapshot "
                            "removed by retention while it is read fails the query",
                            self.options.bootstrap_servers, ", ".join(tables))
        return self._supported

    def held(self) -> dict[UnitKey, dict[int, int]]:
        """A copy of the pins the session holds."""
        with self._lock:
            return {k: dict(bs) for k, bs in self._pins.items() if bs}

    def acquire(self, pins: UnitPins, names: Mapping[int, str]) -> dict[UnitKey, dict[int, int]]:
        """Pin snapshots of read units under the lease; returns the unavailable ones ``{unit:
        {bucket: snapshot_id}}``. Acquiring also extends the lease, and the renewal thread
        starts (again, after the pins were all released once)."""
        lease_id = self._bound_id()
        with self._lock:
            try:
                missing = acquire_pins(self._cluster(), lease_id, self.duration_ms, pins,
                                       self.holder)
            except LeaseHeldByOther as e:
                tables = ", ".join(repr(names.get(t, t)) for t in sorted({k[0] for k in pins}))
                raise LeaseHeldByOther(
                    f"KV snapshot lease {lease_id!r} already pins table(s) {tables} for another "
                    f"query (this query's checkpoint holds it as {self.holder!r}). Two running "
                    f"queries cannot share option 'scan.kv.snapshot.lease.id': give this query "
                    f"its own id, or, if the other query is gone for good, drop the lease "
                    f"(fluss-spark lease drop {lease_id}) and start again. Coordinator: {e}"
                ) from None
            for k, bs in pins.items():
                held = self._pins.setdefault(k, {})
                for b, sid in bs.items():
                    if b not in missing.get(k, {}):
                        held[b] = sid
                    elif held.get(b) == sid:
                        del held[b]     # the coordinator no longer has it under the lease
                if not held:
                    del self._pins[k]
            self._start_keeper()
        return missing

    def release(self, table_id: int, units: UnitPins, name: str,
                why: str = "finished its snapshot phase") -> bool:
        """Unpin a table's snapshots, of the table and of every one of its partitions: those
        this run holds, or, when it holds none, ``units`` (``{unit: {bucket: snapshot_id}}``,
        the ones the checkpoint names, pinned by an earlier run). True when they are gone (also
        when the lease already is)."""
        lease_id = self._bound_id()
        with self._lock:
            pinned = ({k: dict(pins) for k, pins in self._pins.items() if k[0] == table_id}
                      or {k: dict(pins) for k, pins in units.items() if pins})
            if not pinned:
                return True     # nothing known to pin: nothing to name
            try:
                self._release(lease_id, table_id, pinned)
            except LeaseNotFound:
                self._forget(table_id)
                return True  # released earlier, expired, or emptied
            except FlussError as first:
                if not self._repaired(lease_id, table_id, pinned):
                    log.warning("releasing table %r from KV snapshot lease %r failed (retried at "
                                "the next commit; the lease expires anyway): %s",
                                name, lease_id, first)
                    return False
            self._forget(table_id)
        log.info("table %r %s; released it from lease %r", name, why, lease_id)
        return True

    def _release(self, lease_id: str, table_id: int, pinned: UnitPins) -> None:
        # A release names exactly the buckets pinned, per partition (also of a partition dropped
        # since, which a table-wide release would miss): Apache Fluss 0.9.1 fails one that names
        # a bucket after the table's last pinned one (its table entry is gone), releasing the
        # buckets before it but keeping the lease.
        parts = {pid: sorted(pins) for (_, pid), pins in pinned.items() if pid is not None}
        if parts:
            self._cluster().release_kv_snapshot_lease(lease_id, {}, partitions={table_id: parts})
        else:
            self._cluster().release_kv_snapshot_lease(
                lease_id, {table_id: sorted(pinned.get((table_id, None), {}))})

    def _repaired(self, lease_id: str, table_id: int, pinned: UnitPins) -> bool:
        """Whether pinning the table's snapshots again and releasing them then succeeds: a
        release that failed half way (or whose answer was lost, or that an earlier run made)
        leaves Apache Fluss 0.9.1 unable to release what is left until the table is pinned
        again. Acquire and release being idempotent, this never unpins anything else."""
        if not pinned:
            return False
        try:
            missing = acquire_pins(self._cluster(), lease_id, self.duration_ms, pinned,
                                   self.holder)
            granted = {k: {b: s for b, s in pins.items() if b not in missing.get(k, {})}
                       for k, pins in pinned.items()}
            granted = {k: pins for k, pins in granted.items() if pins}
            if granted:     # none: retention took them all, and the lease has none of them
                self._release(lease_id, table_id, granted)
        except LeaseNotFound:
            return True
        except FlussError:
            return False
        return True

    def _forget(self, table_id: int) -> None:
        for key in [k for k in self._pins if k[0] == table_id]:
            del self._pins[key]

    # -- renewal ------------------------------------------------------------------------------
    def _start_keeper(self) -> None:
        if self.keeper is not None and self.keeper.stopped:
            # Every table had been released, and a partition found since takes pins again.
            self.keeper = None
        if self.keeper is None:
            if self.renew_in_thread:
                if self._keeper_cluster is None:
                    self._keeper_cluster = self._connect()
                keeper_cluster = self._keeper_cluster
            else:
                keeper_cluster = self._cluster()
            self.keeper = LeaseKeeper(keeper_cluster, self._bound_id(),
                                      self.duration_ms, clock=self.clock,
                                      pins=self.held, holder=self.holder, lock=self._lock,
                                      renewal=self._cluster().capabilities().lease_renewal)
            if self.renew_in_thread:
                self.keeper.start()
        self.keeper.acquired()

    def tick(self) -> None:
        if self.keeper is not None:
            self.keeper.tick()

    @property
    def lost(self) -> bool:
        """The coordinator no longer knows the lease while it is still needed."""
        return self.keeper is not None and self.keeper.lost and not self.keeper.stopped

    def stop_renewing(self) -> None:
        if self.keeper is not None:
            self.keeper.stop()

    def close(self) -> None:
        self.stop_renewing()
        if self._keeper_cluster is not None:
            try:
                self._keeper_cluster.close()
            except Exception:  # noqa: BLE001 - cleanup must not raise
                pass
            self._keeper_cluster = None
