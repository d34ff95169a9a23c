"""Live KV scans in the connector (scan.kv.read): planning, offsets, splits and exact reads after
a lost session, with the fake cluster (no Spark, no servers)."""

import json
import logging

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from fluss_spark.connector.enumerator import Enumerator
from fluss_spark.connector.offsets import SnapshotPos, SourceOffset, TablePos, decode, rows_between
from fluss_spark.connector.options import parse_options
from fluss_spark.connector.readers import SplitReader
from fluss_spark.connector.schema import Layout, output_schema
from fluss_spark.connector.splits import LiveScanSplit, LogSplit, SnapshotSplit
from fluss_spark.errors import ConfigError, LiveScanLost
from fluss_spark.testing.fake_cluster import FakeCluster


def rows(n, start=0, tag="r"):
    return [{"id": i, "v": f"{tag}{i}"} for i in range(start, start + n)]


@pytest.fixture
def files_cluster(clock):
    """A cluster whose snapshots are files and that offers live scans (Apache Fluss with
    SCAN_KV): db.pk bucket 0 has snapshot 3 (10 rows at log offset 10) and 5 changes after it,
    bucket 1 snapshot 7 (4 rows at 4) and none; bucket 2 has no snapshot."""
    c = FakeCluster(clock, snapshot_read="files", page_rows=4)
    c.add_table("db.pk", buckets=3)
    c.append_log("db.pk", 0, [("+I", r) for r in rows(10)])
    c.add_snapshot("db.pk", 0, 3, rows(10), 10)
    c.append_log("db.pk", 0, [("+U", {"id": 1, "v": "new"}), ("-D", {"id": 2, "v": "r2"}),
                              ("+I", {"id": 50, "v": "n"}), ("+U", {"id": 3, "v": "x"}),
                              ("+I", {"id": 51, "v": "n"})])
    c.append_log("db.pk", 1, [("+I", r) for r in rows(4, 100)])
    c.add_snapshot("db.pk", 1, 7, rows(4, 100), 4)
    c.append_log("db.pk", 2, [("+I", r) for r in rows(3, 200)])
    return c


def make(cluster, clock, **opts):
    options = parse_options({"bootstrap.servers": "h:1", "table": "db.pk", **opts})
    return Enumerator(options, ["db.pk"], lambda: cluster, clock=clock, renew_in_thread=False)


def reader(cluster, **opts):
    options = parse_options({"bootstrap.servers": "h:1", "table": "db.pk", **opts})
    layout = Layout(output_schema([("db.pk", cluster.tables["db.pk"].info.schema)], False), False)
    return SplitReader(options, layout, cluster_factory=lambda _: cluster)


def collect(r, split):
    return [row for b in r.read(split) for row in b.to_pylist()]


def state(cluster, bucket):
    return sorted((r["id"], r["v"]) for r in cluster.state("db.pk", bucket))


def test_auto_reads_live_where_snapshots_are_files_and_the_servers_offer_live_scans(clock):
    for read, live, expected in (("auto", True, True), ("auto", False, False),
                                 ("snapshot", True, False), ("live", True, True)):
        c = FakeCluster(clock, snapshot_read="files", live_kv_scan=live)
        c.add_table("db.pk", buckets=1)
        assert make(c, clock, **{"scan.kv.read": read}).live_scans() is expected
    embedded = FakeCluster(clock)                   # snapshots read by resumable sessions
    embedded.add_table("db.pk", buckets=1)
    assert make(embedded, clock).live_scans() is False
    assert make(embedded, clock, **{"scan.kv.read": "live"}).live_scans() is True
    none = FakeCluster(clock, snapshot_read="files", live_kv_scan=False)
    none.add_table("db.pk", buckets=1)
    with pytest.raises(ConfigError, match="scan.kv.read=live.*SCAN_KV"):
        make(none, clock, **{"scan.kv.read": "live"}).live_scans()


def test_the_batch_opens_a_live_scan_per_bucket_and_logs_its_offset_before_any_row(
        files_cluster, clock):
    c = files_cluster
    tid = c.tables["db.pk"].info.table_id
    e = make(c, clock)
    first = e.initial_offset()
    assert first["tables"][str(tid)]["snapshot"] == {"0": [3, 10, 0, 10], "1": [7, 4, 0, 4]}
    assert c.calls_of("open_live_scan") == []       # nothing opened before a batch is planned
    end = e.latest_offset(first, ReadAllAvailable())
    t = end["tables"][str(tid)]
    assert end["version"] == 6                      # live entries, origin, the tables' columns
    assert end["origin"] == {str(tid): {"0": 10, "1": 4, "2": 0}}
    assert t["live"] == {"0": 15, "1": 4}           # each bucket's changelog end at the open
    assert t["log"] == {"0": 15, "1": 4, "2": 3}    # live buckets continue from their offset
    assert t["snapshot"] == {"0": [3, 10, 10, 10], "1": [7, 4, 4, 4]}
    # The fallback snapshots the offset names are pinned before Spark logs it.
    assert [sorted(call[2][tid]) for call in c.calls_of("acquire")] == [[0, 1]]
    splits = e.partitions(first, end)
    live = [s for s in splits if isinstance(s, LiveScanSplit)]
    assert [(s.bucket, s.log_offset, s.snapshot_id, s.snapshot_log_offset) for s in live] == \
        [(0, 15, 3, 10), (1, 4, 7, 4)]
    assert all(s.start is not None and s.primary_key == ("id",) for s in live)
    # No snapshot pages and no changelog of the live buckets in this batch; bucket 2 (no
    # snapshot) reads its changelog.
    assert not [s for s in splits if isinstance(s, SnapshotSplit)]
    assert [(s.bucket, s.start, s.end) for s in splits if isinstance(s, LogSplit)] == [(2, 0, 3)]
    r = reader(c)
    for s in live:
        got = collect(r, s)
        assert sorted((g["id"], g["v"]) for g in got) == state(c, s.bucket)
        assert {g["_log_offset"] for g in got} == {s.log_offset - 1}
    assert rows_between(decode(first), decode(end))[tid] == 14 + 3
    # The next batch reads the changelog from each scan's offset; the live entries stay.
    c.append_log("db.pk", 0, [("+I", {"id": 60, "v": "later"})])
    e.commit(end)
    nxt = e.latest_offset(end, ReadAllAvailable())
    assert nxt["tables"][str(tid)]["live"] == {"0": 15, "1": 4}
    assert [(s.bucket, s.start, s.end) for s in e.partitions(end, nxt)] == [(0, 15, 16)]
    assert list(c.leases) == []                     # released once the snapshot phase committed


def test_buckets_are_admitted_whole_within_the_read_limit(files_cluster, clock):
    c = files_cluster
    tid = c.tables["db.pk"].info.table_id
    e = make(c, clock, maxOffsetsPerTrigger="5")
    first = e.initial_offset()
    end = e.latest_offset(first, ReadMaxRows(5))
    t = end["tables"][str(tid)]
    # bucket 0's 10 rows exceed 5, but at least one bucket goes: whole, never cut.
    assert t["live"] == {"0": 15} and t["snapshot"]["0"] == [3, 10, 10, 10]
    assert t["snapshot"]["1"] == [7, 4, 0, 4]
    e.partitions(first, end)
    e.commit(end)
    end2 = e.latest_offset(end, ReadMaxRows(5))
    assert end2["tables"][str(tid)]["live"] == {"0": 15, "1": 4}
    one = make(c, clock, **{"scan.kv.live.max-buckets-per-trigger": "1"})
    end = one.latest_offset(one.initial_offset(), ReadAllAvailable())
    assert end["tables"][str(tid)]["live"] == {"0": 15}


def test_offsets_without_live_scans_stay_version_2_and_live_ones_round_trip():
    plain = SourceOffset("L", {1: TablePos("db.t", {0: SnapshotPos(3, 10, 0, 12)}, {0: 12})})
    assert plain.to_json()["version"] == 1          # no identity: as before
    from fluss_spark.connector.offsets import QueryIdentity
    q = QueryIdentity("h", "full", None, "single")
    v2 = SourceOffset("L", plain.tables, q)
    assert v2.to_json()["version"] == 2 and "live" not in v2.to_json()["tables"]["1"]
    live = SourceOffset("L", {1: TablePos("db.t", {0: SnapshotPos(3, 10, 10, 12)}, {0: 20},
                                          {0: 20})}, q)
    j = live.to_json()
    assert j["version"] == 3 and j["tables"]["1"]["live"] == {"0": 20}
    assert decode(live.dumps()) == live
    bad = dict(j, tables={"1": dict(j["tables"]["1"], live={"0": -1})})
    with pytest.raises(ConfigError, match="live scan log offset -1"):
        decode(bad)


def split_for(cluster, bucket, start=None, snapshot=(3, 10), log_offset=None):
    tid = cluster.tables["db.pk"].info.table_id
    log_offset = len(cluster.tables["db.pk"].log[bucket]) if log_offset is None else log_offset
    return LiveScanSplit(tid, "db.pk", bucket, log_offset, snapshot[0], snapshot[1], ("id",),
                         "L", start)


def test_a_lost_session_reopened_at_the_same_offset_continues_after_the_rows_read(
        files_cluster):
    c = files_cluster
    expected = state(c, 0)
    split = split_for(c, 0, c.open_live_scan("db.pk", 0))
    it = reader(c).read(split)
    got = [r for r in next(it).to_pylist()]         # the first row, from the driver's open
    got += next(it).to_pylist()
    assert c.lose_live_scans() == 1                 # e.g. the session expired
    got += [r for b in it for r in b.to_pylist()]
    assert sorted((g["id"], g["v"]) for g in got) == expected
    assert len(got) == len(expected)                # nothing twice


def test_a_lost_session_whose_state_moved_on_is_rebuilt_from_snapshot_and_changelog(
        files_cluster):
    c = files_cluster
    expected = state(c, 0)
    split = split_for(c, 0, c.open_live_scan("db.pk", 0))
    it = reader(c).read(split)
    got = next(it).to_pylist() + next(it).to_pylist()
    c.lose_live_scans()
    c.append_log("db.pk", 0, [("+U", {"id": 0, "v": "moved"}), ("-D", {"id": 5, "v": "r5"})])
    got += [r for b in it for r in b.to_pylist()]
    assert sorted((g["id"], g["v"]) for g in got) == expected   # the state at 15, not now
    assert {g["_log_offset"] for g in got} == {14}
    # After a driver restart the split has no session: the same, from the start.
    fresh = collect(reader(c), split_for(c, 0, None, log_offset=15))
    assert sorted((g["id"], g["v"]) for g in fresh) == expected


def test_a_state_that_cannot_be_rebuilt_fails_or_continues_from_the_newer_state(
        files_cluster, caplog):
    c = files_cluster
    split = split_for(c, 0, None, log_offset=15)
    c.append_log("db.pk", 0, [("+U", {"id": 0, "v": "moved"})])
    c.tables["db.pk"].log_start[0] = 12             # the changelog after the snapshot is gone
    with pytest.raises(LiveScanLost, match=r"'db.pk' bucket 0.*log offset 15.*failOnDataLoss"):
        collect(reader(c), split)
    with caplog.at_level(logging.WARNING):
        got = collect(reader(c, failOnDataLoss="false"), split)
    assert sorted((g["id"], g["v"]) for g in got) == state(c, 0)   # the newer state, whole
    assert {g["_log_offset"] for g in got} == {15}
    assert any("failOnDataLoss=false" in r.getMessage() for r in caplog.records)


def test_a_newer_snapshot_before_the_offset_also_rebuilds_the_state(files_cluster):
    c = files_cluster
    expected = state(c, 0)
    split = split_for(c, 0, None, snapshot=(None, 0), log_offset=15)
    c.add_snapshot("db.pk", 0, 9, c.state("db.pk", 0, 13), 13)   # taken at offset 13
    c.append_log("db.pk", 0, [("+U", {"id": 0, "v": "moved"})])
    got = collect(reader(c), split)
    assert sorted((g["id"], g["v"]) for g in got) == expected


def test_an_empty_bucket_reads_nothing(clock):
    c = FakeCluster(clock, snapshot_read="files")
    c.add_table("db.pk", buckets=1)
    start = c.open_live_scan("db.pk", 0)
    assert start.scanner_id is None and start.log_offset == 0 and not start.has_more
    split = LiveScanSplit(c.tables["db.pk"].info.table_id, "db.pk", 0, 0, None, 0, ("id",),
                          "L", start)
    assert collect(reader(c), split) == []


def test_a_bucket_partly_read_by_snapshot_pages_goes_on_by_pages_after_a_switch_to_live(
        files_cluster, clock):
    c = files_cluster
    tid = c.tables["db.pk"].info.table_id
    paged = make(c, clock, **{"scan.kv.read": "snapshot"})
    first = paged.initial_offset()
    half = json.loads(json.dumps(first))                  # 4 rows of bucket 0 read by pages
    half["tables"][str(tid)]["snapshot"]["0"][2] = 4
    paged.partitions(first, half)
    paged.commit(half)
    live = make(c, clock, **{"scan.kv.read": "live"})      # restarted with another option
    end = live.latest_offset(half, ReadAllAvailable())
    t = end["tables"][str(tid)]
    assert "0" not in t["live"] and "1" in t["live"]       # bucket 0 was begun: no live scan
    splits = live.partitions(half, end)
    assert [s.bucket for s in splits if isinstance(s, LiveScanSplit)] == [1]
    rest = [s for s in splits if isinstance(s, SnapshotSplit)]
    assert [(s.bucket, s.row_start, s.row_end) for s in rest] == [(0, 4, 10)]
