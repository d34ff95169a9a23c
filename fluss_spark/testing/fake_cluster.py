"""An in-memory ``Cluster`` with the servers' semantics, for connector and tiering unit tests.

``tests/integration/test_admin_contract.py`` runs one suite against this fake and against
``EmbeddedCluster`` over real servers, so the two cannot drift apart.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Generator, Iterable, Iterator, Literal, Mapping, Sequence

import pyarrow as pa

from fluss_spark.client import LeaseInfo, SnapshotInfo, TableInfo
from fluss_spark.client.cluster import (DEFAULT_SNAPSHOT_BATCH_BYTES, Capabilities, Cluster,
                                        LiveScanStart, Pins, RecordBatchStream,
                                        refuse_partition)
from fluss_spark.clock import Clock
from fluss_spark.testing.clock import FakeClock
from fluss_spark.errors import (ConfigError, InvalidLeaseId, InvalidRequest, KvSnapshotNotExist,
                                LeaseHeldByOther, LeaseNotFound, LiveScanLost,
                                LogOffsetOutOfRange, NonPrimaryKeyTable, TableNotExist,
                                UnsupportedVersion)
from fluss_spark.protocol.arrow_ipc import bytes_to_table, table_to_bytes
from fluss_spark.metadata.layout import check_lease_id

#: Commit timestamp of changelog record ``offset`` in a fake table is this plus ``offset`` (ms).
BASE_TIMESTAMP_MS = 1_700_000_000_000

_OFFSET_SPECS = ("earliest", "latest", "timestamp")


@dataclass
class FakeTable:
    """One fake table: its metadata, snapshots, changelog and retained log start."""

    info: TableInfo
    snapshots: dict = field(default_factory=dict)   # bucket -> {snapshot_id: (rows, log_offset)}
    log: dict = field(default_factory=dict)         # bucket -> list of (change_type, row)
    log_start: dict = field(default_factory=dict)   # bucket -> first retained offset


class FakeCluster:
    """A ``Cluster`` in memory, with the lease semantics of the coordinator.

    A record's commit timestamp is ``BASE_TIMESTAMP_MS + offset``; a snapshot read sends
    ``page_rows`` rows per batch. ``lease_renewal="reacquire"`` behaves like a cluster without a
    renew call (Apache Fluss 0.9.1): renewing raises ``UnsupportedVersion``. A live scan reads
    a bucket's state as of its changelog end (the latest snapshot plus the records after it,
    folded by key) in key order; ``lose_live_scans()`` ends every open session, as a tablet
    restart or an expiry would.
    """

    def __init__(self, clock: Clock | None = None, leases: bool = True,
                 lease_renewal: Literal["renew", "reacquire"] = "renew", page_rows: int = 3,
                 snapshot_read: Literal["scan_session", "files"] = "scan_session",
                 live_kv_scan: bool = True, partial_updates: bool = False):
        self.clock: Clock = clock if clock is not None else FakeClock()
        self.leases_supported = leases
        self.lease_renewal: Literal["renew", "reacquire"] = lease_renewal
        self.page_rows = page_rows
        self.tables: dict[str, FakeTable] = {}
        #: lease id -> {"pins": {table_id: {bucket: snapshot_id}}, "holders": {table_id: holder},
        #: "expires": ms, "created": ms}
        self.leases: dict[str, dict] = {}
        self.calls: list[tuple] = []
        #: ``(table, op, rows)`` of every call of a ``table_writer`` (op ``flush``: no rows).
        self.written: list[tuple[str, str, list[dict]]] = []
        #: (``"scan"`` or ``"log"``, the columns asked for) of every read.
        self.projections: list[tuple[str, list | None]] = []
        self.closes = 0
        self._next_id = 100
        self.snapshot_read: Literal["scan_session", "files"] = snapshot_read
        self.live_kv_scan = live_kv_scan
        self.partial_updates = partial_updates
        #: scanner id -> the rows not served yet, of every open live scan.
        self.live_sessions: dict[str, list[dict]] = {}

    # -- setup helpers --------------------------------------------------------------------
    def add_table(self, name, schema="id BIGINT, v STRING", pk=("id",), buckets=2,
                  partition_keys=()) -> FakeTable:
        from fluss_spark.protocol.types import parse_schema
        self._next_id += 1
        info = TableInfo(self._next_id, name, parse_schema(schema), tuple(pk), tuple(pk), buckets,
                         partition_keys=tuple(partition_keys))
        t = FakeTable(info, {b: {} for b in range(buckets)}, {b: [] for b in range(buckets)},
                      {b: 0 for b in range(buckets)})
        self.tables[name] = t
        return t

    def add_snapshot(self, name, bucket, snapshot_id, rows, log_offset):
        self.tables[name].snapshots[bucket][snapshot_id] = (list(rows), log_offset)

    def remove_snapshot(self, name, bucket, snapshot_id):
        del self.tables[name].snapshots[bucket][snapshot_id]

    def append_log(self, name, bucket, records):
        self.tables[name].log[bucket].extend(records)

    def lose_live_scans(self) -> int:
        """End every open live scan session; returns how many there were."""
        n = len(self.live_sessions)
        self.live_sessions.clear()
        return n

    def calls_of(self, kind):
        return [c for c in self.calls if c[0] == kind]

    def _table(self, name: str) -> FakeTable:
        name = getattr(name, "name", name)
        if name not in self.tables:
            raise TableNotExist(name)
        return self.tables[name]

    def _by_id(self, tid) -> FakeTable | None:
        return next((t for t in self.tables.values() if t.info.table_id == tid), None)

    def _now_ms(self) -> int:
        return self.clock()

    def _expire(self):
        now = self._now_ms()
        for lid in [k for k, v in self.leases.items() if v["expires"] <= now]:
            del self.leases[lid]

    def _lease_api(self):
        if not self.leases_supported:
            raise UnsupportedVersion("this fake cluster has no KV snapshot lease API")

    # -- the Cluster interface ----------------------------------------------------------------
    def capabilities(self) -> Capabilities:
        # The fake describes its leases whenever it has them; it has no lease listing, snapshot
        # trigger or scan sessions (the CLI's, which no connector or tiering test uses).
        return Capabilities(leases=self.leases_supported, lease_renewal=self.lease_renewal,
                            snapshot_read=self.snapshot_read, live_kv_scan=self.live_kv_scan,
                            lease_describe=self.leases_supported, lease_listing=False,
                            snapshot_trigger=False, scan_sessions=False,
                            partial_updates=self.partial_updates)

    def close(self) -> None:
        self.closes += 1      # stays usable: tests share one fake between "connections"

    def table_writer(self, table: str, options: Mapping | None = None, *,
                     columns: Sequence[str] | None = None) -> "FakeWriter":
        """A writer that records every call in ``written``: ``(table, op, rows as dicts)``."""
        self.calls.append(("table_writer", table, dict(options or {}),
                           None if columns is None else list(columns)))
        self._table(table)
        return FakeWriter(self, table)

    def get_table(self, name: str) -> TableInfo:
        self.calls.append(("get_table", name))
        return self._table(name).info

    def list_tables(self) -> list[str]:
        return sorted(self.tables)

    def list_offsets(self, table: str, buckets: Iterable[int] | None = None,
                     spec: str = "latest", timestamp_ms: int | None = None, *,
                     partition: str | None = None) -> dict[int, int]:
        refuse_partition(partition, table, "the fake cluster")
        # The same argument checks as the client's Admin.list_offsets, before any lookup.
        if spec not in _OFFSET_SPECS:
            raise ConfigError(f"offset spec must be one of {', '.join(_OFFSET_SPECS)}, "
                              f"got {spec!r}")
        if spec == "timestamp" and timestamp_ms is None:
            raise ConfigError("offset spec 'timestamp' needs timestamp_ms")
        self.calls.append(("list_offsets", getattr(table, "name", table), spec))
        t = self._table(table)
        out = {}
        for b in (buckets if buckets is not None else range(t.info.num_buckets)):
            end = len(t.log[b])
            if spec == "earliest":
                out[b] = t.log_start[b]
            elif spec == "latest":
                out[b] = end
            else:  # the first offset committed at or after the timestamp, else the log end
                first = max(0, (timestamp_ms or 0) - BASE_TIMESTAMP_MS)
                out[b] = max(min(first, end), t.log_start[b])
        return out

    def latest_kv_snapshots(self, table: str, *,
                            partition: str | None = None) -> dict[int, SnapshotInfo]:
        refuse_partition(partition, table, "the fake cluster")
        self.calls.append(("latest_kv_snapshots", getattr(table, "name", table)))
        t = self._table(table)
        out = {}
        for b, snaps in t.snapshots.items():
            if snaps:
                sid = max(snaps)
                rows, lo = snaps[sid]
                out[b] = SnapshotInfo(t.info.table_id, b, sid, "", lo, len(rows), 0, 0)
        return out

    # -- leases -----------------------------------------------------------------------------
    def acquire_kv_snapshot_lease(self, lease_id: str, duration_ms: int, tables: Pins,
                                  holder: str | None = None) -> dict[int, dict[int, int]]:
        self._lease_api()
        check_lease_id(lease_id)
        duration_ms = _check_duration(duration_ms)
        if holder is not None:
            _check_holder(holder)
        self.calls.append(("acquire", lease_id, {t: dict(p) for t, p in tables.items()}, holder))
        self._expire()
        now = self._now_ms()
        current = self.leases.get(lease_id)
        pins = {t: dict(p) for t, p in current["pins"].items()} if current else {}
        holders = dict(current["holders"]) if current else {}
        if holder is not None:
            for tid in tables:
                other = holders.get(tid)
                if pins.get(tid) and other is not None and other != holder:
                    raise LeaseHeldByOther(
                        f"KV snapshot lease {lease_id!r} pins table id {tid} for holder "
                        f"{other!r}, not {holder!r}; another query uses the same lease id. Fix: "
                        f"use a distinct scan.kv.snapshot.lease.id, or, if the other query is "
                        f"gone, drop the lease (`fluss-spark lease drop {lease_id}`)")
        unavailable: dict[int, dict[int, int]] = {}
        for tid, wanted in tables.items():
            t = self._by_id(tid)
            for b, sid in wanted.items():
                if b < 0:
                    raise InvalidRequest(f"bucket {b} of table {tid} is negative")
                if t is not None and sid in t.snapshots.get(b, {}):
                    pins.setdefault(tid, {})[b] = sid
                else:
                    unavailable.setdefault(tid, {})[b] = sid
        pins = {t: p for t, p in pins.items() if p}
        if holder is not None:
            holders.update((t, holder) for t in tables if t in pins)
        # Kept even with no pins, as the coordinator does; holders go with their table's pins.
        self.leases[lease_id] = {"pins": pins,
                                 "holders": {t: h for t, h in holders.items() if t in pins},
                                 "created": current["created"] if current else now,
                                 "expires": now + duration_ms}
        return unavailable

    def renew_kv_snapshot_lease(self, lease_id: str, duration_ms: int) -> int:
        self._lease_api()
        if self.lease_renewal != "renew":
            raise UnsupportedVersion("this fake cluster renews a lease by acquiring it again")
        check_lease_id(lease_id)
        duration_ms = _check_duration(duration_ms)
        self.calls.append(("renew", lease_id))
        self._expire()
        if lease_id not in self.leases:
            raise LeaseNotFound(lease_id)
        self.leases[lease_id]["expires"] = self._now_ms() + duration_ms
        return self.leases[lease_id]["expires"]

    def release_kv_snapshot_lease(self, lease_id: str, tables: Mapping[int, Iterable[int]]) -> int:
        self._lease_api()
        check_lease_id(lease_id)
        self.calls.append(("release", lease_id, {t: list(b) for t, b in tables.items()}))
        self._expire()
        lease = self.leases.get(lease_id)
        if lease is None:
            return 0
        pins = lease["pins"]
        removed = False
        for tid, buckets in tables.items():
            for b in buckets:
                removed |= pins.get(tid, {}).pop(b, None) is not None
            if tid in pins and not pins[tid]:
                del pins[tid]
                lease["holders"].pop(tid, None)
        remaining = sum(len(p) for p in pins.values())
        if removed and not remaining:
            del self.leases[lease_id]
        return remaining

    def drop_kv_snapshot_lease(self, lease_id: str) -> bool:
        self._lease_api()
        check_lease_id(lease_id)
        self.calls.append(("drop", lease_id))
        return self.leases.pop(lease_id, None) is not None

    def list_kv_snapshot_leases(self) -> list[LeaseInfo]:
        self._lease_api()
        self._expire()
        return [self._info(lid) for lid in sorted(self.leases)]

    def describe_kv_snapshot_lease(self, lease_id: str) -> LeaseInfo:
        self._lease_api()
        check_lease_id(lease_id)
        self._expire()
        if lease_id not in self.leases:
            raise LeaseNotFound(lease_id)
        return self._info(lease_id)

    def _info(self, lease_id) -> LeaseInfo:
        v = self.leases[lease_id]
        tables = {t: dict(p) for t, p in v["pins"].items() if p}
        return LeaseInfo(lease_id, v["expires"], v["created"], tables,
                         sum(len(p) for p in tables.values()),
                         {t: h for t, h in v["holders"].items() if t in tables})


    # -- reads ------------------------------------------------------------------------------
    def read_log(self, table: str, bucket: int, start: int, end: int,
                 projection: list[str] | None = None, *,
                 partition: str | None = None) -> Iterator[pa.RecordBatch]:
        refuse_partition(partition, table, "the fake cluster")
        t = self._table(table)
        self.projections.append(("log", projection))
        schema = t.info.changelog_schema(projection)

        def batches() -> Iterator[pa.RecordBatch]:
            if start < t.log_start[bucket]:
                raise LogOffsetOutOfRange(f"offset {start} of {table} bucket {bucket} is below "
                                          f"the log start {t.log_start[bucket]}")
            recs = t.log[bucket][start:end]
            rows = [dict(row, _change_type=ct, _log_offset=start + i,
                         _commit_timestamp=BASE_TIMESTAMP_MS + start + i)
                    for i, (ct, row) in enumerate(recs)]
            if rows:
                yield pa.RecordBatch.from_pylist(rows, schema=schema)
        return batches()

    def read_snapshot(self, table: str, bucket: int, snapshot_id: int, *, start_row: int = 0,
                      limit: int | None = None, projection: list[str] | None = None,
                      batch_size_bytes: int = DEFAULT_SNAPSHOT_BATCH_BYTES,
                      partition: str | None = None) -> RecordBatchStream:
        refuse_partition(partition, table, "the fake cluster")
        t = self._table(table)

        def batches() -> Generator[pa.RecordBatch, None, None]:
            if snapshot_id not in t.snapshots[bucket]:
                raise KvSnapshotNotExist(f"snapshot {snapshot_id} of {table} bucket {bucket}")
            self.projections.append(("scan", projection))
            schema = (t.info.schema if projection is None
                      else pa.schema([t.info.schema.field(c) for c in projection]))
            rows = t.snapshots[bucket][snapshot_id][0]
            rows = rows[start_row: None if limit is None else start_row + limit]
            for i in range(0, len(rows), self.page_rows):
                yield pa.RecordBatch.from_pylist(rows[i:i + self.page_rows], schema=schema)
        return batches()

    # -- live scans -------------------------------------------------------------------------
    def state(self, table: str, bucket: int, end: int | None = None) -> list[dict]:
        """The bucket's rows as of changelog offset ``end`` (default: its end), in key order."""
        t = self._table(table)
        log = t.log[bucket]
        end = len(log) if end is None else end
        base = [(lo, rows) for rows, lo in t.snapshots[bucket].values() if lo <= end]
        start, rows = max(base, key=lambda x: x[0]) if base else (0, [])
        key = t.info.primary_key
        state = {tuple(r[k] for k in key): r for r in rows}
        for change_type, row in log[start:end]:
            k = tuple(row[c] for c in key)
            if change_type in ("+I", "+U"):
                state[k] = row
            elif change_type == "-D":
                state.pop(k, None)
        return [state[k] for k in sorted(state)]

    def open_live_scan(self, table: str, bucket: int, *,
                       batch_size_bytes: int = 1) -> LiveScanStart:
        t = self._table(table)
        if not self.live_kv_scan:
            raise UnsupportedVersion("this fake cluster has no live KV scans")
        if not t.info.primary_key:
            raise NonPrimaryKeyTable(f"{table} has no primary key")
        self.calls.append(("open_live_scan", table, bucket))
        rows = self.state(table, bucket)
        first = rows[:1] if batch_size_bytes <= 1 else rows[:self.page_rows]
        scanner = None
        if len(rows) > len(first):
            scanner = uuid.uuid4().hex
            self.live_sessions[scanner] = rows[len(first):]
        records = table_to_bytes(pa.Table.from_pylist(first, schema=t.info.schema))
        return LiveScanStart(len(t.log[bucket]), scanner, records, scanner is not None)

    def read_live_scan(self, table: str, bucket: int, start: LiveScanStart, *,
                       projection: list[str] | None = None,
                       batch_size_bytes: int = DEFAULT_SNAPSHOT_BATCH_BYTES) -> RecordBatchStream:
        t = self._table(table)
        self.projections.append(("live", projection))
        schema = (t.info.schema if projection is None
                  else pa.schema([t.info.schema.field(c) for c in projection]))

        def batches() -> Generator[pa.RecordBatch, None, None]:
            first = bytes_to_table(start.records).select(schema.names)
            yield from (b for b in first.to_batches() if b.num_rows)
            if start.scanner_id is None:
                return
            while True:
                rows = self.live_sessions.get(start.scanner_id)
                if rows is None:
                    raise LiveScanLost(f"live scan {start.scanner_id} of {table} bucket "
                                       f"{bucket} lost its session")
                page, rest = rows[:self.page_rows], rows[self.page_rows:]
                if rest:
                    self.live_sessions[start.scanner_id] = rest
                else:
                    del self.live_sessions[start.scanner_id]
                yield pa.RecordBatch.from_pylist(page, schema=schema)
                if not rest:
                    return
        return batches()


class FakeWriter:
    """A ``RowWriter`` of a ``FakeCluster``: calls are recorded in the cluster's ``written``."""

    def __init__(self, cluster: FakeCluster, table: str):
        self.cluster = cluster
        self.table = table

    def _record(self, op: str, data: pa.Table) -> None:
        self.cluster.written.append((self.table, op, data.to_pylist()))

    def append(self, data: pa.Table) -> None:
        self._record("append", data)

    def upsert(self, data: pa.Table) -> None:
        self._record("upsert", data)

    def delete(self, data: pa.Table) -> None:
        self._record("delete", data)

    def flush(self) -> None:
        self.cluster.written.append((self.table, "flush", []))

    def close(self) -> None:
        pass


def _check_duration(duration_ms) -> int:
    # The client sends int(duration_ms); the coordinator refuses anything not positive.
    duration_ms = int(duration_ms)
    if duration_ms <= 0:
        raise InvalidRequest(f"duration_ms must be a positive integer, got {duration_ms!r}")
    return duration_ms


def _check_holder(holder) -> None:
    # The coordinator refuses a holder that is not a valid lease id as a bad request.
    try:
        check_lease_id(holder)
    except InvalidLeaseId:
        raise InvalidRequest(f"invalid lease holder {holder!r}") from None


#: The type checker holds this implementation to the interface: mypy names any method that differs.
_IMPLEMENTS_CLUSTER: type[Cluster] = FakeCluster
