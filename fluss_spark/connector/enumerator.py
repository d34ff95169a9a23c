"""The driver-side enumerator: sequences Spark's calls, binds the run to its checkpoint, keeps the
lease.

It lives in the one long-lived Python process Spark keeps per source per query run, and starts
fresh on every restart. Where offsets go is planned by ``fluss_spark/connector/planning.py``, the
lease is held by ``fluss_spark/connector/lease_session.py``, lost snapshots are replaced by
``fluss_spark/connector/replacements.py``; this module decides when each
happens. Spark calls (see docs/spark_source.md, "How the source meets Spark"):

- ``initial_offset()`` (twice on a fresh start: planned once and memoised). It lists the latest KV
  snapshots of every PK table (``full`` mode) and names a lease id and a holder id, but acquires
  NOTHING: on a restart before batch 0 committed Spark calls it again, and the checkpoint's batch
  0 offset, not this new plan, names the query's lease.
- ``latest_offset(start, limit)``: the next end offset under the read limit. No end offset names a
  snapshot the lease does not pin: a new query's first call pins every snapshot of its initial
  offset BEFORE it plans the end (a snapshot retention removed since the listing is listed again
  and its newer one pinned, which loses nothing: no row was read). Spark has not logged the
  lease id yet, so the lease is provisional: acquired for ``scan.kv.snapshot.lease.grace`` only,
  renewed while the driver lives. A ``start`` that is not this run's own unlogged initial offset
  first binds the run, renews the lease and releases the tables ``start`` shows done (see
  ``commit``).
- ``partitions(start, end)``: splits of a batch whose ``end`` Spark has already written to its
  offset log. The first offset of a run that Spark read from its checkpoint (``end`` here, or a
  ``start`` that is not this run's own initial offset) binds the run to the checkpoint: its
  identity is checked against the query's options, its lease id and holder are adopted (a
  provisional lease of this run becomes the full-duration one), and the snapshots the batch and
  later batches read are acquired, all before any split is returned. So a replayed batch reads
  exactly the snapshots the killed run pinned, and a lease outlives a dead driver by more than
  the grace only once its checkpoint names it. A start that fails for a reason a retry cannot
  mend (a needed snapshot is gone) releases what it pinned.
- ``commit(end)``: runs one batch late; once ``end`` shows a table's snapshot rows all consumed
  (of every partition, for a partitioned table), that table's pins are released (one call per
  table naming each pinned bucket of each partition: those this run holds, else those ``end``
  names). ``latest_offset(start)`` does the same
  for ``start``: Spark asks for the next batch only after the batch ending at ``start`` is in
  its commit log, and the last batch of ``Trigger.AvailableNow`` is never followed by a
  ``commit``. The coordinator removes a lease with no pins left, so the lease is gone when the
  last table is released.

Partitions of partitioned tables are read units of their own (``fluss_spark/connector/discovery.py``
adds new ones and removes gone ones in ``latest_offset``): a partition that joins a table's
snapshot phase is pinned under the same lease before any offset names it, like the first batch's
snapshots, and read from the batch after the one whose end offset adds it.

Nothing here depends on ``stop()`` (Spark often kills the process instead of calling it): it only
stops the renewal thread and closes connections. The lease is deliberately NOT dropped there:
``stop()`` also runs when a query is stopped to be restarted from its checkpoint, and the
restarted run needs the same pins. A query abandoned in the middle of its snapshot phase leaves
its pins until the lease expires (``scan.kv.snapshot.lease.duration``) or an operator drops it.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import replace
from typing import Any, Callable

from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadLimit

from fluss_spark.client.cluster import Cluster, LiveScanStart, TableInfo
from fluss_spark.clock import Clock, monotonic_ms, wall_ms
from fluss_spark.connector.discovery import PartitionChange, PartitionTracker
from fluss_spark.connector.lease_keeper import LeaseKeeper
from fluss_spark.connector.lease_session import LeaseSession
from fluss_spark.connector.offsets import (QueryIdentity, SnapshotPos, SourceOffset, TablePos,
                                           UnitKey, decode, live_read_in, unit_order)
from fluss_spark.connector.options import SourceOptions
from fluss_spark.connector.planning import OffsetPlanner, Step, live_readable
from fluss_spark.connector.replacements import Replacements
from fluss_spark.connector.schema_watch import SchemaWatch
from fluss_spark.connector.splits import LiveScanSplit, located, plan_splits
from fluss_spark.errors import ConfigError, KvSnapshotNotExist, TableNotExist, UnsupportedVersion

log = logging.getLogger(__name__)

#: How the source names itself when it refuses a table.
SPARK_SOURCE = "the Spark source"

_NEW_CHECKPOINT = ("A checkpoint belongs to one query: restore the options it was started with, "
                   "or start this query with a new checkpointLocation.")


class CheckpointMismatch(ConfigError):
    """The query restarted on a checkpoint does not read what the checkpoint was made for."""


class Enumerator:
    """Offsets, lease and splits of one streaming query run (driver side)."""

    def __init__(self, options: SourceOptions, table_names: list[str],
                 connect: Callable[[], Cluster], *, clock: Clock = monotonic_ms,
                 renew_in_thread: bool = True,
                 check_table: Callable[[TableInfo], None] | None = None, wall: Clock = wall_ms):
        """``connect()`` opens a ``Cluster``. ``check_table(info)`` may refuse a table when the
        query starts (e.g. a column the query's schema names but the table lacks). ``wall``
        (epoch ms) tells a partition expired by retention."""
        self.options = options
        self.check_table = check_table
        self.table_names = list(table_names)
        self._connect = connect
        self.clock = clock
        self._cluster: Cluster | None = None
        self.lease = LeaseSession(options, lambda: self.cluster, connect, clock=clock,
                                  renew_in_thread=renew_in_thread)
        self.planner = OffsetPlanner(options, lambda: self.cluster, clock=clock,
                                     live_scans=self.live_scans)
        self.tracker = PartitionTracker(options, lambda: self.cluster, self.planner,
                                           clock=clock, wall=wall)
        self._live: bool | None = None
        # (table id, bucket, log offset) -> the live scan opened for it while planning; a split
        # carries it to its executor (after a driver restart the reader reopens the scan).
        self._live_starts: dict[tuple[int, int, int], LiveScanStart] = {}
        self._initial: dict[str, Any] | None = None
        self.identity: QueryIdentity | None = None
        #: The run is bound to its checkpoint (an offset Spark logged); see ``_bind``.
        self.checkpointed = False
        # Offsets this run returned before it was bound to a checkpoint (JSON text): an offset
        # among them that comes back from Spark was never read by an earlier run.
        self._produced: set[str] = set()
        self.released: set[int] = set()
        self._infos: dict[int, TableInfo] = {}
        self.replacements = Replacements(options, lambda: self.cluster, self.lease, self.planner)
        self.schemas = SchemaWatch(lambda: self.cluster, clock)

    # -- plumbing -----------------------------------------------------------------------------
    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            self._cluster = self._connect()
        return self._cluster

    @property
    def lease_id(self) -> str | None:
        return self.lease.lease_id

    @property
    def keeper(self) -> LeaseKeeper | None:
        return self.lease.keeper

    def live_scans(self) -> bool:
        """Whether KV states are read through live scan sessions (option ``scan.kv.read``)."""
        if self._live is None:
            mode = self.options.kv_read
            caps = self.cluster.capabilities()
            if mode == "live" and not caps.live_kv_scan:
                raise ConfigError(
                    f"scan.kv.read=live: the cluster at {self.options.bootstrap_servers} offers "
                    f"no live KV scans (Apache Fluss has them from its SCAN_KV API, which 0.9.1 "
                    f"lacks); use scan.kv.read=auto or snapshot")
            self._live = mode == "live" or (mode == "auto" and caps.live_kv_scan
                                            and caps.snapshot_read == "files")
        return self._live

    def _leases_supported(self) -> bool:
        return self.lease.supported(self.table_names)

    def _resolve(self) -> list[TableInfo]:
        infos = []
        for name in self.table_names:
            try:
                infos.append(check_partitions(self.cluster, self.cluster.get_table(name),
                                              self.options))
            except TableNotExist:
                raise TableNotExist(f"table {name!r} does not exist on "
                                    f"{self.options.bootstrap_servers}; create it or fix option "
                                    f"'table'/'tables'/'table.pattern'") from None
        if self.check_table is not None:
            for info in infos:
                self.check_table(info)
        self._infos = {i.table_id: i for i in infos}
        self.schemas.started(infos)
        return infos

    def _identity(self, holder: str) -> QueryIdentity:
        o = self.options
        return QueryIdentity(holder, o.startup_mode, o.startup_timestamp_ms,
                             "multi" if o.multi_table else "single", self.schemas.columns)

    # -- initial offset -----------------------------------------------------------------------
    def initial_offset(self) -> dict[str, Any]:
        if self._initial is None:
            self._initial = self._plan_initial().to_json()
            self._produced.add(json.dumps(self._initial))
        return self._initial

    def _plan_initial(self) -> SourceOffset:
        """Where a new query starts, of the tables as ``prepare_for_available_now`` resolved them
        just before if it did (a round trip less); no lease yet (see the module docstring)."""
        return self.planner.initial(list(self._infos.values()) or self._resolve(),
                                    self.options.lease_id or str(uuid.uuid4()),
                                    self._identity(uuid.uuid4().hex))

    # -- binding to the checkpoint ------------------------------------------------------------
    def _is_own(self, offset: SourceOffset) -> bool:
        return json.dumps(offset.to_json()) in self._produced

    def _bind(self, logged: SourceOffset, batch_start: SourceOffset | None = None) -> None:
        """Bind the run to the checkpoint ``logged`` (an offset Spark read from or wrote to its
        offset log): check it is this query's, adopt its lease id and holder, and lease the
        snapshots still to be read (``batch_start``: those the batch ending at ``logged`` reads
        too). Runs once per run, before the first split is planned."""
        if self.checkpointed:
            return
        fresh = self._is_own(logged)  # written by this run: nobody read any of it yet
        if not fresh:
            self._check_identity(logged)
        if self.options.lease_id and self.options.lease_id != logged.lease_id:
            log.warning("option scan.kv.snapshot.lease.id is %r but the checkpoint's lease is %r; "
                        "the checkpoint's lease is used", self.options.lease_id, logged.lease_id)
        if self.lease.bound and (self.lease.lease_id, self.lease.holder) != (logged.lease_id,
                                                                             logged.holder):
            # A provisional lease of this run that the checkpoint does not name: nothing reads it.
            self.lease.release_all(self._names(logged))
        self.lease.bind(logged.lease_id, logged.holder)
        self.checkpointed = True
        self.identity = self.schemas.identity(logged.query) or self._identity(logged.holder)
        self.lease.confirm()
        self._starting(logged, lambda: self._pin(logged, batch_start, lossless=fresh))

    def _pin_first_batch(self, start: SourceOffset) -> SourceOffset:
        """A new query's own initial offset, with every snapshot it names pinned under a
        provisional lease (snapshots gone since the listing replaced by pinned newer ones)."""
        if not self.lease.bound:
            self.lease.bind(start.lease_id, start.holder, provisional=self.lease.is_new(
                start.lease_id, generated=self.options.lease_id is None))
            self.identity = start.query
            self._starting(start, lambda: self._pin(start, None, lossless=True))
        else:
            self.lease.tick()
            if self.lease.lost:
                self._starting(start, lambda: self._pin(self.replacements.apply(start), None,
                                                        lossless=True))
        return self.replacements.apply(start)

    def _starting(self, offset: SourceOffset, pin: Callable[[], None]) -> None:
        """Run ``pin`` for a run that is starting; if it fails for a reason a retry cannot mend,
        release what the run pinned, so a query that cannot start leaves no pins behind (a
        retriable failure keeps them: the checkpoint is still good once the cluster answers)."""
        try:
            pin()
        except Exception as e:
            if not getattr(e, "retriable", False):
                try:
                    self.lease.release_all(self._names(offset))
                except Exception as cleanup:  # noqa: BLE001 - the start's own error wins
                    log.warning("could not release the pins of lease %r after a failed start "
                                "(fluss-spark lease drop %s removes them): %s", self.lease_id,
                                self.lease_id, cleanup)
            raise

    def _check_identity(self, logged: SourceOffset) -> None:
        """Refuse a checkpoint made for other tables, another startup mode or layout."""
        problems = []
        theirs, ours = sorted(t.name for t in logged.tables.values()), sorted(self.table_names)
        if theirs != ours:
            problems.append(f"it reads table(s) {theirs}, this query reads {ours}")
        q, mine = logged.query, self._identity("")
        if q is not None:
            if q.startup_mode != mine.startup_mode:
                problems.append(f"it was started with scan.startup.mode={q.startup_mode!r}, this "
                                f"query has {mine.startup_mode!r}")
            elif q.startup_timestamp_ms != mine.startup_timestamp_ms:
                problems.append(f"it was started with scan.startup.timestamp="
                                f"{q.startup_timestamp_ms}, this query has "
                                f"{mine.startup_timestamp_ms}")
            if q.layout != mine.layout:
                problems.append(f"it has the {q.layout}-table layout, this query the "
                                f"{mine.layout}-table layout (option 'table' gives the "
                                f"single-table layout, 'tables' and 'table.pattern' the "
                                f"multi-table one)")
        if not problems:
            infos = {i.name: i for i in self._resolve()}
            for tid, t in sorted(logged.tables.items()):
                info = infos[t.name]
                if info.table_id != tid:
                    problems.append(f"its table {t.name!r} has id {tid}, the cluster's table "
                                    f"{t.name!r} has id {info.table_id} (it was dropped "
                                    f"and created again: the checkpoint's positions mean nothing "
                                    f"in the new table)")
                elif tuple(info.partition_keys) != tuple(t.partition_keys):
                    problems.append(f"its table {t.name!r} is partitioned by "
                                    f"{list(t.partition_keys)}, the cluster's by "
                                    f"{list(info.partition_keys)}")
            problems += self.schemas.problems(q, infos)
        if problems:
            raise CheckpointMismatch(f"this query does not match its checkpoint "
                                     f"(checkpointLocation): {'; '.join(problems)}. "
                                     f"{_NEW_CHECKPOINT}")

    def _pin(self, logged: SourceOffset, batch_start: SourceOffset | None, *,
             lossless: bool) -> None:
        """Acquire the snapshots ``logged`` still reads; handle the ones that are gone (a
        partition that disappeared is left to ``latest_offset``, which reports it)."""
        pins: dict[UnitKey, dict[int, int]] = {}
        live: set[tuple[UnitKey, int]] = set()
        before_units = batch_start.units() if batch_start is not None else {}
        for key, t in logged.units().items():
            before = before_units.get(key)
            for b, pos in t.snapshot.items():
                if not pos.complete or (batch_start is not None and _reads(before, b, pos)):
                    pins.setdefault(key, {})[b] = pos.snapshot_id
                if batch_start is not None and live_read_in(before, t, b):
                    live.add((key, b))
        if not pins or not self._leases_supported():
            return
        if any(k[1] is not None for k in pins):
            alive = self.tracker.existing(logged)
            pins = {k: bs for k, bs in pins.items() if k in alive}
        unavailable = self.lease.acquire(pins, self._names(logged))
        for key, buckets in sorted(unavailable.items(), key=lambda kv: unit_order(kv[0])):
            for b, sid in sorted(buckets.items()):
                if (key, b) in live:
                    # Read by a live scan: the snapshot was only material to rebuild the state
                    # from if the session is lost (the reader then tries the newest one).
                    log.info("%s bucket %d: KV snapshot %d is gone; its live scan has no "
                             "leased fallback", logged.where(key), b, sid)
                else:
                    self.replacements.replace(logged, key, b, sid, lossless=lossless)

    @staticmethod
    def _names(offset: SourceOffset) -> dict[int, str]:
        return {tid: t.name for tid, t in offset.tables.items()}

    # -- partitions ---------------------------------------------------------------------------
    def _partitions_now(self, start: SourceOffset) -> PartitionChange:
        """``start`` without the partitions that disappeared and with the ones found since, the
        snapshots of the new ones pinned (see fluss_spark/connector/discovery.py)."""
        change = self.tracker.update(start)
        todo = {k: u for k, u in change.added.items() if u.snapshot}
        if not todo or not self._leases_supported():
            return change
        if not self.lease.bound:
            self.lease.bind(start.lease_id, start.holder, provisional=self.lease.is_new(
                start.lease_id, generated=self.options.lease_id is None))
        added = dict(change.added)
        infos = self.tracker.infos(change.offset)
        for _ in range(self.options.lease_acquire_retries + 1):
            pins = {k: {b: s.snapshot_id for b, s in u.snapshot.items()} for k, u in todo.items()}
            self.released -= {k[0] for k in todo}
            unavailable = self.lease.acquire(pins, self._names(start))
            # A snapshot retention removed since the listing had no row read: list again.
            todo = {k: self.tracker.start_of(start, infos[k[0]], added[k].name)
                    for k in unavailable}
            added.update(todo)
            if not todo:
                return PartitionChange(change.offset.with_units(added), added, change.gone)
        raise KvSnapshotNotExist(
            f"could not lease the latest KV snapshots of the new partition(s) "
            f"{', '.join(change.offset.where(k, added[k].name) for k in sorted(todo))} under "
            f"lease {self.lease_id!r} after {self.options.lease_acquire_retries + 1} attempts "
            f"(they were removed by retention faster than they could be leased). Raise the "
            f"table's kv.snapshot.num-retained or kv.snapshot.interval")

    # -- micro-batches ------------------------------------------------------------------------
    def default_read_limit(self) -> ReadLimit:
        return self.planner.default_read_limit()

    def prepare_for_available_now(self) -> None:
        """Fix the target: the changelog ends as of now (snapshots are bounded anyway), of the
        partitions that exist now (added at the next batch if they are new)."""
        self.planner.prepare_for_available_now(self._resolve())
        self.tracker.force()

    def latest_offset(self, start_json: dict[str, Any],
                      limit: ReadLimit | None = None) -> dict[str, Any]:
        given = start = decode(start_json)
        first_batch = not self.checkpointed and start_json == self._initial
        # Any start but this run's own unlogged offsets is logged, its batch committed.
        if self.checkpointed or not self._is_own(start):
            self._bind(start)
            self.lease.tick()
            if self.lease.lost:
                self._pin(start, None, lossless=False)
            start = self.replacements.apply(start)
            # Spark calls latestOffset(start) only once the batch ending at ``start`` is in the
            # commit log, so a table whose snapshot ``start`` shows consumed can be released now.
            # This also covers the last batch of Trigger.AvailableNow, which never sees a commit().
            self._release_finished(start)
        elif first_batch and any(not s.complete for t in start.units().values()
                                 for s in t.snapshot.values()):
            start = self._pin_first_batch(start)
        change = self._partitions_now(start)
        # A partition this batch adds is read from the next batch on: its start position is in
        # no offset Spark logs before then.
        base = change.offset.with_units({}, drop=change.added)
        step = self.planner.next_end(base, limit, self.identity)
        if step is None:
            if not change.changed:
                return start_json
            step = Step(base, reads=False)
        end = self._open_live_scans(base, step.end) if step.reads else step.end
        end = end.with_units(change.added)
        if (not step.reads and not change.changed
                and replace(end, origin=given.origin).to_json() == start_json):
            return start_json
        if first_batch:
            # Spark never logs the first batch's start: its end carries it (offsets.py, v4).
            end = end.with_origin(base)
        if not self.checkpointed:
            self._produced.add(end.dumps())
        return end.to_json()

    def _open_live_scans(self, start: SourceOffset, end: SourceOffset) -> SourceOffset:
        """Open a live scan for every bucket whose snapshot phase the batch ``start -> end``
        admits, and put the offset each reflects into ``end``, so the offset log holds it before
        any row is read. A scan's first row comes back with the open (Fluss always sends one)
        and travels in the split. Partitions are read from their snapshots."""
        if not self.live_scans():
            return end
        units = {}
        before = start.units()
        for key, t in end.units().items():
            if key[1] is not None:
                continue
            s = before.get(key)
            opened = {}
            for b, pos in sorted(t.snapshot.items()):
                prev = s.snapshot.get(b) if s is not None else None
                if pos.complete and live_readable(prev):
                    scan = self.cluster.open_live_scan(t.name, b, batch_size_bytes=1)
                    self._live_starts[(key[0], b, scan.log_offset)] = scan
                    opened[b] = scan.log_offset
            if opened:
                units[key] = replace(t, log={**t.log, **opened}, live={**t.live, **opened})
        return end.with_units(units)

    def report_latest_offset(self) -> dict[str, Any] | None:
        latest = self.planner.latest_available
        return latest.to_json() if latest is not None else None

    def partitions(self, start_json: dict[str, Any],
                   end_json: dict[str, Any]) -> list[InputPartition]:
        end = decode(end_json)
        # A run restarted inside the first batch passes its own new initial offset: the batch's
        # true start is the one its logged end carries.
        start = end.first_batch_start() or decode(start_json)
        # ``end`` is in the offset log already: bind to it and lease what the batch reads
        # before any split exists.
        self._bind(end, batch_start=start)
        self.schemas.check(self.table_names)
        splits = plan_splits(self.replacements.apply(start), self.replacements.apply(end),
                             self.options.split_max_rows, self._live_starts,
                             self._primary_keys(end))
        for split in splits:   # a session is read by one task; retries reuse the split itself
            if isinstance(split, LiveScanSplit):
                self._live_starts.pop((split.table_id, split.bucket, split.log_offset), None)
        return located(splits, self.cluster)

    def _primary_keys(self, offset: SourceOffset) -> dict[int, tuple[str, ...]]:
        """Primary keys of the tables of ``offset`` that a live scan reads."""
        if not any(t.live for t in offset.units().values()):
            return {}
        if not self._infos:
            self._resolve()
        return {tid: tuple(self._infos[tid].primary_key) for tid in offset.tables
                if tid in self._infos}

    def commit(self, end_json: dict[str, Any]) -> None:
        end = decode(end_json)
        self._bind(end)
        self._release_finished(self.replacements.apply(end))

    def _release_finished(self, done: SourceOffset) -> None:
        """Release every table whose snapshot rows ``done`` (a processed offset) all covers, of
        every partition of a partitioned table (one call per table covers its partitions)."""
        if not self._leases_supported():
            return
        units = done.units()
        for tid, t in done.tables.items():
            if t.has_snapshot and t.snapshot_complete and tid not in self.released:
                pins = {k: {b: pos.snapshot_id for b, pos in u.snapshot.items()}
                        for k, u in units.items() if k[0] == tid}
                if self.lease.release(tid, pins, t.name):
                    self.released.add(tid)
        if not any(t.has_snapshot and tid not in self.released for tid, t in done.tables.items()):
            self.lease.stop_renewing()

    def stop(self) -> None:
        """Best-effort cleanup only (see the module docstring: the lease is kept on purpose)."""
        self.lease.close()
        try:
            if self._cluster is not None:
                self._cluster.close()
        except Exception:  # noqa: BLE001 - cleanup must not raise
            pass
        self._cluster = None


def check_partitions(cluster: Cluster, info: TableInfo, options: SourceOptions) -> TableInfo:
    """``info``, unless it is a partitioned table the query cannot read: on a cluster that does
    not list partitions to this client, or through live KV scans (they address tables only)."""
    if not info.partitioned:
        return info
    if not cluster.capabilities().partition_admin:
        raise UnsupportedVersion(f"table {info.name} is partitioned (by "
                                 f"{', '.join(info.partition_keys)}); the cluster at "
                                 f"{options.bootstrap_servers} does not list partitions to this "
                                 f"client yet, so {SPARK_SOURCE} cannot read it")
    if options.kv_read == "live" and info.has_primary_key and options.startup_mode == "full":
        raise ConfigError(f"scan.kv.read=live: table {info.name} is partitioned, and live KV "
                          f"scans read unpartitioned tables only; use scan.kv.read=auto or "
                          f"snapshot")
    return info


def _reads(before: TablePos | None, bucket: int, pos: SnapshotPos) -> bool:
    """Whether a batch from ``before`` reads rows of the snapshot at ``pos``."""
    prev = before.snapshot.get(bucket) if before is not None else None
    first = prev.next_row if prev is not None and prev.snapshot_id == pos.snapshot_id else 0
    return pos.next_row > first
