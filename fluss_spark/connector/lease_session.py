"""The query's one KV snapshot lease as the driver holds it: id, holder, pins, renewal, retries."""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Mapping

from fluss_spark.connector.lease_keeper import LeaseKeeper
from fluss_spark.connector.options import SourceOptions
from fluss_spark.errors import FlussError, LeaseHeldByOther, LeaseNotFound, UnsupportedVersion

log = logging.getLogger(__name__)

#: {table_id: {bucket: snapshot_id}}
Pins = Mapping[int, Mapping[int, int]]


class LeaseSession:
    """Acquires, renews and releases ONE lease under ONE holder for a query run.

    The id and the holder are bound once per run (``bind``), from the checkpoint's offset, before
    anything is acquired, so a run never creates a lease its checkpoint does not name. Calls that
    fail with a retriable error (a coordinator that lost ZooKeeper for a moment, a dropped
    connection) are retried by the client within ``client.request.timeout``; acquire and release
    are idempotent, so a retry after a lost answer is harmless.
    """

    def __init__(self, options: SourceOptions, admin: Callable[[], Any],
                 connect: Callable[[], Any], *, clock: Callable[[], float] = time.time,
                 renew_in_thread: bool = True):
        """``admin()`` is the enumerator's admin; ``connect()`` opens the keeper's own connection
        (its thread never shares a socket with the enumerator)."""
        self.options = options
        self._admin = admin
        self._connect = connect
        self.clock = clock
        self.renew_in_thread = renew_in_thread
        self.lease_id: str | None = None
        self.holder: str | None = None
        self.keeper: LeaseKeeper | None = None
        self._keeper_conn = None
        self._supported: bool | None = None

    @property
    def bound(self) -> bool:
        return self.lease_id is not None

    def bind(self, lease_id: str, holder: str) -> None:
        self.lease_id, self.holder = lease_id, holder

    def supported(self, tables: list[str]) -> bool:
        """Whether the cluster has the lease API; an older server gets one warning."""
        if self._supported is None:
            try:
                self._supported = bool(self._admin().supports_leases())
            except UnsupportedVersion:
                self._supported = False
            if not self._supported:
                log.warning("the Fluss cluster at %s has no KV snapshot lease API (an older "
                            "server): the snapshot phase of %s runs UNPROTECTED, a snapshot "
                            "removed by retention while it is read fails the query",
                            self.options.bootstrap_servers, ", ".join(tables))
        return self._supported

    def acquire(self, pins: Pins, names: Mapping[int, str]) -> dict[int, dict[int, int]]:
        """Pin snapshots under the lease; returns the unavailable ones ``{table_id: {bucket:
        snapshot_id}}``. Acquiring also extends the lease, and the renewal thread starts."""
        try:
            unavailable = self._admin().acquire_kv_snapshot_lease(
                self.lease_id, self.options.lease_duration_ms, pins, holder=self.holder)
        except LeaseHeldByOther as e:
            tables = ", ".join(repr(names.get(t, t)) for t in sorted(pins))
            raise LeaseHeldByOther(
                f"KV snapshot lease {self.lease_id!r} already pins table(s) {tables} for another "
                f"query (this query's checkpoint holds it as {self.holder!r}). Two running queries "
                f"cannot share option 'scan.kv.snapshot.lease.id': give this query its own id, or, "
                f"if the other query is gone for good, drop the lease (fluss-spark lease drop "
                f"{self.lease_id}) and start again. Coordinator: {e}") from None
        self._start_keeper()
        return {int(t): {int(b): int(s) for b, s in bs.items()}
                for t, bs in (unavailable or {}).items() if bs}

    def release(self, table_id: int, buckets: list[int], name: str) -> bool:
        """Unpin a table's buckets; True when they are gone (also when the lease already is)."""
        try:
            self._admin().release_kv_snapshot_lease(self.lease_id, {table_id: buckets})
        except LeaseNotFound:
            return True  # released earlier, expired, or emptied
        except FlussError as e:
            log.warning("releasing table %r from KV snapshot lease %r failed (retried at the next "
                        "commit; the lease expires anyway): %s", name, self.lease_id, e)
            return False
        log.info("table %r finished its snapshot phase; released it from lease %r",
                 name, self.lease_id)
        return True

    # -- renewal ------------------------------------------------------------------------------
    def _start_keeper(self) -> None:
        if self.keeper is None:
            if self.renew_in_thread:
                self._keeper_conn = self._connect()
                keeper_admin = self._keeper_conn.admin()
            else:
                keeper_admin = self._admin()
            self.keeper = LeaseKeeper(keeper_admin, self.lease_id, self.options.lease_duration_ms,
                                      clock=self.clock)
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
        if self._keeper_conn is not None:
            try:
                self._keeper_conn.close()
            except Exception:  # noqa: BLE001 - cleanup must not raise
                pass
            self._keeper_conn = None
