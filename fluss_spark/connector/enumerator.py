"""The driver-side enumerator: plans offsets, holds the query's KV snapshot lease, plans splits.

It lives in the one long-lived Python process Spark keeps per source per query run, and starts
fresh on every restart. Spark calls (see SPARK_NOTES.md):

- ``initial_offset()`` (twice on a fresh start: planned once and memoised). In ``full`` mode it
  lists the latest KV snapshots of every PK table and acquires ONE lease over all of them before
  the offset (and so any snapshot split) exists; snapshots that vanished in between are listed
  again and re-acquired, a bounded number of times.
- ``latest_offset(start, limit)``: the next end offset under the read limit. On a restart this
  (or ``partitions``) is the first call; the lease id then comes from the checkpointed offset
  and the same pins are re-asserted under it (never a second lease).
- ``partitions(start, end)``: pure function of the two offsets.
- ``commit(end)``: runs one batch late; once ``end`` shows a table's snapshot rows all consumed,
  that table's buckets are released (one call per table). ``latest_offset(start)`` does the same
  for ``start``: Spark asks for the next batch only after the batch ending at ``start`` is in
  its commit log, and the last batch of ``Trigger.AvailableNow`` is never followed by a
  ``commit``. The coordinator removes a lease with no pins left, so the lease is gone when the
  last table is released.

Nothing here depends on ``stop()``: it only stops the renewal thread and closes connections. The
lease is deliberately NOT dropped there: ``stop()`` also runs when a query is stopped to be
restarted from its checkpoint, and the restarted run needs the same pins. A query abandoned in the
middle of its snapshot phase leaves its pins until the lease expires
(``scan.kv.snapshot.lease.duration``) or an operator drops it.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Callable

from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxRows,
                                              ReadMinRows)

from fluss_spark.connector.lease_keeper import LeaseKeeper
from fluss_spark.connector.offsets import (SnapshotPos, SourceOffset, TablePos, decode)
from fluss_spark.connector.options import SourceOptions
from fluss_spark.connector.splits import plan_splits
from fluss_spark.errors import (ConfigError, FlussError, KvSnapshotNotExist, LeaseNotFound,
                                TableNotExist, UnsupportedVersion)

log = logging.getLogger(__name__)

BucketKey = tuple[int, int]  # (table id, bucket)


def spread(pending: dict[BucketKey, int], budget: int) -> dict[BucketKey, int]:
    """Share ``budget`` fairly over buckets (water-filling: small backlogs are served whole, the
    rest split evenly); deterministic, and at least one unit goes out while any is pending."""
    alloc = {k: 0 for k in pending}
    items = sorted(((p, k) for k, p in pending.items() if p > 0))
    remaining = max(0, budget)
    for i, (p, k) in enumerate(items):
        give = min(p, remaining // (len(items) - i))
        alloc[k] = give
        remaining -= give
    for p, k in sorted(items, key=lambda pk: pk[1]):  # rounding leftovers, in bucket order
        if remaining <= 0:
            break
        if alloc[k] < p:
            alloc[k] += 1
            remaining -= 1
    return alloc


class Enumerator:
    """Offsets, lease and splits of one streaming query run (driver side)."""

    def __init__(self, options: SourceOptions, table_names: list[str],
                 connect: Callable[[], Any], *, clock: Callable[[], float] = time.time,
                 renew_in_thread: bool = True, check_table: Callable[[Any], None] | None = None):
        """``connect()`` returns a client connection (``.admin()``, ``.close()``); the lease
        keeper gets a connection of its own so its thread never shares a socket.
        ``check_table(info)`` may refuse a table when the query starts (e.g. a column the
        query's schema names but the table lacks)."""
        self.options = options
        self.check_table = check_table
        self.table_names = list(table_names)
        self._connect = connect
        self.clock = clock
        self.renew_in_thread = renew_in_thread
        self._conn = None
        self._keeper_conn = None
        self._initial: dict | None = None
        self._ready = False
        self.lease_id: str | None = None
        self.leases_supported: bool | None = None
        self.keeper: LeaseKeeper | None = None
        self.released: set[int] = set()
        self._infos: dict[int, Any] = {}
        # (table id, bucket, lost snapshot id) -> what the bucket continues with (failOnDataLoss=false)
        self._replacements: dict[tuple[int, int, int], SnapshotPos | None] = {}
        self._last_batch_ms = self._now_ms()
        self._available_now_target: dict[BucketKey, int] | None = None
        self._latest_available: dict | None = None

    # -- plumbing -----------------------------------------------------------------------------
    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    @property
    def admin(self):
        if self._conn is None:
            self._conn = self._connect()
        return self._conn.admin()

    def _supports_leases(self) -> bool:
        if self.leases_supported is None:
            try:
                self.leases_supported = bool(self.admin.supports_leases())
            except UnsupportedVersion:
                self.leases_supported = False
            if not self.leases_supported:
                log.warning("the Fluss cluster at %s has no KV snapshot lease API (an older "
                            "server): the snapshot phase of %s runs UNPROTECTED, a snapshot "
                            "removed by retention while it is read fails the query",
                            self.options.bootstrap_servers, ", ".join(self.table_names))
        return self.leases_supported

    def _resolve(self) -> list[Any]:
        infos = []
        for name in self.table_names:
            try:
                infos.append(self.admin.get_table(name))
            except TableNotExist:
                raise TableNotExist(f"table {name!r} does not exist on "
                                    f"{self.options.bootstrap_servers}; create it or fix option "
                                    f"'table'/'tables'/'table.pattern'") from None
        if self.check_table is not None:
            for info in infos:
                self.check_table(info)
        self._infos = {i.table_id: i for i in infos}
        return infos

    def _start_keeper(self) -> None:
        if self.keeper is None:
            if self.renew_in_thread:
                self._keeper_conn = self._connect()
                keeper_admin = self._keeper_conn.admin()
            else:
                keeper_admin = self.admin
            self.keeper = LeaseKeeper(keeper_admin, self.lease_id, self.options.lease_duration_ms,
                                      clock=self.clock)
            if self.renew_in_thread:
                self.keeper.start()
        self.keeper.acquired()

    # -- initial offset -----------------------------------------------------------------------
    def initial_offset(self) -> dict:
        if self._initial is None:
            self._initial = self._plan_initial().to_json()
            self._ready = True
        return self._initial

    def _plan_initial(self) -> SourceOffset:
        opts = self.options
        self.lease_id = opts.lease_id or str(uuid.uuid4())
        tables: dict[int, TablePos] = {}
        for info in self._resolve():
            name = info.name
            if opts.startup_mode == "full" and info.has_primary_key:
                snaps = self.admin.latest_kv_snapshots(name)
                earliest = self._offsets(name, "earliest")
                snapshot = {b: SnapshotPos(s.snapshot_id, s.row_count, 0, s.log_offset)
                            for b, s in sorted(snaps.items())}
                logs = {b: (snapshot[b].log_offset if b in snapshot else earliest.get(b, 0))
                        for b in range(info.num_buckets)}
                tables[info.table_id] = TablePos(name, snapshot, logs)
            else:
                spec = {"full": "earliest"}.get(opts.startup_mode, opts.startup_mode)
                logs = self._offsets(name, spec, opts.startup_timestamp_ms)
                tables[info.table_id] = TablePos(name, {}, {b: logs.get(b, 0)
                                                            for b in range(info.num_buckets)})
        offset = SourceOffset(self.lease_id, tables)
        pins = {tid: {b: s.snapshot_id for b, s in t.snapshot.items() if not s.complete}
                for tid, t in tables.items()}
        pins = {tid: p for tid, p in pins.items() if p}
        if pins and self._supports_leases():
            offset = self._acquire_initial(offset, pins)
            self._start_keeper()
        return offset

    def _offsets(self, table: str, spec: str, timestamp_ms: int | None = None) -> dict[int, int]:
        if spec == "timestamp":
            return self.admin.list_offsets(table, spec="timestamp", timestamp_ms=timestamp_ms)
        return self.admin.list_offsets(table, spec=spec)

    def _acquire_initial(self, offset: SourceOffset, pins: dict[int, dict[int, int]]
                         ) -> SourceOffset:
        """Acquire the pins; snapshots that vanished meanwhile are listed and acquired again."""
        tables = dict(offset.tables)
        attempts = self.options.lease_acquire_retries + 1
        unavailable: dict[int, dict[int, int]] = {}
        for _ in range(attempts):
            unavailable = self._acquire(pins)
            if not unavailable:
                return SourceOffset(offset.lease_id, tables)
            pins = {}
            for tid, buckets in unavailable.items():
                t = tables[tid]
                latest = self.admin.latest_kv_snapshots(t.name)
                snapshot, logs = dict(t.snapshot), dict(t.log)
                for b in buckets:
                    s = latest.get(b)
                    if s is None:  # no snapshot any more: the bucket reads its log from earliest
                        snapshot.pop(b, None)
                        logs[b] = self._offsets(t.name, "earliest").get(b, 0)
                        continue
                    snapshot[b] = SnapshotPos(s.snapshot_id, s.row_count, 0, s.log_offset)
                    logs[b] = s.log_offset
                    pins.setdefault(tid, {})[b] = s.snapshot_id
                tables[tid] = TablePos(t.name, snapshot, logs)
            if not pins:
                return SourceOffset(offset.lease_id, tables)
        detail = "; ".join(f"table {tables[tid].name!r} bucket {b} snapshot {sid}"
                           for tid, bs in unavailable.items() for b, sid in bs.items())
        raise KvSnapshotNotExist(
            f"could not lease the latest KV snapshots under lease {offset.lease_id!r} after "
            f"{attempts} attempts (they were removed by retention faster than they could be "
            f"leased): {detail}. Raise the table's kv.snapshot.num-retained or "
            f"kv.snapshot.interval, then start the query again")

    def _acquire(self, pins: dict[int, dict[int, int]]) -> dict[int, dict[int, int]]:
        unavailable = self.admin.acquire_kv_snapshot_lease(
            self.lease_id, self.options.lease_duration_ms, pins) or {}
        return {int(t): {int(b): int(s) for b, s in bs.items()} for t, bs in unavailable.items() if bs}

    # -- restart from a checkpoint ------------------------------------------------------------
    def _ensure_ready(self, start: SourceOffset) -> None:
        """First call of a restarted run: take the lease id from the offset, re-assert pins."""
        if self._ready:
            return
        self.lease_id = start.lease_id
        checkpointed = sorted(t.name for t in start.tables.values())
        if checkpointed != sorted(self.table_names):
            raise ConfigError(
                f"the checkpoint reads table(s) {checkpointed} but this query reads "
                f"{sorted(self.table_names)}; the tables of a query cannot change: restart it "
                f"with a new checkpointLocation")
        infos = {i.name: i for i in self._resolve()}
        for tid, t in start.tables.items():
            info = infos.get(t.name)
            if info is None or info.table_id != tid:
                raise ConfigError(
                    f"table {t.name!r} in the checkpoint has id {tid}, but the cluster's table "
                    f"{t.name!r} has id {getattr(info, 'table_id', None)}: it was dropped and "
                    f"recreated; restart the query with a new checkpointLocation")
        self._ready = True
        self._reassert_pins(start)
        if self._supports_leases():
            # A table whose snapshot phase finished right before a stop may still hold pins
            # (commit lags a batch): release them now, idempotently.
            for tid, t in start.tables.items():
                if t.snapshot and t.snapshot_complete:
                    self._release(tid, t)

    def _reassert_pins(self, start: SourceOffset) -> None:
        pins = {tid: {b: s.snapshot_id for b, s in t.snapshot.items() if not s.complete}
                for tid, t in start.tables.items()}
        pins = {tid: p for tid, p in pins.items() if p}
        if not pins or not self._supports_leases():
            return
        unavailable = self._acquire(pins)
        self._start_keeper()
        for tid, buckets in unavailable.items():
            t = start.tables[tid]
            for b, sid in sorted(buckets.items()):
                self._snapshot_lost(tid, t, b, sid)

    def _snapshot_lost(self, tid: int, t: TablePos, bucket: int, snapshot_id: int) -> None:
        what = (f"table {t.name!r} bucket {bucket}: KV snapshot {snapshot_id} needed by this "
                f"query (lease {self.lease_id!r}) no longer exists")
        if self.options.fail_on_data_loss:
            raise KvSnapshotNotExist(
                f"{what}; its unread rows are lost. Restart the query with a new "
                f"checkpointLocation, or set failOnDataLoss=false to continue from the latest "
                f"snapshot")
        latest = self.admin.latest_kv_snapshots(t.name).get(bucket)
        replacement = None
        if latest is not None:
            replacement = SnapshotPos(latest.snapshot_id, latest.row_count, 0, latest.log_offset)
            still_missing = self._acquire({tid: {bucket: latest.snapshot_id}})
            if still_missing:
                replacement = None
        log.warning("%s (failOnDataLoss=false): %s", what,
                    f"continuing from snapshot {replacement.snapshot_id}" if replacement
                    else "continuing with the changelog after the lost snapshot")
        self._replacements[(tid, bucket, snapshot_id)] = replacement

    def _apply_replacements(self, start: SourceOffset) -> SourceOffset:
        if not self._replacements:
            return start
        tables = dict(start.tables)
        for (tid, b, sid), new in self._replacements.items():
            t = tables.get(tid)
            cur = t.snapshot.get(b) if t else None
            if cur is None or cur.snapshot_id != sid:
                continue
            snapshot, logs = dict(t.snapshot), dict(t.log)
            if new is None:
                del snapshot[b]
            else:
                snapshot[b] = new
                logs[b] = new.log_offset
            tables[tid] = TablePos(t.name, snapshot, logs)
        return SourceOffset(start.lease_id, tables)

    # -- micro-batches ------------------------------------------------------------------------
    def default_read_limit(self) -> ReadLimit:
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepare_for_available_now(self) -> None:
        """Fix the target: the changelog ends as of now (snapshots are bounded anyway)."""
        infos = self._infos.values() if self._infos else self._resolve()
        target = {}
        for info in infos:
            for b, off in self.admin.list_offsets(info.name, spec="latest").items():
                target[(info.table_id, b)] = off
        self._available_now_target = target

    def latest_offset(self, start_json: dict, limit: ReadLimit | None = None) -> dict:
        start = decode(start_json)
        self._ensure_ready(start)
        if self.keeper is not None:
            self.keeper.tick()
            if self.keeper.lost and not self.keeper.stopped:
                self._reassert_pins(start)
        # Spark calls latestOffset(start) only once the batch ending at ``start`` is in the
        # commit log, so a table whose snapshot ``start`` shows consumed can be released now. This
        # also covers the last batch of Trigger.AvailableNow, which never sees a commit().
        self._release_finished(start)
        start = self._apply_replacements(start)
        pending, latest_log = self._pending(start)
        self._latest_available = self._advance(start, pending, latest_log).to_json()

        limit = limit if limit is not None else self.default_read_limit()
        budget = None
        if isinstance(limit, ReadMaxRows):
            budget = limit.max_rows
        elif isinstance(limit, ReadMinRows):
            total = sum(pending.values())
            waited = self._now_ms() - self._last_batch_ms
            # Under AvailableNow no more data is coming: waiting for a minimum would only stall.
            if (total < limit.min_rows and waited < self.options.max_trigger_delay_ms
                    and self._available_now_target is None):
                return start_json
            budget = self.options.max_offsets_per_trigger
        alloc = pending if budget is None else spread(pending, budget)
        if not any(alloc.values()):
            end = start.to_json()
            return start_json if end == start_json else end
        self._last_batch_ms = self._now_ms()
        return self._advance(start, alloc, latest_log).to_json()

    def _pending(self, start: SourceOffset) -> tuple[dict[BucketKey, int], dict[BucketKey, int]]:
        """Units available per bucket: unread snapshot rows, or (once the snapshot was fully
        read in an earlier batch) changelog records up to the latest offset."""
        pending: dict[BucketKey, int] = {}
        latest_log: dict[BucketKey, int] = {}
        for tid, t in start.tables.items():
            in_snapshot = {b for b, s in t.snapshot.items() if not s.complete}
            for b, s in t.snapshot.items():
                if not s.complete:
                    pending[(tid, b)] = s.remaining
            log_buckets = [b for b in t.log if b not in in_snapshot]
            if not log_buckets:
                continue
            latest = self.admin.list_offsets(t.name, spec="latest")
            for b in log_buckets:
                end = latest.get(b, t.log[b])
                if self._available_now_target is not None:
                    end = min(end, self._available_now_target.get((tid, b), end))
                latest_log[(tid, b)] = end
                pending[(tid, b)] = max(0, end - t.log[b])
        return pending, latest_log

    @staticmethod
    def _advance(start: SourceOffset, alloc: dict[BucketKey, int],
                 latest_log: dict[BucketKey, int]) -> SourceOffset:
        tables = {}
        for tid, t in start.tables.items():
            snapshot, logs = dict(t.snapshot), dict(t.log)
            for b, s in t.snapshot.items():
                n = alloc.get((tid, b), 0) if not s.complete else 0
                if n:
                    snapshot[b] = SnapshotPos(s.snapshot_id, s.row_count, s.next_row + n,
                                              s.log_offset)
            for b in t.log:
                if (tid, b) in latest_log:
                    logs[b] = t.log[b] + min(alloc.get((tid, b), 0), latest_log[(tid, b)] - t.log[b])
            tables[tid] = TablePos(t.name, snapshot, logs)
        return SourceOffset(start.lease_id, tables)

    def report_latest_offset(self) -> dict | None:
        return self._latest_available

    def partitions(self, start_json: dict, end_json: dict) -> list:
        start, end = decode(start_json), decode(end_json)
        self._ensure_ready(start)
        return plan_splits(start, end, self.options.split_max_rows)

    def commit(self, end_json: dict) -> None:
        end = decode(end_json)
        self._ensure_ready(end)
        self._release_finished(end)

    def _release_finished(self, done: SourceOffset) -> None:
        """Release every table whose snapshot rows ``done`` (a processed offset) all covers."""
        if not self._supports_leases():
            return
        for tid, t in done.tables.items():
            if t.snapshot and t.snapshot_complete and tid not in self.released:
                self._release(tid, t)
        needs_lease = any(t.snapshot and tid not in self.released for tid, t in done.tables.items())
        if not needs_lease and self.keeper is not None:
            self.keeper.stop()

    def _release(self, tid: int, t: TablePos) -> None:
        try:
            self.admin.release_kv_snapshot_lease(self.lease_id, {tid: sorted(t.snapshot)})
        except LeaseNotFound:
            pass  # already gone: released earlier, expired, or emptied
        except FlussError as e:
            log.warning("releasing table %r from KV snapshot lease %r failed (retried at the next "
                        "commit; the lease expires anyway): %s", t.name, self.lease_id, e)
            return
        self.released.add(tid)
        log.info("table %r finished its snapshot phase; released it from lease %r",
                 t.name, self.lease_id)

    def stop(self) -> None:
        """Best-effort cleanup only (see the module docstring: the lease is kept on purpose)."""
        if self.keeper is not None:
            self.keeper.stop()
        for conn in (self._conn, self._keeper_conn):
            try:
                if conn is not None:
                    conn.close()
            except Exception:  # noqa: BLE001 - cleanup must not raise
                pass
        self._conn = self._keeper_conn = None
