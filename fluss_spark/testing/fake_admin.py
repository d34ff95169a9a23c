"""An in-memory admin with the coordinator's semantics, for connector unit tests.

``tests/integration/test_admin_contract.py`` runs one suite against this fake and against a real
coordinator process, so the two cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fluss_spark.client.model import LeaseInfo, SnapshotInfo, TableInfo
from fluss_spark.errors import (ConfigError, InvalidLeaseId, InvalidRequest, LeaseHeldByOther,
                                LeaseNotFound, TableNotExist, UnsupportedVersion)
from fluss_spark.metadata.layout import check_lease_id

#: Commit timestamp of changelog record ``offset`` in a fake table is this plus ``offset`` (ms).
BASE_TIMESTAMP_MS = 1_700_000_000_000

_OFFSET_SPECS = ("earliest", "latest", "timestamp")


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
    snapshots: dict = field(default_factory=dict)   # bucket -> {snapshot_id: (rows, log_offset)}
    log: dict = field(default_factory=dict)         # bucket -> list of (change_type, row)
    log_start: dict = field(default_factory=dict)   # bucket -> first retained offset


class FakeAdmin:
    """The admin API the connector uses, in memory, with lease semantics of the coordinator.

    A record's commit timestamp is ``BASE_TIMESTAMP_MS + offset``.
    """

    def __init__(self, clock: FakeClock, leases: bool = True):
        self.clock = clock
        self.leases_supported = leases
        self.tables: dict[str, FakeTable] = {}
        #: lease id -> {"pins": {table_id: {bucket: snapshot_id}}, "holders": {table_id: holder},
        #: "expires": ms, "created": ms}
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

    def calls_of(self, kind):
        return [c for c in self.calls if c[0] == kind]

    def _table(self, name) -> FakeTable:
        name = getattr(name, "name", name)
        if name not in self.tables:
            raise TableNotExist(name)
        return self.tables[name]

    def _by_id(self, tid) -> FakeTable | None:
        return next((t for t in self.tables.values() if t.info.table_id == tid), None)

    def _now_ms(self):
        return int(self.clock() * 1000)

    def _expire(self):
        now = self._now_ms()
        for lid in [l for l, v in self.leases.items() if v["expires"] <= now]:
            del self.leases[lid]

    def _lease_api(self):
        if not self.leases_supported:
            raise UnsupportedVersion("this fake cluster has no KV snapshot lease API")

    # -- tables and offsets -----------------------------------------------------------------
    def get_table(self, name):
        self.calls.append(("get_table", name))
        return self._table(name).info

    def list_tables(self):
        return sorted(self.tables)

    def list_offsets(self, table, buckets=None, spec="latest", timestamp_ms=None):
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
                first = max(0, timestamp_ms - BASE_TIMESTAMP_MS)
                out[b] = max(min(first, end), t.log_start[b])
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

    # -- leases -----------------------------------------------------------------------------
    def supports_leases(self):
        return self.leases_supported

    def acquire_kv_snapshot_lease(self, lease_id, duration_ms, tables, holder=None):
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
        unavailable = {}
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

    def renew_kv_snapshot_lease(self, lease_id, duration_ms):
        self._lease_api()
        check_lease_id(lease_id)
        duration_ms = _check_duration(duration_ms)
        self.calls.append(("renew", lease_id))
        self._expire()
        if lease_id not in self.leases:
            raise LeaseNotFound(lease_id)
        self.leases[lease_id]["expires"] = self._now_ms() + duration_ms
        return self.leases[lease_id]["expires"]

    def release_kv_snapshot_lease(self, lease_id, tables):
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

    def drop_kv_snapshot_lease(self, lease_id):
        self._lease_api()
        check_lease_id(lease_id)
        self.calls.append(("drop", lease_id))
        return self.leases.pop(lease_id, None) is not None

    def list_kv_snapshot_leases(self):
        self._lease_api()
        self._expire()
        return [self._info(lid) for lid in sorted(self.leases)]

    def describe_kv_snapshot_lease(self, lease_id):
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
