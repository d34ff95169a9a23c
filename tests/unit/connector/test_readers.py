"""Split readers with a fake client: exact rows, snapshot metadata, data-loss handling, folding."""

import logging

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from fluss_spark.connector.options import parse_options
from fluss_spark.connector.readers import SplitReader, fold_latest
from fluss_spark.connector.schema import Layout, output_schema
from fluss_spark.connector.splits import LogSplit, MergedBucketSplit, SnapshotSplit
from fluss_spark.errors import KvSnapshotNotExist, LogOffsetOutOfRange


@pytest.fixture
def table(cluster):
    t = cluster.add_table("db.pk", buckets=1)
    cluster.add_snapshot("db.pk", 0, 4, [{"id": i, "v": f"s{i}"} for i in range(10)], 3)
    cluster.append_log("db.pk", 0, [
        ("+I", {"id": 0, "v": "s0"}), ("+I", {"id": 1, "v": "s1"}), ("+I", {"id": 2, "v": "s2"}),
        ("-U", {"id": 1, "v": "s1"}), ("+U", {"id": 1, "v": "new"}),
        ("-D", {"id": 2, "v": "s2"}), ("+I", {"id": 42, "v": "n"})])
    return t


def reader(cluster, **opts):
    options = parse_options({"bootstrap.servers": "h:1", "table": "db.pk", **opts})
    layout = Layout(output_schema([("db.pk", cluster.tables["db.pk"].info.schema)], False), False)
    return SplitReader(options, layout, cluster_factory=lambda _: cluster), layout


def collect(r, split):
    return [row for b in r.read(split) for row in b.to_pylist()]


def test_snapshot_split_reads_exactly_its_rows(cluster, table):
    r, layout = reader(cluster)
    batches = list(r.read(SnapshotSplit(table.info.table_id, "db.pk", 0, 4, 2, 7, "L", 3)))
    target = to_arrow_schema(layout.schema, timezone="UTC")
    assert all(b.schema.equals(target) for b in batches)
    got = pa.Table.from_batches(batches).to_pylist()
    assert [g["id"] for g in got] == [2, 3, 4, 5, 6]
    assert {g["_change_type"] for g in got} == {"+I"} and {g["_log_offset"] for g in got} == {2}


def test_lost_snapshot_fails_with_names(cluster, table):
    r, _ = reader(cluster)
    with pytest.raises(KvSnapshotNotExist) as e:
        collect(r, SnapshotSplit(table.info.table_id, "db.pk", 0, 99, 0, 5, "lease-x"))
    assert "'db.pk' bucket 0" in str(e.value) and "99" in str(e.value) and "lease-x" in str(e.value)


def test_lost_snapshot_skipped_when_allowed(cluster, table, caplog):
    r, _ = reader(cluster, failOnDataLoss="false")
    with caplog.at_level(logging.WARNING):
        assert collect(r, SnapshotSplit(table.info.table_id, "db.pk", 0, 99, 0, 5, "L")) == []
    assert any("skipped" in rec.getMessage() for rec in caplog.records)


def test_log_split(cluster, table):
    r, _ = reader(cluster)
    got = collect(r, LogSplit(table.info.table_id, "db.pk", 0, 3, 6))
    assert [(g["_change_type"], g["id"], g["_log_offset"]) for g in got] == [
        ("-U", 1, 3), ("+U", 1, 4), ("-D", 2, 5)]


def test_deleted_log_range(cluster, table):
    cluster.tables["db.pk"].log_start[0] = 5
    r, _ = reader(cluster)
    with pytest.raises(LogOffsetOutOfRange, match="failOnDataLoss=false"):
        collect(r, LogSplit(table.info.table_id, "db.pk", 0, 3, 7))
    r, _ = reader(cluster, failOnDataLoss="false")
    got = collect(r, LogSplit(table.info.table_id, "db.pk", 0, 3, 7))
    assert [g["_log_offset"] for g in got] == [5, 6]


def test_merged_bucket_is_the_state_at_log_end(cluster, table):
    r, _ = reader(cluster)
    got = collect(r, MergedBucketSplit(table.info.table_id, "db.pk", 0, 4, 3, 7, ("id",)))
    state = {g["id"]: g["v"] for g in got}
    expected = {i: f"s{i}" for i in range(10)}
    expected.update({1: "new", 42: "n"})
    del expected[2]
    assert state == expected and len(got) == len(expected)


def test_merged_bucket_survives_a_removed_snapshot(cluster, table):
    cluster.remove_snapshot("db.pk", 0, 4)
    cluster.add_snapshot("db.pk", 0, 6, [{"id": i, "v": "z"} for i in range(3)], 6)
    r, _ = reader(cluster)
    got = collect(r, MergedBucketSplit(table.info.table_id, "db.pk", 0, 4, 3, 7, ("id",)))
    assert {g["id"]: g["v"] for g in got} == {0: "z", 1: "z", 2: "z", 42: "n"}


def test_fold_latest_keeps_last_write_and_drops_deletes():
    snap = pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"], "_change_type": ["+I"] * 3})
    log = pa.table({"k": [2, 2, 3, 4, 4], "v": ["b", "B", "c", "d", "d"],
                    "_change_type": ["-U", "+U", "-D", "+I", "-D"]})
    out = fold_latest([snap, log], ["k"]).to_pylist()
    assert sorted((r["k"], r["v"], r["_change_type"]) for r in out) == [(1, "a", "+I"),
                                                                        (2, "B", "+U")]


def test_spark_stand_in_partition_reads_nothing(cluster, table):
    from pyspark.sql.datasource import InputPartition
    r, _ = reader(cluster)
    assert list(r.read(InputPartition(None))) == []


def narrow_reader(cluster, columns):
    options = parse_options({"bootstrap.servers": "h:1", "table": "db.pk"})
    schema = cluster.tables["db.pk"].info.schema
    layout = Layout(output_schema([("db.pk", pa.schema([schema.field(c) for c in columns]))],
                                  False), False)
    return SplitReader(options, layout, cluster_factory=lambda _: cluster), cluster


def test_a_narrower_schema_is_projected_on_the_servers(cluster, table):
    r, conn = narrow_reader(cluster, ["v"])
    tid = table.info.table_id
    snap = collect(r, SnapshotSplit(tid, "db.pk", 0, 4, 0, 2, "L", 3))
    log = collect(r, LogSplit(tid, "db.pk", 0, 3, 5))
    assert [sorted(row) for row in snap + log] == [["_change_type", "_commit_timestamp",
                                                   "_log_offset", "v"]] * 4
    assert [row["v"] for row in snap + log] == ["s0", "s1", "s1", "new"]
    assert conn.projections == [("scan", ["v"]), ("log", ["v"])]


def test_a_batch_read_of_fewer_columns_still_folds_by_key(cluster, table):
    r, conn = narrow_reader(cluster, ["v"])
    rows = collect(r, MergedBucketSplit(table.info.table_id, "db.pk", 0, 4, 3, 7, ("id",)))
    assert sorted(row["v"] for row in rows) == sorted(
        ["s0", "new"] + [f"s{i}" for i in range(3, 10)] + ["n"])
    assert all("id" not in row for row in rows)
    assert conn.projections == [("scan", ["v", "id"]), ("log", ["v", "id"])]


def test_a_schema_without_table_columns_reads_every_column(cluster, table):
    r, conn = narrow_reader(cluster, [])
    rows = collect(r, SnapshotSplit(table.info.table_id, "db.pk", 0, 4, 0, 2, "L", 3))
    assert [sorted(row) for row in rows] == [["_change_type", "_commit_timestamp",
                                              "_log_offset"]] * 2
    assert conn.projections == [("scan", None)]


def test_the_fold_of_pages_read_at_odd_addresses_prints_no_arrow_warning(capfd):
    # A response's Arrow pages are read in place from the frame, at any byte. Misaligned
    # buffers made the fold's group_by print "An input buffer was poorly aligned" ~25 times per
    # batch read (to the worker's stderr); read_stream hands the fold aligned buffers instead.
    from fluss_spark.connector.readers import fold_latest
    from fluss_spark.protocol.ipc_limits import IpcLimits, read_stream
    table = pa.table({"id": pa.array(range(1000), pa.int64()),
                      "v": pa.array([f"v{i}" for i in range(1000)]),
                      "_change_type": pa.array(["+I"] * 1000)})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    frame = bytearray(b"\x00" + sink.getvalue().to_pybytes())
    folded = fold_latest([read_stream(memoryview(frame)[1:], IpcLimits())], ["id"])
    assert folded.num_rows == 1000
    assert "poorly aligned" not in capfd.readouterr().err


def test_a_snapshot_split_hands_its_location_to_the_read(clock):
    import pickle

    from fluss_spark.client.cluster import SnapshotLocation
    from fluss_spark.errors import CorruptMessage
    from fluss_spark.testing.fake_cluster import FakeCluster
    files = FakeCluster(clock, snapshot_read="files")
    files.add_table("db.pk", buckets=1)
    files.add_snapshot("db.pk", 0, 4, [{"id": i, "v": f"s{i}"} for i in range(10)], 3)
    where = files.snapshot_location("db.pk", 0, 4)
    split = pickle.loads(pickle.dumps(SnapshotSplit(
        files.tables["db.pk"].info.table_id, "db.pk", 0, 4, 0, 10, "L", 3, location=where)))
    r, _ = reader(files)
    assert [row["id"] for row in collect(r, split)] == list(range(10))
    assert files.read_locations == [where]
    elsewhere = SnapshotLocation(3, (("fake://another", "CURRENT"),))
    with pytest.raises(CorruptMessage, match="another"):
        collect(r, SnapshotSplit(split.table_id, "db.pk", 0, 4, 0, 10, "L", 3,
                                 location=elsewhere))
