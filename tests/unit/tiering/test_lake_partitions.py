"""Lake copies of partitioned tables: the identity spec on the partition keys, rounds applied
per partition (only touched partitions rewritten), offsets and lag per partition (pyiceberg, no
Spark)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from fluss_spark.connector.offsets import SnapshotPos, SourceOffset, TablePos
from fluss_spark.tiering.lake import LakeError, LakeTable
from fluss_spark.tiering.lake_partitions import partition_spec, spec_columns
from fluss_spark.tiering.lake_schema import iceberg_schema
from fluss_spark.tiering.leases import read_snapshots
from fluss_spark.tiering.progress import lag_from_state, latest_offsets
from fluss_spark.tiering.table_query import lake_offsets

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), pa.field("dt", pa.string(), False),
                    ("v", pa.string())])


def changes(rows, start=0):
    """PK changelog rows ``(id, dt, v, change type)`` at offsets from ``start``."""
    return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()),
                     "dt": [r[1] for r in rows], "v": [r[2] for r in rows],
                     "_change_type": [r[3] for r in rows],
                     "_log_offset": pa.array(range(start, start + len(rows)), pa.int64())})


def day_table(root, name="db.days", kind="pk"):
    t = LakeTable.open(root, name)
    t.create(table=name, table_id=5, schema=SCHEMA,
             primary_key=["id", "dt"] if kind == "pk" else (), partition_keys=["dt"])
    return t


def files_by_day(t: LakeTable) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for task in t.iceberg().scan().plan_files():
        out.setdefault(task.file.partition[0], set()).add(task.file.file_path)
    return out


def test_the_spec_is_identity_on_the_partition_keys_and_a_bad_key_is_named():
    ice = iceberg_schema(SCHEMA, ["id", "dt"])
    spec = partition_spec(ice, ["dt"])
    assert [(f.source_id, f.field_id, str(f.transform), f.name) for f in spec.fields] == \
        [(2, 1000, "identity", "dt")]
    assert spec_columns(spec, ice) == ("dt",)
    assert partition_spec(ice, []).is_unpartitioned() and spec_columns(partition_spec(ice, []),
                                                                       ice) == ()
    with pytest.raises(LakeError, match="partition key 'day' is not a column"):
        partition_spec(ice, ["day"])


def test_a_partitioned_copy_is_created_with_the_spec_and_a_different_partitioning_is_refused(
        tmp_path):
    t = day_table(tmp_path)
    spec = t.iceberg().spec()
    assert [(f.name, str(f.transform)) for f in spec.fields] == [("dt", "identity")]
    assert t.state().partition_keys == ("dt",)
    # The same table with the same keys: accepted (a restarted job).
    day_table(tmp_path)
    with pytest.raises(LakeError, match=r"lake table db.days is partitioned by \[dt\] but Fluss "
                                        r"table db.days is not partitioned: drop"):
        t.create(table="db.days", table_id=5, schema=SCHEMA, primary_key=["id", "dt"])
    # The copy of an unpartitioned table stays unpartitioned; partitioning it later is refused.
    flat = LakeTable.open(tmp_path, "db.flat")
    flat.create(table="db.flat", table_id=6, schema=SCHEMA, primary_key=["id", "dt"])
    assert flat.iceberg().spec().is_unpartitioned() and flat.state().partition_keys == ()
    with pytest.raises(LakeError, match=r"db.flat is not partitioned but Fluss table db.flat is "
                                        r"partitioned by \[dt\]"):
        flat.create(table="db.flat", table_id=6, schema=SCHEMA, primary_key=["id", "dt"],
                    partition_keys=["dt"])


def test_a_pk_round_is_applied_per_partition_and_rewrites_only_the_partitions_it_touches(
        tmp_path):
    t = day_table(tmp_path)
    t.commit_round(changes([(i, d, "a", "+I") for d in ("d1", "d2", "d3") for i in range(4)]),
                   query_id="q", batch_id=0)
    before = files_by_day(t)
    assert sorted(before) == ["d1", "d2", "d3"]
    # The same id in two days is two keys; the round touches d2 only.
    rewritten: list = []

    def run(fn, items):                   # the copy-on-write's tasks, one per data file read
        rewritten.extend(f.file_path for f in items)
        return [fn(x) for x in items]
    written = t.writer().write(changes([(1, "d2", "b", "+U"), (2, "d2", "a", "-D"),
                                        (9, "d2", "n", "+I")], start=100))
    t.commit_files(written, query_id="q", batch_id=1, run=run)
    assert set(rewritten) == before["d2"]     # no data file of d1 or d3 was even read
    after = files_by_day(t)
    assert after["d1"] == before["d1"] and after["d3"] == before["d3"]
    assert not after["d2"] & before["d2"]
    got = sorted(tuple(r.values()) for r in t.read().to_pylist())
    assert got == sorted([(i, d, "a") for d in ("d1", "d3") for i in range(4)]
                         + [(0, "d2", "a"), (1, "d2", "b"), (3, "d2", "a"), (9, "d2", "n")])
    assert t.state().rows == 12
    # A compaction keeps the partitions (and the rows).
    t.compact(force=True)
    assert sorted(files_by_day(t)) == ["d1", "d2", "d3"]
    assert sorted(tuple(r.values()) for r in t.read().to_pylist()) == got


def test_a_log_round_of_a_partitioned_table_appends_into_its_partitions(tmp_path):
    t = day_table(tmp_path, "db.plog", kind="log")
    rows = changes([(i, d, "m", "+A") for d in ("d1", "d2") for i in range(3)])
    t.commit_round(rows, query_id="q", batch_id=0)
    assert sorted(files_by_day(t)) == ["d1", "d2"] and t.read().num_rows == 6


def partitioned_offset() -> SourceOffset:
    d1 = TablePos("2026-11-24", {0: SnapshotPos(3, 10, 4, 7)}, {0: 7, 1: 2})
    d2 = TablePos("2026-11-25", {}, {0: 5, 1: 0})
    return SourceOffset("lease", {5: TablePos("db.days", partition_keys=("dt",),
                                              partitions={11: d1, 12: d2}, gone=(1, 3))})


def test_lake_offsets_and_lag_are_per_partition_and_sum_over_the_partitions(tmp_path):
    offsets, done = lake_offsets(partitioned_offset(), "db.days")
    assert not done and offsets == {
        "partitions": {"11": {"name": "2026-11-24", "log": {"0": 7, "1": 2},
                              "snapshot": {"0": [3, 10, 4]}},
                       "12": {"name": "2026-11-25", "log": {"0": 5, "1": 0}, "snapshot": {}}},
        "gone": {"partitions": 1, "unread": 3}}
    assert read_snapshots(offsets) and not read_snapshots({"partitions": {"12": {"log": {}}}})
    t = day_table(tmp_path)
    t.commit_round(changes([(1, "2026-11-24", "a", "+I")]), query_id="q", batch_id=0,
                   fluss_offsets=offsets, snapshot_complete=done)
    st = t.state()
    summary = t.iceberg().current_snapshot().summary
    assert summary["fluss.summary-version"] == "2" and json.loads(
        summary["fluss.offsets"]) == offsets
    # d1: 6 snapshot rows + (9-7) + (2-2); d2: (8-5) + (1-0); a new partition 13 from 0: 4;
    # a partition the lake holds but the table no longer has (gone) counts nothing.
    assert lag_from_state(st, {11: {0: 9, 1: 2}, 12: {0: 8, 1: 1}, 13: {0: 4}}) == \
        6 + 2 + 3 + 1 + 4
    assert lag_from_state(st, {12: {0: 5, 1: 0}}) == 0


class Offsets:
    """A cluster's ``get_table``/``list_offsets`` for ``latest_offsets``."""

    def __init__(self, partitioned: bool):
        from fluss_spark.client.cluster import TableInfo
        from fluss_spark.protocol.messages.records import PartitionInfo
        parts = (PartitionInfo(11, "d1"), PartitionInfo(12, "d2")) if partitioned else ()
        self.info = TableInfo(table_id=5, name="db.t", schema=SCHEMA, num_buckets=2,
                              partition_keys=("dt",) if partitioned else (), partitions=parts)

    def get_table(self, name):
        return self.info

    def list_offsets(self, table, spec="latest", partition=None):
        from fluss_spark.errors import PartitionNotExist
        if partition == "d2":
            raise PartitionNotExist("partition d2 was dropped")
        return {0: 3, 1: 4} if partition is None else {0: 1, 1: 2}


def test_latest_offsets_are_per_partition_and_skip_a_partition_dropped_meanwhile():
    assert latest_offsets(Offsets(False), "db.t") == {0: 3, 1: 4}
    assert latest_offsets(Offsets(True), "db.t") == {11: {0: 1, 1: 2}}


class Releases:
    """A cluster that cannot describe leases (as Apache Fluss 0.9.1), recording releases; one
    of a table in ``unpinned`` fails as Fluss 0.9.1 fails it (the lease no longer pins it)."""

    def __init__(self, unpinned=()):
        from types import SimpleNamespace
        self.sent: list = []
        self.unpinned = set(unpinned)
        self._caps = SimpleNamespace(lease_describe=False)

    def capabilities(self):
        return self._caps

    def release_kv_snapshot_lease(self, lease_id, tables, *, partitions=None):
        from fluss_spark.errors import UnknownServerError
        self.sent.append((lease_id, tables, partitions))
        if self.unpinned & {*tables, *(partitions or {})}:
            raise UnknownServerError("Failed to release kv snapshot lease for L")
        return -1


def test_the_job_releases_exactly_the_buckets_its_lake_position_read_from_snapshots(tmp_path):
    """Without a way to ask what a lease pins, the job names the buckets the lake copy's position
    read from KV snapshots, per partition: Fluss 0.9.1 fails a release naming any other after
    the table's last pinned one, and one of a table its query already released."""
    from types import SimpleNamespace

    from fluss_spark.tiering.leases import release_finished_snapshots
    offsets, _ = lake_offsets(partitioned_offset(), "db.days")
    day_table(tmp_path).commit_round(changes([(1, "2026-11-24", "a", "+I")]), query_id="q",
                                     batch_id=0, fluss_offsets=offsets, snapshot_complete=True)
    info = {"db.days": SimpleNamespace(table_id=5, has_primary_key=True)}
    for cluster in (Releases(), Releases(unpinned={5})):
        assert release_finished_snapshots(cluster, "L", tmp_path, info, (),  # type: ignore
                                          lambda name: 0) == ["db.days"]
        assert cluster.sent == [("L", {}, {5: {11: [0]}})]
        # Released once: the next round names nothing.
        assert release_finished_snapshots(cluster, "L", tmp_path, info, (),  # type: ignore
                                          lambda name: 0, released_before={"db.days"}) == []
        assert len(cluster.sent) == 1
