"""An in-memory ``Cluster`` with the servers' semantics, for connector and tiering unit tests.

``tests/integration/test_admin_contract.py`` runs one suite against this fake and against
``EmbeddedCluster`` over real servers, so the two cannot drift apart.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Generator, Iterable, Iterator, Literal, Mapping, Sequence

import pyarrow as pa

from fluss_spark.client import SnapshotInfo, TableInfo
from fluss_spark.client.cluster import (DEFAULT_SNAPSHOT_BATCH_BYTES, Capabilities, Cluster,
                                        LiveScanStart, PartitionAdmin, PartitionInfo,
                                        RecordBatchStream, SnapshotLocation)
from fluss_spark.clock import Clock
from fluss_spark.testing.clock import FakeClock
from fluss_spark.errors import (ConfigError, CorruptMessage, KvSnapshotNotExist,
                                LiveScanLost,
                                LogOffsetOutOfRange, NonPrimaryKeyTable, PartitionAlreadyExist,
                                PartitionNotExist, TableNotExist, TableNotPartitioned,
                                UnsupportedVersion)
from fluss_spark.protocol.arrow_ipc import bytes_to_table, table_to_bytes
from fluss_spark.protocol.partitions import parse_spec, partition_name, resolve
from fluss_spark.testing.fake_leases import FakeLeases

#: Commit timestamp of changelog record ``offset`` in a fake table is this plus ``offset`` (ms).
BASE_TIMESTAMP_MS = 1_700_000_000_000

_OFFSET_SPECS = ("earliest", "latest", "timestamp")


@dataclass
class FakeTable:
    """One fake table (or one partition of a partitioned one): its metadata, snapshots,
    changelog and retained log start; a partitioned table's buckets are its partitions'."""

    info: TableInfo
    snapshots: dict = field(default_factory=dict)   # bucket -> {snapshot_id: (rows, log_offset)}
    log: dict = field(default_factory=dict)         # bucket -> list of (change_type, row)
    log_start: dict = field(default_factory=dict)   # bucket -> first retained offset
    partition_id: int | None = None
    partitions: dict = field(default_factory=dict)  # partition name -> FakeTable


class FakeCluster(FakeLeases):
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
                 live_kv_scan: bool = True, partition_admin: bool = True,
                 partial_updates: bool = False):
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
        #: The ``location`` of every ``read_snapshot``.
        self.read_locations: list[SnapshotLocation | None] = []
        self.closes = 0
        self._next_id = 100
        self.snapshot_read: Literal["scan_session", "files"] = snapshot_read
        self.live_kv_scan = live_kv_scan
        #: Whether it lists partitions to the client (a cluster that does not: Apache Fluss).
        self.partition_admin = partition_admin
        self.partial_updates = partial_updates
        #: scanner id -> the rows not served yet, of every open live scan.
        self.live_sessions: dict[str, list[dict]] = {}

    # -- setup helpers --------------------------------------------------------------------
    def add_table(self, name, schema="id BIGINT, v STRING", pk=("id",), buckets=2,
                  partition_keys=(), properties=None) -> FakeTable:
        from fluss_spark.protocol.types import parse_schema
        self._next_id += 1
        info = TableInfo(self._next_id, name, parse_schema(schema), tuple(pk), tuple(pk), buckets,
                         properties=dict(properties or {}), partition_keys=tuple(partition_keys))
        t = FakeTable(info, *_empty_buckets(buckets))
        self.tables[name] = t
        return t

    def add_partition(self, name, partition: str) -> FakeTable:
        """Create the partition ``partition`` (a name: ``2026-11-25``) of table ``name``."""
        t = self.tables[name]
        if partition in t.partitions:
            raise PartitionAlreadyExist(f"partition {partition} of table {name} already exists")
        self._next_id += 1
        part = FakeTable(t.info, *_empty_buckets(t.info.num_buckets), partition_id=self._next_id)
        t.partitions[partition] = part
        return part

    def remove_partition(self, name, partition: str) -> None:
        """Drop the partition ``partition`` with its data and its lease pins (as the coordinator
        does, whether by hand or by retention)."""
        pid = self.tables[name].partitions.pop(partition).partition_id
        for lease in self.leases.values():
            lease.get("partition_pins", {}).get(self.tables[name].info.table_id, {}).pop(pid, None)

    def add_snapshot(self, name, bucket, snapshot_id, rows, log_offset, partition=None):
        self._unit(name, partition).snapshots[bucket][snapshot_id] = (list(rows), log_offset)

    def remove_snapshot(self, name, bucket, snapshot_id, partition=None):
        del self._unit(name, partition).snapshots[bucket][snapshot_id]

    def append_log(self, name, bucket, records, partition=None):
        self._unit(name, partition).log[bucket].extend(records)

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

    def _unit(self, name: str, partition: str | None) -> FakeTable:
        """The buckets a read addresses: the table's, or (by name or spec) its partition's."""
        t = self._table(name)
        if not t.info.partitioned:
            if partition is not None:
                raise TableNotPartitioned(f"table {t.info.name} is not partitioned; drop the "
                                          f"partition {partition!r}")
            return t
        if partition is None:
            raise ConfigError(f"table {t.info.name} is partitioned: name a partition")
        if "=" in partition:
            partition = partition_name(resolve(t.info.name, t.info.partition_keys,
                                               parse_spec(partition)))
        if partition not in t.partitions:
            raise PartitionNotExist(f"partition {partition} of table {t.info.name} does not "
                                    f"exist")
        return t.partitions[partition]

    def _by_id(self, tid) -> FakeTable | None:
        return next((t for t in self.tables.values() if t.info.table_id == tid), None)

    def capabilities(self) -> Capabilities:
        # The fake describes its leases whenever it has them; it has no lease listing, snapshot
        # trigger or scan sessions (the CLI's, which no connector or tiering test uses).
        return Capabilities(leases=self.leases_supported, lease_renewal=self.lease_renewal,
                            snapshot_read=self.snapshot_read, live_kv_scan=self.live_kv_scan,
                            lease_describe=self.leases_supported, lease_listing=False,
                            snapshot_trigger=False, scan_sessions=False,
                            partition_admin=self.partition_admin,
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
        t = self._table(name)
        if not t.info.partitioned:
            return t.info
        return replace(t.info, partitions=tuple(
            PartitionInfo(p.partition_id, n, {b: 0 for b in range(t.info.num_buckets)})
            for n, p in sorted(t.partitions.items())))

    # -- partitions (PartitionAdmin) ------------------------------------------------------------
    def list_partitions(self, table: str) -> list[PartitionInfo]:
        info = self.get_table(table)
        if not info.partitioned:
            raise TableNotPartitioned(f"table {table} is not partitioned")
        return list(info.partitions)

    def create_partition(self, table: str, spec: Mapping[str, str], *,
                         ignore_if_exists: bool = False) -> PartitionInfo:
        info = self._table(table).info
        name = partition_name(resolve(table, info.partition_keys, dict(spec)))
        if not (ignore_if_exists and name in self._table(table).partitions):
            self.add_partition(table, name)
        return next(p for p in self.list_partitions(table) if p.name == name)

    def drop_partition(self, table: str, spec: Mapping[str, str], *,
                       ignore_if_not_exists: bool = False) -> None:
        info = self._table(table).info
        name = partition_name(resolve(table, info.partition_keys, dict(spec)))
        if name in self._table(table).partitions:
            self.remove_partition(table, name)
        elif not ignore_if_not_exists:
            raise PartitionNotExist(f"partition {name} of table {table} does not exist")

    def list_tables(self) -> list[str]:
        return sorted(self.tables)

    def list_offsets(self, table: str, buckets: Iterable[int] | None = None,
                     spec: str = "latest", timestamp_ms: int | None = None, *,
                     partition: str | None = None) -> dict[int, int]:
        # The same argument checks as the client's Admin.list_offsets, before any lookup.
        if spec not in _OFFSET_SPECS:
            raise ConfigError(f"offset spec must be one of {', '.join(_OFFSET_SPECS)}, "
                              f"got {spec!r}")
        if spec == "timestamp" and timestamp_ms is None:
            raise ConfigError("offset spec 'timestamp' needs timestamp_ms")
        self.calls.append(("list_offsets", getattr(table, "name", table), spec))
        if partition is not None:
            self.calls.append(("list_offsets_of", getattr(table, "name", table), partition, spec))
        t = self._unit(table, partition)
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
        self.calls.append(("latest_kv_snapshots", getattr(table, "name", table)))
        t = self._unit(table, partition)
        out = {}
        for b, snaps in t.snapshots.items():
            if snaps:
                sid = max(snaps)
                rows, lo = snaps[sid]
                out[b] = SnapshotInfo(t.info.table_id, b, sid, "", lo, len(rows), 0, 0,
                                      partition_id=t.partition_id)
        return out

    # -- reads ------------------------------------------------------------------------------
    def read_log(self, table: str, bucket: int, start: int, end: int,
                 projection: list[str] | None = None, *,
                 partition: str | None = None) -> Iterator[pa.RecordBatch]:
        t = self._unit(table, partition)
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
                      partition: str | None = None,
                      location: SnapshotLocation | None = None) -> RecordBatchStream:
        t = self._unit(table, partition)
        self.read_locations.append(location)

        def batches() -> Generator[pa.RecordBatch, None, None]:
            if snapshot_id not in t.snapshots[bucket]:
                raise KvSnapshotNotExist(f"snapshot {snapshot_id} of {table} bucket {bucket}")
            if location is not None and location != self._location(t, bucket, snapshot_id):
                raise CorruptMessage(f"{location} is not where snapshot {snapshot_id} of "
                                     f"{table} bucket {bucket} lies")
            self.projections.append(("scan", projection))
            schema = (t.info.schema if projection is None
                      else pa.schema([t.info.schema.field(c) for c in projection]))
            rows = t.snapshots[bucket][snapshot_id][0]
            rows = rows[start_row: None if limit is None else start_row + limit]
            for i in range(0, len(rows), self.page_rows):
                yield pa.RecordBatch.from_pylist(rows[i:i + self.page_rows], schema=schema)
        return batches()

    def snapshot_location(self, table: str, bucket: int, snapshot_id: int, *,
                          partition: str | None = None) -> SnapshotLocation | None:
        t = self._unit(table, partition)
        if self.snapshot_read != "files" or snapshot_id not in t.snapshots.get(bucket, {}):
            return None
        return self._location(t, bucket, snapshot_id)

    @staticmethod
    def _location(t: "FakeTable", bucket: int, snapshot_id: int) -> SnapshotLocation:
        """A snapshot's made-up files (a name no other snapshot has) and its log offset."""
        where = f"fake://{t.info.table_id}/{t.partition_id}/{bucket}/{snapshot_id}"
        return SnapshotLocation(t.snapshots[bucket][snapshot_id][1], ((where, "CURRENT"),))

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


def _empty_buckets(buckets: int) -> tuple[dict, dict, dict]:
    """No snapshots, an empty changelog and log start 0 for each of ``buckets`` buckets."""
    return ({b: {} for b in range(buckets)}, {b: [] for b in range(buckets)},
            {b: 0 for b in range(buckets)})


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



#: The type checker holds this implementation to the interface: mypy names any method that differs.
_IMPLEMENTS_CLUSTER: type[Cluster] = FakeCluster
_IMPLEMENTS_PARTITION_ADMIN: type[PartitionAdmin] = FakeCluster
