"""One contract for the ``Cluster`` interface the connector and the tiering job use, run against
the unit tests' ``FakeCluster`` and against ``EmbeddedCluster`` over real servers, so the fake
cannot drift from the servers."""

from __future__ import annotations

import time
import uuid

import pytest

from fluss_spark.client import Cluster, EmbeddedCluster
from fluss_spark.testing.clock import FakeClock
from fluss_spark.errors import (ConfigError, InvalidLeaseId, InvalidRequest, KvSnapshotNotExist,
                                LeaseHeldByOther, LeaseNotFound, LiveScanLost, PartitionNotExist,
                                TableNotExist)
from fluss_spark.local.ports import wait_until
from fluss_spark.testing.fake_cluster import BASE_TIMESTAMP_MS, FakeCluster

HOUR = 3_600_000
DAYS_SCHEMA = "id BIGINT NOT NULL, dt STRING NOT NULL, v STRING"


class FakeBackend:
    """Drives the in-memory fake: time moves by hand."""

    def __init__(self):
        self.clock = FakeClock()
        self.fake = FakeCluster(self.clock)
        self.cluster: Cluster = self.fake
        self._next_snapshot = 1

    def create_pk(self, name: str) -> int:
        return self.fake.add_table(name, buckets=1).info.table_id

    def write(self, name: str, keys: range) -> None:
        """Upserts, as the servers log them: a key that exists gets -U and +U records."""
        have = {r["id"]: r for r in self.fake.state(name, 0)}
        records: list[tuple[str, dict]] = []
        for k in keys:
            row = {"id": k, "v": "x"}
            records += [("-U", have[k]), ("+U", row)] if k in have else [("+I", row)]
        self.fake.append_log(name, 0, records)

    def snapshot(self, name: str) -> int:
        sid, self._next_snapshot = self._next_snapshot, self._next_snapshot + 1
        log = self.fake.tables[name].log[0]
        self.fake.add_snapshot(name, 0, sid, [r for _, r in log], len(log))
        return sid

    def timestamp_between(self, name: str) -> int:
        """A time after every record written so far and before any written next."""
        return BASE_TIMESTAMP_MS + len(self.fake.tables[name].log[0])

    def create_days(self, name: str, days: tuple[str, ...], keys: range) -> None:
        """A one-bucket PK table partitioned by ``dt``: ``keys`` inserted into each day, and a
        snapshot of them."""
        self.fake.add_table(name, schema=DAYS_SCHEMA, pk=("id", "dt"), buckets=1,
                            partition_keys=("dt",))
        for day in days:
            self.fake.add_partition(name, day)
            rows = [{"id": k, "dt": day, "v": "x"} for k in keys]
            self.fake.append_log(name, 0, [("+I", r) for r in rows], partition=day)
            self.fake.add_snapshot(name, 0, self._next_snapshot, rows, len(rows), partition=day)
            self._next_snapshot += 1

    def drop_day(self, name: str, day: str) -> None:
        self.fake.drop_partition(name, {"dt": day})

    def outlive(self, lease_id: str, duration_ms: int) -> None:
        self.clock.advance(duration_ms + 1000)

    def listed_leases(self) -> dict[str, dict]:
        """Lease id -> holders, as an operator lists them (not part of the Cluster interface)."""
        return {x.lease_id: x.holders for x in self.fake.list_kv_snapshot_leases()}


class RealBackend:
    """Drives the shared test cluster's coordinator and tablet servers: time is real."""

    def __init__(self, conn):
        self.conn = conn
        self.admin = conn.admin()
        self.cluster: Cluster = EmbeddedCluster(conn)
        self._last_write_ms = 0

    def create_pk(self, name: str) -> int:
        self.admin.create_table(name, "id BIGINT NOT NULL, v STRING", primary_key=["id"],
                                num_buckets=1)
        return self.admin.get_table(name).table_id

    def write(self, name: str, keys: range) -> None:
        self.conn.writer(name).upsert([{"id": k, "v": "x"} for k in keys])
        self._last_write_ms = int(time.time() * 1000)

    def snapshot(self, name: str) -> int:
        return self.admin.trigger_kv_snapshot(name)[0].snapshot_id

    def timestamp_between(self, name: str) -> int:
        wait_until(lambda: int(time.time() * 1000) > self._last_write_ms, 5, "the clock to tick")
        return int(time.time() * 1000)

    def create_days(self, name: str, days: tuple[str, ...], keys: range) -> None:
        self.admin.create_table(name, DAYS_SCHEMA, primary_key=["id", "dt"], num_buckets=1,
                                partition_keys=["dt"])
        for day in days:
            self.admin.create_partition(name, {"dt": day})
            self.conn.writer(name).upsert([{"id": k, "dt": day, "v": "x"} for k in keys])
            self.admin.trigger_kv_snapshot(name, partition=day)

    def drop_day(self, name: str, day: str) -> None:
        self.admin.drop_partition(name, {"dt": day})

    def outlive(self, lease_id: str, duration_ms: int) -> None:
        def gone():
            try:
                self.cluster.describe_kv_snapshot_lease(lease_id)
                return False
            except LeaseNotFound:
                return True
        wait_until(gone, duration_ms / 1000 + 10, f"lease {lease_id} to expire")

    def listed_leases(self) -> dict[str, dict]:
        return {x.lease_id: x.holders for x in self.admin.list_kv_snapshot_leases()}


@pytest.fixture(params=["fake", "real"])
def backend(request):
    """Each contract test runs once on the fake and once on the shared real cluster."""
    if request.param == "fake":
        return FakeBackend()
    return RealBackend(request.getfixturevalue("conn"))


@pytest.fixture
def table(backend, table_name):
    """A one-bucket PK table with 5 records and a snapshot of them: (name, id, snapshot id)."""
    table_id = backend.create_pk(table_name)
    backend.write(table_name, range(5))
    return table_name, table_id, backend.snapshot(table_name)


def lease_id() -> str:
    return f"contract-{uuid.uuid4().hex[:10]}"


def test_both_are_clusters_with_leases_renewed_by_a_call_and_snapshots_read_by_scan(backend):
    assert isinstance(backend.cluster, Cluster)
    caps = backend.cluster.capabilities()
    assert (caps.leases, caps.lease_renewal, caps.snapshot_read) == (True, "renew",
                                                                     "scan_session")


# -- tables, offsets, snapshots -------------------------------------------------------------------
def test_tables_are_listed_and_an_unknown_one_is_table_not_exist(backend, table):
    name, table_id, _ = table
    assert name in backend.cluster.list_tables()
    info = backend.cluster.get_table(name)
    assert (info.table_id, info.name, info.num_buckets, info.has_primary_key) == (table_id, name,
                                                                                 1, True)
    with pytest.raises(TableNotExist):
        backend.cluster.get_table(name + "_missing")


def test_list_offsets_earliest_latest_and_by_timestamp(backend, table):
    name = table[0]
    cluster = backend.cluster
    assert cluster.list_offsets(name, spec="earliest") == {0: 0}
    assert cluster.list_offsets(name, spec="latest") == {0: 5}
    between = backend.timestamp_between(name)
    backend.write(name, range(100, 103))
    assert cluster.list_offsets(name, spec="timestamp", timestamp_ms=between) == {0: 5}
    assert cluster.list_offsets(name, spec="timestamp", timestamp_ms=0) == {0: 0}
    future = between + 10 * HOUR
    assert cluster.list_offsets(name, spec="timestamp", timestamp_ms=future) == {0: 8}


def test_list_offsets_refuses_bad_arguments_and_unknown_tables(backend, table):
    name = table[0]
    with pytest.raises(ConfigError):
        backend.cluster.list_offsets(name, spec="newest")
    with pytest.raises(ConfigError):
        backend.cluster.list_offsets(name, spec="timestamp")
    with pytest.raises(TableNotExist):
        backend.cluster.list_offsets(name + "_missing", spec="latest")


def test_a_table_without_snapshots_has_no_latest_ones(backend, table_name):
    backend.create_pk(table_name)
    backend.write(table_name, range(2))
    assert backend.cluster.latest_kv_snapshots(table_name) == {}


def test_latest_kv_snapshots_describe_the_newest_snapshot(backend, table):
    name, table_id, sid = table
    snap = backend.cluster.latest_kv_snapshots(name)[0]
    assert (snap.table_id, snap.bucket, snap.snapshot_id, snap.row_count, snap.log_offset) == (
        table_id, 0, sid, 5, 5)
    backend.write(name, range(5, 7))
    newer = backend.snapshot(name)
    assert newer > sid
    snap = backend.cluster.latest_kv_snapshots(name)[0]
    assert (snap.snapshot_id, snap.row_count, snap.log_offset) == (newer, 7, 7)


# -- leases ---------------------------------------------------------------------------------------
def test_acquire_pins_what_exists_and_reports_the_rest_unavailable(backend, table):
    _, table_id, sid = table
    cluster, lid = backend.cluster, lease_id()
    assert cluster.acquire_kv_snapshot_lease(lid, HOUR, {table_id: {0: sid}}) == {}
    info = cluster.describe_kv_snapshot_lease(lid)
    assert info.tables == {table_id: {0: sid}} and info.pin_count == 1
    assert lid in backend.listed_leases()
    # A snapshot that does not exist is never "leased"; the bucket keeps the pin it had.
    assert cluster.acquire_kv_snapshot_lease(lid, HOUR, {table_id: {0: sid + 999}}) == {
        table_id: {0: sid + 999}}
    assert cluster.describe_kv_snapshot_lease(lid).tables == {table_id: {0: sid}}
    # A new lease whose every pin is unavailable still exists, empty.
    empty = lease_id()
    assert cluster.acquire_kv_snapshot_lease(empty, HOUR, {table_id: {0: sid + 999}}) == {
        table_id: {0: sid + 999}}
    assert cluster.describe_kv_snapshot_lease(empty).pin_count == 0
    cluster.drop_kv_snapshot_lease(empty)


def test_reacquiring_a_bucket_moves_its_pin(backend, table):
    name, table_id, sid = table
    cluster, lid = backend.cluster, lease_id()
    cluster.acquire_kv_snapshot_lease(lid, HOUR, {table_id: {0: sid}})
    backend.write(name, range(5, 6))
    newer = backend.snapshot(name)
    assert cluster.acquire_kv_snapshot_lease(lid, HOUR, {table_id: {0: newer}}) == {}
    assert cluster.describe_kv_snapshot_lease(lid).tables == {table_id: {0: newer}}
    cluster.drop_kv_snapshot_lease(lid)


def test_a_table_pinned_for_one_holder_is_refused_to_another(backend, table):
    _, table_id, sid = table
    cluster, lid = backend.cluster, lease_id()
    cluster.acquire_kv_snapshot_lease(lid, HOUR, {table_id: {0: sid}}, holder="query-a")
    with pytest.raises(LeaseHeldByOther) as err:
        cluster.acquire_kv_snapshot_lease(lid, HOUR, {table_id: {0: sid + 999}}, holder="query-b")
    assert lid in str(err.value)
    info = cluster.describe_kv_snapshot_lease(lid)
    assert info.tables == {table_id: {0: sid}} and info.holders == {table_id: "query-a"}
    # The same holder (a restart of the same checkpoint) and holder-less callers are not refused.
    assert cluster.acquire_kv_snapshot_lease(lid, HOUR, {table_id: {0: sid}},
                                             holder="query-a") == {}
    assert cluster.acquire_kv_snapshot_lease(lid, HOUR, {table_id: {0: sid}}) == {}
    assert cluster.describe_kv_snapshot_lease(lid).holders == {table_id: "query-a"}
    # Once the table's pins are gone, another holder may take it.
    cluster.release_kv_snapshot_lease(lid, {table_id: [0]})
    assert cluster.acquire_kv_snapshot_lease(lid, HOUR, {table_id: {0: sid}},
                                             holder="query-b") == {}
    assert cluster.describe_kv_snapshot_lease(lid).holders == {table_id: "query-b"}
    cluster.drop_kv_snapshot_lease(lid)


def test_a_refused_acquire_changes_nothing_even_for_the_other_tables_it_names(backend, table):
    name, table_id, sid = table
    other_id = backend.create_pk(name + "_b")
    backend.write(name + "_b", range(3))
    other_sid = backend.snapshot(name + "_b")
    cluster, lid = backend.cluster, lease_id()
    cluster.acquire_kv_snapshot_lease(lid, HOUR, {table_id: {0: sid}}, holder="query-a")
    before = cluster.describe_kv_snapshot_lease(lid).expires_at_ms
    with pytest.raises(LeaseHeldByOther) as err:
        cluster.acquire_kv_snapshot_lease(lid, 2 * HOUR, {other_id: {0: other_sid},
                                                        table_id: {0: sid}}, holder="query-b")
    assert err.value.code == 1004 and not err.value.retriable
    message = str(err.value)
    for needed in (lid, str(table_id), "scan.kv.snapshot.lease.id",
                   f"fluss-spark lease drop {lid}"):
        assert needed in message
    info = cluster.describe_kv_snapshot_lease(lid)
    assert info.tables == {table_id: {0: sid}} and info.holders == {table_id: "query-a"}
    assert info.expires_at_ms == before
    # query-b may take a table nobody holds under this lease; each table keeps its own holder.
    assert cluster.acquire_kv_snapshot_lease(lid, HOUR, {other_id: {0: other_sid}},
                                           holder="query-b") == {}
    info = cluster.describe_kv_snapshot_lease(lid)
    assert info.holders == {table_id: "query-a", other_id: "query-b"}
    assert backend.listed_leases()[lid] == info.holders
    cluster.drop_kv_snapshot_lease(lid)


def test_a_holder_claims_a_table_pinned_without_one_and_holderless_acquires_claim_nothing(
        backend, table):
    _, table_id, sid = table
    cluster, lid = backend.cluster, lease_id()
    assert cluster.acquire_kv_snapshot_lease(lid, HOUR, {table_id: {0: sid}}) == {}
    assert cluster.describe_kv_snapshot_lease(lid).holders == {}
    assert cluster.acquire_kv_snapshot_lease(lid, HOUR, {table_id: {0: sid}},
                                             holder="query-a") == {}
    assert cluster.describe_kv_snapshot_lease(lid).holders == {table_id: "query-a"}
    with pytest.raises(LeaseHeldByOther):
        cluster.acquire_kv_snapshot_lease(lid, HOUR, {table_id: {0: sid}}, holder="query-b")
    # A holder whose every pin is unavailable on a new lease claims nothing.
    empty = lease_id()
    cluster.acquire_kv_snapshot_lease(empty, HOUR, {table_id: {0: sid + 999}}, holder="query-a")
    assert cluster.describe_kv_snapshot_lease(empty).holders == {}
    cluster.drop_kv_snapshot_lease(empty)
    cluster.drop_kv_snapshot_lease(lid)


def test_an_expired_lease_forgets_its_holders(backend, table):
    _, table_id, sid = table
    cluster, lid = backend.cluster, lease_id()
    cluster.acquire_kv_snapshot_lease(lid, 2_000, {table_id: {0: sid}}, holder="query-a")
    backend.outlive(lid, 2_000)
    assert cluster.acquire_kv_snapshot_lease(lid, HOUR, {table_id: {0: sid}},
                                             holder="query-b") == {}
    assert cluster.describe_kv_snapshot_lease(lid).holders == {table_id: "query-b"}
    cluster.drop_kv_snapshot_lease(lid)


def test_bad_lease_ids_holders_and_durations_are_refused(backend, table):
    _, table_id, sid = table
    cluster, lid = backend.cluster, lease_id()
    with pytest.raises(InvalidLeaseId):
        cluster.acquire_kv_snapshot_lease("no/slashes", HOUR, {table_id: {0: sid}})
    for bad in ("", "has space", "x" * 129, "a/b"):
        with pytest.raises(InvalidRequest):
            cluster.acquire_kv_snapshot_lease(lid, HOUR, {table_id: {0: sid}}, holder=bad)
    with pytest.raises(InvalidRequest):
        cluster.acquire_kv_snapshot_lease(lid, 0, {table_id: {0: sid}})
    with pytest.raises(LeaseNotFound):   # nothing above created the lease
        cluster.describe_kv_snapshot_lease(lid)


def test_renew_extends_and_an_unknown_or_expired_lease_is_not_found(backend, table):
    _, table_id, sid = table
    cluster, lid = backend.cluster, lease_id()
    cluster.acquire_kv_snapshot_lease(lid, 2_000, {table_id: {0: sid}})
    before = cluster.describe_kv_snapshot_lease(lid).expires_at_ms
    assert cluster.renew_kv_snapshot_lease(lid, HOUR) > before
    with pytest.raises(LeaseNotFound):
        cluster.renew_kv_snapshot_lease(lease_id(), HOUR)
    cluster.renew_kv_snapshot_lease(lid, 2_000)
    backend.outlive(lid, 2_000)
    with pytest.raises(LeaseNotFound):
        cluster.renew_kv_snapshot_lease(lid, HOUR)
    assert lid not in backend.listed_leases()


def test_release_of_the_last_pin_removes_the_lease_and_unknown_leases_release_nothing(backend,
                                                                                       table):
    _, table_id, sid = table
    cluster, lid = backend.cluster, lease_id()
    assert cluster.release_kv_snapshot_lease(lease_id(), {table_id: [0]}) == 0
    cluster.acquire_kv_snapshot_lease(lid, HOUR, {table_id: {0: sid}})
    assert cluster.release_kv_snapshot_lease(lid, {table_id: [7]}) == 1   # not pinned: no-op
    assert cluster.release_kv_snapshot_lease(lid, {table_id: [0]}) == 0
    with pytest.raises(LeaseNotFound):
        cluster.describe_kv_snapshot_lease(lid)


def test_drop_removes_the_lease_and_an_unknown_drop_says_so(backend, table):
    _, table_id, sid = table
    cluster, lid = backend.cluster, lease_id()
    cluster.acquire_kv_snapshot_lease(lid, HOUR, {table_id: {0: sid}})
    assert cluster.drop_kv_snapshot_lease(lid) is True
    assert cluster.drop_kv_snapshot_lease(lid) is False
    assert lid not in backend.listed_leases()


# -- reads ----------------------------------------------------------------------------------------
META = ["_change_type", "_log_offset", "_commit_timestamp"]


def test_read_log_returns_exactly_the_range_with_the_changelog_columns(backend, table):
    name = table[0]
    rows = [r for b in backend.cluster.read_log(name, 0, 1, 4) for r in b.to_pylist()]
    assert [(r["id"], r["v"], r["_change_type"], r["_log_offset"]) for r in rows] == [
        (1, "x", "+I", 1), (2, "x", "+I", 2), (3, "x", "+I", 3)]
    batches = list(backend.cluster.read_log(name, 0, 0, 2, projection=["v"]))
    assert {tuple(b.schema.names) for b in batches} == {("v", *META)}
    assert sum(b.num_rows for b in batches) == 2
    assert list(backend.cluster.read_log(name, 0, 5, 5)) == []


def test_read_snapshot_pages_by_row_and_projects(backend, table):
    name, _, sid = table
    cluster = backend.cluster
    every = [r["id"] for b in cluster.read_snapshot(name, 0, sid) for r in b.to_pylist()]
    assert sorted(every) == [0, 1, 2, 3, 4]
    part = [r["id"] for b in cluster.read_snapshot(name, 0, sid, start_row=1, limit=3)
            for r in b.to_pylist()]
    assert part == every[1:4]
    narrow = list(cluster.read_snapshot(name, 0, sid, projection=["v"]))
    assert {tuple(b.schema.names) for b in narrow} == {("v",)}
    assert sum(b.num_rows for b in narrow) == 5


def test_a_snapshot_read_can_stop_early_and_a_missing_snapshot_is_not_found(backend, table):
    name, _, sid = table
    scan = backend.cluster.read_snapshot(name, 0, sid, limit=5, batch_size_bytes=1)
    first = next(iter(scan))
    assert first.num_rows >= 1
    scan.close()
    with pytest.raises(KvSnapshotNotExist):
        list(backend.cluster.read_snapshot(name, 0, sid + 999))


def test_a_live_scan_reads_the_current_state_as_of_the_offset_its_open_reports(backend, table):
    name = table[0]
    cluster = backend.cluster
    backend.write(name, range(3, 9))                   # after the snapshot, overlapping it
    assert cluster.capabilities().live_kv_scan
    start = cluster.open_live_scan(name, 0)            # one byte: one row comes back
    # 5 inserts, then 6 upserts of which 2 update (-U, +U): 13 records.
    assert start.log_offset == cluster.list_offsets(name, spec="latest")[0] == 13
    assert start.has_more and start.scanner_id
    rows = [r for b in cluster.read_live_scan(name, 0, start, projection=["id"],
                                              batch_size_bytes=1) for r in b.to_pylist()]
    assert rows == [{"id": i} for i in range(9)]       # key order, every key once
    # The session is used up: another reader of the same open cannot resume it.
    with pytest.raises(LiveScanLost):
        list(cluster.read_live_scan(name, 0, start, batch_size_bytes=1))
    empty = backend.create_pk(name + "_empty")
    assert empty
    nothing = cluster.open_live_scan(name + "_empty", 0)
    assert (nothing.log_offset, nothing.scanner_id, nothing.has_more) == (0, None, False)
    assert list(cluster.read_live_scan(name + "_empty", 0, nothing)) == []


def test_partitions_are_read_by_name_and_pinned_per_partition(backend, table_name):
    days = ("2026-11-24", "2026-11-25")
    backend.create_days(table_name, days, range(3))
    c = backend.cluster
    info = c.get_table(table_name)
    assert info.partition_keys == ("dt",) and [p.name for p in info.partitions] == list(days)
    ids = {p.name: p.partition_id for p in info.partitions}
    for day in days:
        for part in (day, f"dt={day}"):
            assert c.list_offsets(table_name, spec="latest", partition=part) == {0: 3}
        rows = [r for b in c.read_log(table_name, 0, 0, 3, partition=day) for r in b.to_pylist()]
        assert [(r["id"], r["dt"], r["_change_type"]) for r in rows] == [(k, day, "+I")
                                                                       for k in range(3)]
    snaps = {day: c.latest_kv_snapshots(table_name, partition=day)[0] for day in days}
    assert {s.partition_id for s in snaps.values()} == set(ids.values())
    with pytest.raises(PartitionNotExist):
        c.list_offsets(table_name, spec="latest", partition="2030-01-01")
    # Partition pins: what exists is granted, the rest reported by partition.
    lid = lease_id()
    pins = {info.table_id: {ids[d]: {0: snaps[d].snapshot_id} for d in days}}
    missing = c.acquire_kv_snapshot_lease(lid, HOUR, {}, holder="q", partitions={
        info.table_id: {**pins[info.table_id], ids[days[0]]: {0: 9_999}}})
    assert dict(missing) == {} and missing.partitions == {info.table_id: {ids[days[0]]: {0: 9_999}}}
    missing = c.acquire_kv_snapshot_lease(lid, HOUR, {}, holder="q", partitions=pins)
    assert not missing
    assert c.describe_kv_snapshot_lease(lid).partitions == pins
    # Dropping a partition removes its pins; releasing the table's buckets covers the rest.
    backend.drop_day(table_name, days[0])
    wait_until(lambda: c.describe_kv_snapshot_lease(lid).partitions == {
        info.table_id: {ids[days[1]]: {0: snaps[days[1]].snapshot_id}}}, 10,
        "the dropped partition's pins to leave the lease")
    assert c.release_kv_snapshot_lease(lid, {info.table_id: [0]}) == 0
    with pytest.raises(LeaseNotFound):
        c.describe_kv_snapshot_lease(lid)
