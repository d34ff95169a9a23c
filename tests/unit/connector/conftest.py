"""Fakes for driving the connector without a cluster: an in-memory admin, clock and client."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pytest

from fluss_spark.client.model import SnapshotInfo, TableInfo
from fluss_spark.errors import KvSnapshotNotExist, LeaseNotFound, LogOffsetOutOfRange, TableNotExist


class FakeClock:
    """Seconds since the epoch, moved by hand."""

    def __init__(self, t: float = 1_700_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@dataclass
class FakeTable:
    """One fake table: its metadata, snapshots, changelog and retained log start."""

    info: TableInfo
    # bucket -> list of rows (dicts) in key order, per snapshot id
    snapshots: dict = field(default_factory=dict)   # bucket -> {snapshot_id: (rows, log_offset)}
    log: dict = field(default_factory=dict)         # bucket -> list of (change_type, row)
    log_start: dict = field(default_factory=dict)   # bucket -> first retained offset


class FakeAdmin:
    """The admin API the enumerator uses, in memory, with lease semantics of the coordinator."""

    def __init__(self, clock: FakeClock, leases: bool = True):
        self.clock = clock
        self.leases_supported = leases
        self.tables: dict[str, FakeTable] = {}
        self.leases: dict[str, dict] = {}
        self.calls: list[tuple] = []
        self._next_id = 100

    # -- setup helpers --------------------------------------------------------------------
    def add_table(self, name, schema="id BIGINT, v STRING", pk=("id",), buckets=2) -> FakeTable:
        from fluss_spark.protocol.types import parse_schema
        self._next_id += 1
        info = TableInfo(self._next_id, name, parse_schema(schema), tuple(pk), tuple(pk), buckets)
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

    def _table(self, name) -> FakeTable:
        name = getattr(name, "name", name)
        if name not in self.tables:
            raise TableNotExist(name)
        return self.tables[name]

    def _by_id(self, tid) -> FakeTable:
        return next(t for t in self.tables.values() if t.info.table_id == tid)

    def _now_ms(self):
        return int(self.clock() * 1000)

    def _expire(self):
        now = self._now_ms()
        for lid in [l for l, v in self.leases.items() if v["expires"] <= now]:
            del self.leases[lid]

    # -- admin API ------------------------------------------------------------------------
    def get_table(self, name):
        self.calls.append(("get_table", name))
        return self._table(name).info

    def list_tables(self):
        return sorted(self.tables)

    def list_offsets(self, table, buckets=None, spec="latest", timestamp_ms=None):
        self.calls.append(("list_offsets", getattr(table, "name", table), spec))
        t = self._table(table)
        out = {}
        for b in (buckets if buckets is not None else range(t.info.num_buckets)):
            if spec == "earliest":
                out[b] = t.log_start[b]
            elif spec == "latest":
                out[b] = len(t.log[b])
            else:
                out[b] = min(len(t.log[b]), timestamp_ms % 7)  # deterministic stand-in
        return out

    def latest_kv_snapshots(self, table):
        self.calls.append(("latest_kv_snapshots", getattr(table, "name", table)))
        t = self._table(table)
        out = {}
        for b, snaps in t.snapshots.items():
            if snaps:
                sid = max(snaps)
                rows, lo = snaps[sid]
                out[b] = SnapshotInfo(t.info.table_id, b, sid, "", lo, len(rows), 0, 0)
        return out

    def supports_leases(self):
        return self.leases_supported

    def acquire_kv_snapshot_lease(self, lease_id, duration_ms, tables):
        self.calls.append(("acquire", lease_id, {t: dict(p) for t, p in tables.items()}))
        self._expire()
        lease = self.leases.setdefault(lease_id, {"pins": {}, "expires": 0})
        lease["expires"] = self._now_ms() + duration_ms
        unavailable = {}
        for tid, pins in tables.items():
            t = self._by_id(tid)
            for b, sid in pins.items():
                if sid in t.snapshots[b]:
                    lease["pins"].setdefault(tid, {})[b] = sid
                else:
                    unavailable.setdefault(tid, {})[b] = sid
        if not any(lease["pins"].values()):
            del self.leases[lease_id]
        return unavailable

    def renew_kv_snapshot_lease(self, lease_id, duration_ms):
        self.calls.append(("renew", lease_id))
        self._expire()
        if lease_id not in self.leases:
            raise LeaseNotFound(lease_id)
        self.leases[lease_id]["expires"] = self._now_ms() + duration_ms
        return self.leases[lease_id]["expires"]

    def release_kv_snapshot_lease(self, lease_id, tables):
        self.calls.append(("release", lease_id, {t: list(b) for t, b in tables.items()}))
        self._expire()
        if lease_id not in self.leases:
            raise LeaseNotFound(lease_id)
        pins = self.leases[lease_id]["pins"]
        for tid, buckets in tables.items():
            for b in buckets:
                pins.get(tid, {}).pop(b, None)
            if tid in pins and not pins[tid]:
                del pins[tid]
        remaining = sum(len(p) for p in pins.values())
        if not remaining:
            del self.leases[lease_id]
        return remaining

    def calls_of(self, kind):
        return [c for c in self.calls if c[0] == kind]


def project(schema: pa.Schema, columns: list | None) -> pa.Schema:
    return schema if columns is None else pa.schema([schema.field(c) for c in columns])


class _FakeKvScan:
    """An iterator of pages with ``close()``, like the client's KvScan."""

    def __init__(self, batches):
        self._it = iter(batches)
        self.closed = False

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._it)

    def close(self):
        self.closed = True


class FakeConnection:
    """Client facade over a FakeAdmin: admin(), kv_scanner(), log_scanner(), close()."""

    def __init__(self, admin: FakeAdmin, page_rows: int = 3):
        self._admin = admin
        self.page_rows = page_rows
        self.closed = False
        self.projections: list[tuple[str, list | None]] = []   # (scan | log, columns asked for)

    def admin(self):
        return self._admin

    def close(self):
        self.closed = True

    def kv_scanner(self, table):
        conn = self

        class Kv:
            def scan(self, bucket, snapshot_id=None, live=False, projection=None, limit=None,
                     start_row=0, batch_size_bytes=0):
                t = conn._admin._table(table)
                if snapshot_id not in t.snapshots[bucket]:
                    def gone():
                        raise KvSnapshotNotExist(f"snapshot {snapshot_id}")
                        yield
                    return gone()
                conn.projections.append(("scan", projection))
                schema = project(t.info.schema, projection)
                rows = t.snapshots[bucket][snapshot_id][0]
                rows = rows[start_row: None if limit is None else start_row + limit]
                pages = [rows[i:i + conn.page_rows] for i in range(0, len(rows), conn.page_rows)]
                return _FakeKvScan([pa.RecordBatch.from_pylist(p, schema=schema) for p in pages])
        return Kv()

    def log_scanner(self, table, projection=None):
        conn = self
        conn.projections.append(("log", projection))

        class Log:
            def read(self, bucket, start, end):
                t = conn._admin._table(table)
                if start < t.log_start[bucket]:
                    raise LogOffsetOutOfRange(f"{start}")
                recs = t.log[bucket][start:end]
                schema = t.info.changelog_schema(projection)
                rows = [dict(row, _change_type=ct, _log_offset=start + i,
                             _commit_timestamp=1_700_000_000_000 + start + i)
                        for i, (ct, row) in enumerate(recs)]
                if rows:
                    yield pa.RecordBatch.from_pylist(rows, schema=schema)
        return Log()


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def admin(clock):
    return FakeAdmin(clock)


@pytest.fixture
def fake_connection():
    return FakeConnection
