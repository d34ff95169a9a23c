"""Streams over partitioned tables with the fake cluster: positions per partition, one lease over
every (partition, bucket), partitions found and partitions gone while a query runs."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from fluss_spark.connector.enumerator import CheckpointMismatch
from fluss_spark.connector.offsets import decode, rows_between
from fluss_spark.connector.options import parse_options
from fluss_spark.connector.progress import partitions_gone
from fluss_spark.connector.readers import SplitReader
from fluss_spark.connector.schema import Layout, output_schema
from fluss_spark.connector.splits import LogSplit, MergedBucketSplit, SnapshotSplit
from fluss_spark.errors import PartitionNotExist
from fluss_spark.testing.spark_loop import SparkLoop

DAYS = ("2026-11-24", "2026-11-25", "2026-11-26", "2026-11-27")
SCHEMA = "id BIGINT, dt STRING, v STRING"


def rows(day, n, start=0):
    return [{"id": i, "dt": day, "v": f"{day}:{i}"} for i in range(start, start + n)]


def add_day(cluster, day, snapshot_id=None, *, log_start=0):
    """Partition ``day`` of db.p: 8 changelog records per bucket; with ``snapshot_id`` a KV
    snapshot of the first 6 (log offset 6) in each bucket."""
    cluster.add_partition("db.p", day)
    for b in (0, 1):
        cluster.append_log("db.p", b, [("+I", r) for r in rows(day, 8, 100 * b)], partition=day)
        if snapshot_id is not None:
            cluster.add_snapshot("db.p", b, snapshot_id, rows(day, 6, 100 * b), 6, partition=day)
    part = cluster.tables["db.p"].partitions[day]
    part.log_start.update({0: log_start, 1: log_start})
    return part.partition_id


@pytest.fixture
def parts(cluster):
    """db.p: PK (id, dt) partitioned by dt, 2 buckets; partitions 24 and 25 with snapshots."""
    cluster.add_table("db.p", schema=SCHEMA, pk=("id", "dt"), buckets=2, partition_keys=("dt",))
    add_day(cluster, DAYS[0], 10)
    add_day(cluster, DAYS[1], 11)
    return cluster


def snapshot_then_log(day, sid):
    """What a full read of ``day`` (see ``add_day``) delivers: its snapshot, then offsets 6, 7."""
    return ([(day, b, sid, r) for b in (0, 1) for r in range(6)]
            + [(day, b, None, o) for b in (0, 1) for o in (6, 7)])


def whole_log(day, first=0):
    return [(day, b, None, o) for b in (0, 1) for o in range(first, 8)]


def expected(*parts):
    return sorted((r for p in parts for r in p),
                  key=lambda r: (r[0] or "", r[1], r[2] is not None, r[2] or 0, r[3]))


def pid(cluster, day):
    return cluster.tables["db.p"].partitions[day].partition_id


def test_full_mode_reads_every_partition_under_one_lease(parts, clock):
    loop = SparkLoop(parts, clock, table="db.p").run()
    tid = parts.tables["db.p"].info.table_id
    first = loop.start
    assert first["version"] == 6      # partitions, and the columns of the query's tables
    entry = first["tables"][str(tid)]
    assert entry["partition_keys"] == ["dt"]
    assert entry["partitions"][str(pid(parts, DAYS[0]))] == {
        "name": DAYS[0], "snapshot": {"0": [10, 6, 0, 6], "1": [10, 6, 0, 6]},
        "log": {"0": 6, "1": 6}}
    loop.batch(max_rows=5)
    lease_id = first["lease_id"]
    # Every (partition, bucket) snapshot pinned in one call before an offset named it (and
    # again for the full duration once Spark logged it).
    pins = {tid: {pid(parts, DAYS[0]): {0: 10, 1: 10}, pid(parts, DAYS[1]): {0: 11, 1: 11}}}
    assert {(c[1], str(c[2]), c[3]) for c in parts.calls_of("acquire_partitions")} == {
        (lease_id, str(pins), first["query"]["holder"])}
    assert parts.leases[lease_id]["partition_pins"] == pins
    loop.drain(max_rows=5)
    # The rate limit holds across partitions: no batch reads more than 5.
    offsets = [decode(o) for o in loop.offsets]
    assert max(sum(rows_between(a, b).values()) for a, b in zip(offsets, offsets[1:])) <= 5
    assert loop.reads() == expected(snapshot_then_log(DAYS[0], 10), snapshot_then_log(DAYS[1], 11))
    assert loop.lease_ids_in_offsets() == {lease_id}
    assert parts.leases == {}           # one release of the table covered its partitions
    assert len(parts.calls_of("release")) == 1
    splits = [s for out in loop.output.values() for s in out]
    assert {(s.partition, s.partition_id) for s in splits} == {(d, pid(parts, d))
                                                              for d in DAYS[:2]}


def test_a_partition_found_in_the_snapshot_phase_joins_it_under_the_same_lease(parts, clock):
    loop = SparkLoop(parts, clock, table="db.p",
                     **{"scan.partition.discovery.interval": "1s"}).run()
    loop.batch(max_rows=4)
    lease_id = loop.offsets[0]["lease_id"]
    new = add_day(parts, DAYS[2], 12)
    clock.advance(1000)
    loop.batch(max_rows=4)
    tid = parts.tables["db.p"].info.table_id
    added = decode(loop.offsets[-1]).tables[tid].partitions[new]
    assert added.snapshot[0].next_row == 0       # added, read from the next batch on
    assert parts.calls_of("acquire_partitions")[-1][1:3] == (lease_id, {tid: {new: {0: 12,
                                                                                     1: 12}}})
    loop.drain(max_rows=4)
    assert loop.reads() == expected(*(snapshot_then_log(d, s) for d, s in zip(DAYS, (10, 11, 12))))
    assert {c[1] for c in parts.calls_of("acquire")} == {lease_id} and parts.leases == {}


def test_after_the_snapshot_phase_a_new_partition_is_read_from_offset_0_without_pins(parts,
                                                                                   clock):
    loop = SparkLoop(parts, clock, table="db.p",
                     **{"scan.partition.discovery.interval": "1s"}).run()
    loop.drain(max_rows=50)
    assert parts.leases == {}
    acquires = len(parts.calls_of("acquire"))
    add_day(parts, DAYS[2], 12)          # has a snapshot, but its log is whole: no pin
    clock.advance(1000)
    loop.drain(max_rows=50)
    assert len(parts.calls_of("acquire")) == acquires
    # Its log lost its head (retention): its snapshot is pinned and read, then released.
    add_day(parts, DAYS[3], 13, log_start=2)
    clock.advance(1000)
    loop.drain(max_rows=50)
    assert loop.reads() == expected(snapshot_then_log(DAYS[0], 10), snapshot_then_log(DAYS[1], 11),
                                    whole_log(DAYS[2]), snapshot_then_log(DAYS[3], 13))
    assert len({c[1] for c in parts.calls_of("acquire")}) == 1 and parts.leases == {}


@pytest.mark.parametrize("mode", ["earliest", "latest"])
def test_other_modes_read_a_new_partition_from_its_earliest_offset(parts, clock, mode):
    loop = SparkLoop(parts, clock, table="db.p", **{"scan.startup.mode": mode,
                                                    "scan.partition.discovery.interval": "1s"})
    loop.run().drain()
    add_day(parts, DAYS[2], 12, log_start=3)
    clock.advance(1000)
    loop.drain()
    old = [] if mode == "latest" else whole_log(DAYS[0]) + whole_log(DAYS[1])
    assert loop.reads() == expected(old, whole_log(DAYS[2], 3))
    assert parts.calls_of("acquire") == []


def test_discovery_off_reads_only_the_partitions_of_the_start(parts, clock):
    loop = SparkLoop(parts, clock, table="db.p", **{"scan.startup.mode": "earliest",
                                                    "scan.partition.discovery.interval": "0"})
    loop.run().drain()
    add_day(parts, DAYS[2])
    clock.advance(3_600_000)
    assert not loop.batch()


def test_a_dropped_partition_is_reported_once_and_the_query_goes_on(parts, clock, caplog):
    loop = SparkLoop(parts, clock, table="db.p", failOnDataLoss="false").run()
    loop.batch(max_rows=4)          # one snapshot row of each of the 4 (partition, bucket)s
    gone = pid(parts, DAYS[0])
    parts.remove_partition("db.p", DAYS[0])
    clock.advance(1000)         # the partitions are listed at most once a second
    with caplog.at_level(logging.WARNING, logger="fluss_spark.connector.discovery"):
        loop.drain(max_rows=4)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert (f"table 'db.p' partition dt={DAYS[0]} (id {gone}) was dropped while the query read "
            f"it; not read: bucket 0: rows [1, 6) of KV snapshot 10, then its changelog from "
            f"offset 6; bucket 1: rows [1, 6) of KV snapshot 10") in warnings[0]
    assert "failOnDataLoss=false" in warnings[0]
    tid = parts.tables["db.p"].info.table_id
    end = decode(loop.offsets[-1])
    assert list(end.tables[tid].partitions) == [pid(parts, DAYS[1])]
    assert end.tables[tid].gone == (1, 5 + 5)
    progress = {"sources": [{"endOffset": loop.offsets[-1], "latestOffset": loop.offsets[-1]}]}
    assert partitions_gone(progress) == {"db.p": {"partitions": 1, "unread": 10}}
    assert [r for r in loop.reads() if r[0] == DAYS[1]] == expected(snapshot_then_log(DAYS[1],
                                                                                      11))
    assert parts.leases == {}


def test_a_partition_dropped_by_hand_with_unread_records_fails_the_query(parts, clock):
    loop = SparkLoop(parts, clock, table="db.p").run()
    loop.batch(max_rows=4)
    parts.remove_partition("db.p", DAYS[0])
    clock.advance(1000)
    with pytest.raises(PartitionNotExist, match=rf"table 'db.p' partition dt={DAYS[0]} .* was "
                                                r"dropped .* set failOnDataLoss=false"):
        loop.batch(max_rows=4)


def test_a_partition_expired_by_retention_never_fails_the_query(clock, cluster, caplog):
    props = {"table.auto-partition.enabled": "true", "table.auto-partition.time-unit": "DAY",
             "table.auto-partition.num-retention": "2"}
    cluster.add_table("db.p", schema=SCHEMA, pk=("id", "dt"), buckets=2, partition_keys=("dt",),
                      properties=props)
    for day in ("20261120", "20261125"):
        add_day(cluster, day, 10)
    now_ms = 1795651200000                  # 2026-11-25 00:00 UTC: 20261120 is past retention
    loop = SparkLoop(cluster, clock, wall=lambda: now_ms, table="db.p").run()
    loop.batch(max_rows=4)
    cluster.remove_partition("db.p", "20261120")
    clock.advance(1000)
    with caplog.at_level(logging.WARNING, logger="fluss_spark.connector.discovery"):
        loop.drain(max_rows=4)
    assert any("partition dt=20261120" in r.getMessage() and "expired by retention" in
               r.getMessage() for r in caplog.records)


def test_a_restart_repins_every_partition_and_skips_a_dropped_one(parts, clock):
    loop = SparkLoop(parts, clock, table="db.p", failOnDataLoss="false").run()
    loop.batch(max_rows=3)
    loop.batch(max_rows=3)
    lease_id = loop.offsets[0]["lease_id"]
    parts.remove_partition("db.p", DAYS[0])      # while the driver is down
    loop.run()
    loop.drain(max_rows=3)
    assert {c[1] for c in parts.calls_of("acquire")} == {lease_id}
    assert [r for r in loop.reads() if r[0] == DAYS[1]] == expected(snapshot_then_log(DAYS[1],
                                                                                      11))
    assert parts.leases == {}


def test_the_checkpoint_identity_covers_the_partition_keys(parts, clock):
    loop = SparkLoop(parts, clock, table="db.p").run()
    loop.batch()
    t = parts.tables["db.p"]
    t.info = replace(t.info, partition_keys=("v",))     # same id, other keys
    with pytest.raises(CheckpointMismatch, match=r"partitioned by \['dt'\], the cluster's by "
                                                 r"\['v'\]"):
        loop.run()
        loop.batch()


def test_available_now_reads_what_exists_when_it_starts(parts, clock):
    loop = SparkLoop(parts, clock, table="db.p", **{"scan.startup.mode": "earliest"}).run()
    loop.enum.prepare_for_available_now()
    add_day(parts, DAYS[2])                         # created after the start: not read
    parts.append_log("db.p", 0, [("+I", r) for r in rows(DAYS[1], 1, 50)], partition=DAYS[1])
    loop.drain(max_rows=5)
    assert loop.reads() == expected(whole_log(DAYS[0]), whole_log(DAYS[1]))


@pytest.mark.parametrize("point", ["offsets/0", "mid-snapshot"])
def test_a_driver_killed_inside_batch_0_or_mid_snapshot_restarts_exactly(parts, clock, point):
    loop = SparkLoop(parts, clock, table="db.p").run()
    loop.kill_at(point)
    lease_id = loop.offsets[0]["lease_id"]
    loop.run().drain(max_rows=5)
    assert loop.reads() == expected(snapshot_then_log(DAYS[0], 10), snapshot_then_log(DAYS[1], 11))
    assert {c[1] for c in parts.calls_of("acquire")} == {lease_id} and parts.leases == {}


# -- readers --------------------------------------------------------------------------------------
def part_reader(cluster, **opts):
    options = parse_options({"bootstrap.servers": "h:1", "table": "db.p", **opts})
    layout = Layout(output_schema([("db.p", cluster.tables["db.p"].info.schema)], False), False)
    return SplitReader(options, layout, cluster_factory=lambda _: cluster)


def test_readers_read_a_partition_with_its_partition_column(parts):
    tid, p = parts.tables["db.p"].info.table_id, pid(parts, DAYS[1])
    r = part_reader(parts)

    def read(split):
        return [(row["id"], row["dt"], row["_change_type"]) for b in r.read(split)
                for row in b.to_pylist()]
    assert read(LogSplit(tid, "db.p", 1, 6, 8, DAYS[1], p)) == [(106, DAYS[1], "+I"),
                                                                 (107, DAYS[1], "+I")]
    assert read(SnapshotSplit(tid, "db.p", 0, 11, 4, 6, "L", 6, DAYS[1], p)) == [
        (4, DAYS[1], "+I"), (5, DAYS[1], "+I")]
    merged = read(MergedBucketSplit(tid, "db.p", 0, 11, 6, 8, ("id", "dt"), DAYS[1], p))
    assert sorted(merged) == [(i, DAYS[1], "+I") for i in range(8)]


def test_a_reader_whose_partition_is_gone_skips_it_or_fails(parts):
    tid, old = parts.tables["db.p"].info.table_id, pid(parts, DAYS[0])
    split = LogSplit(tid, "db.p", 0, 0, 8, DAYS[0], old)
    parts.remove_partition("db.p", DAYS[0])
    add_day(parts, DAYS[0])      # the same name again: another partition (another id)
    assert list(part_reader(parts, failOnDataLoss="false").read(split)) == []
    with pytest.raises(PartitionNotExist, match=rf"table 'db.p' partition {DAYS[0]} bucket 0: "
                                                rf"the partition \(id {old}\) was dropped before "
                                                r"changelog offsets \[0, 8\) were read"):
        list(part_reader(parts).read(split))


def test_one_query_reads_a_partitioned_and_an_unpartitioned_table(parts, clock):
    parts.add_table("db.a", buckets=1)
    parts.add_snapshot("db.a", 0, 5, [{"id": i, "v": "a"} for i in range(6)], 0)
    loop = SparkLoop(parts, clock, table=None, tables="db.p,db.a").run()
    loop.batch(max_rows=5)          # 5 units of budget over 5 (partition or table, bucket)s
    first = rows_between(decode(loop.offsets[0]).first_batch_start(), decode(loop.offsets[0]))
    assert first == {parts.tables["db.p"].info.table_id: 4, parts.tables["db.a"].info.table_id: 1}
    loop.drain(max_rows=5)
    assert [r for r in loop.reads() if r[0] is None] == [(None, 0, 5, r) for r in range(6)]
    assert [r for r in loop.reads() if r[0] is not None] == expected(
        snapshot_then_log(DAYS[0], 10), snapshot_then_log(DAYS[1], 11))
    assert len({c[1] for c in parts.calls_of("acquire")}) == 1 and parts.leases == {}


def test_gone_partitions_are_looked_for_once_a_second_or_when_a_read_misses_one(parts, clock):
    loop = SparkLoop(parts, clock, table="db.p", **{"scan.startup.mode": "earliest",
                                                    "scan.partition.discovery.interval": "0"})
    loop.run().drain()
    listed = len(parts.calls_of("get_table"))
    for _ in range(5):
        loop.plan()                 # Spark polls for new offsets (every 10 ms when idle)
    assert len(parts.calls_of("get_table")) == listed
    parts.remove_partition("db.p", DAYS[0])
    loop.plan()                     # its latest offsets are not found: listed at the next call
    assert len(parts.calls_of("get_table")) == listed
    loop.plan()
    tid = parts.tables["db.p"].info.table_id
    assert decode(loop.offsets[-1]).tables[tid].gone[0] == 1
