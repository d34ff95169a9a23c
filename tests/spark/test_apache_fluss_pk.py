"""Primary-key tables of a real Apache Fluss cluster: full mode under one lease, batch reads,
tiering.

The snapshot phase reads each bucket's RocksDB checkpoint from Fluss's remote storage under ONE
KV snapshot lease, watched in Fluss's own ZooKeeper (``<root>/leases/kv_snapshot/<lease id>``).
Test data is written, and the expected table read back, with the official client (pyfluss).
"""

from __future__ import annotations

import re
import threading
import uuid
from contextlib import closing
from pathlib import Path

import pytest

from fluss_spark.client.apache_fluss import ApacheFlussWireCluster
from fluss_spark.errors import KvSnapshotNotExist
from fluss_spark.local.ports import wait_until
from fluss_spark.testing.apache_fluss import PyFluss
from fluss_spark.metadata.lease_watch import FlussLeases
from fluss_spark.testing.spark_driver import Driver
from fluss_spark.testing.streams import fold, source_offsets
from fluss_spark.tiering.config import TieringConfig
from fluss_spark.tiering.job import TieringJob
from fluss_spark.tiering.lake import LakeTable, table_dir

pytestmark = pytest.mark.spark

SCHEMA = "id BIGINT NOT NULL, v STRING"


@pytest.fixture
def fluss(apache_fluss):
    with PyFluss(apache_fluss.bootstrap_servers) as client:
        yield client


@pytest.fixture
def wire(apache_fluss):
    cluster = ApacheFlussWireCluster.connect(apache_fluss.bootstrap_servers,
                                             request_timeout_s=30)
    yield cluster
    cluster.close()


@pytest.fixture
def name():
    return f"pk.t_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def leases(apache_fluss):
    watcher = FlussLeases(apache_fluss)
    yield watcher
    watcher.close()


def load(fluss: PyFluss, name: str, rows: int, buckets: int = 2, **properties) -> None:
    fluss.create_table(name, SCHEMA, primary_key=["id"], buckets=buckets,
                       properties=properties or None)
    for lo in range(0, rows, 50_000):
        fluss.upsert(name, [(i, f"v{i}") for i in range(lo, min(rows, lo + 50_000))])


def wait_for_snapshots(wire, name: str) -> dict:
    """The latest snapshots once they cover every write (taken every 5 s on the test cluster)."""
    end = {b: o for b, o in wire.list_offsets(name).items() if o}
    found: dict = {}

    def covered() -> bool:
        found.update(wire.latest_kv_snapshots(name))
        return all(b in found and found[b].log_offset >= o for b, o in end.items())
    wait_until(covered, 120, f"KV snapshots of {name} covering offsets {end}")
    return found


def table_now(fluss: PyFluss, name: str) -> dict[int, str]:
    """The table's content as pyfluss reads it (its changelog, folded)."""
    return {r["id"]: r["v"] for r in fluss.rows(name, timeout_s=120)}


def stream(spark, servers: str, table: str, **options):
    reader = (spark.readStream.format("fluss").option("bootstrap.servers", servers)
              .option("table", table))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


class Writer(threading.Thread):
    """Upserts and deletes in rounds until stopped: updates, deletes and new keys."""

    def __init__(self, servers: str, name: str, start_key: int):
        super().__init__(daemon=True)
        self.servers, self.name, self.next_key = servers, name, start_key
        self.stop_event = threading.Event()
        self.rounds = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with PyFluss(self.servers) as w:
                while not self.stop_event.is_set():
                    r = self.rounds
                    first, gone = r * 997 % 50_000, 60_000 + r * 100
                    w.upsert(self.name, [(i, f"u{r}-{i}") for i in range(first, first + 500)])
                    w.delete(self.name, [(i,) for i in range(gone, gone + 100)])
                    w.upsert(self.name, [(i, f"n{i}") for i in range(self.next_key,
                                                                      self.next_key + 200)])
                    self.next_key += 200
                    self.rounds += 1
                    self.stop_event.wait(0.5)     # pace the rounds: a snapshot every few rounds
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def finish(self) -> None:
        self.stop_event.set()
        self.join(120)
        assert self.error is None, self.error


@pytest.mark.extended      # test_batch0_kills.py: full mode, concurrent writes, retention of one
def test_full_mode_under_one_lease_with_concurrent_writes_and_retention(
        spark, apache_fluss, fluss, wire, leases, name, tmp_path):
    servers = apache_fluss.bootstrap_servers
    load(fluss, name, 100_000)
    wait_for_snapshots(wire, name)
    table_id = fluss.table_id(name)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    facts: dict = {}
    writer = Writer(servers, name, 200_000)

    def sink(df, batch_id):
        offsets = source_offsets(ckpt)
        if batch_id == 0:
            # Nothing of the batch is read before this function asks for it: the lease is in
            # Fluss's ZooKeeper before the first snapshot split is read.
            facts["lease"] = offsets[0]["lease_id"]
            facts["lease at the first split"] = facts["lease"] in leases.now()
            facts["pinned"] = {int(b): p[0] for b, p in
                               offsets[0]["tables"][str(table_id)]["snapshot"].items()}
            writer.start()
        elif batch_id == 1:
            # Hold the snapshot phase until retention (2 snapshots kept) has removed snapshots
            # newer than the pinned ones: the pinned ones must still be there to be read.
            pinned = facts["pinned"]
            wait_until(lambda: all(s.snapshot_id >= pinned[b] + 3 for b, s in
                                   wire.latest_kv_snapshots(name).items()), 240,
                       "retention to move past the pinned snapshots")
            for b, sid in pinned.items():
                with pytest.raises(KvSnapshotNotExist):
                    wire.kv_snapshot_files(name, b, sid + 1)
                facts.setdefault("pinned files", []).append(
                    len(wire.kv_snapshot_files(name, b, sid).files))
        df.write.mode("overwrite").parquet(f"{out}/batch={batch_id}")

    # A 6 s lease, renewed (re-acquired) every 2 s: held for 15 s and more in batch 1, the
    # pinned snapshots survive retention only if the renewals work.
    q = (stream(spark, servers, name, maxOffsetsPerTrigger=20_000,
                **{"scan.kv.snapshot.lease.duration": "6s"}).writeStream
         .option("checkpointLocation", str(ckpt)).foreachBatch(sink)
         .trigger(processingTime="300 milliseconds").start())
    try:
        wait_until(lambda: q.exception() is not None or
                   ("pinned files" in facts and facts["lease"] not in leases.now()), 300,
                   "the snapshot phase to end and its lease to go")
        assert q.exception() is None, q.exception()
        writer.finish()
        q.processAllAvailable()
    finally:
        writer.stop_event.set()
        q.stop()
    assert facts["lease at the first split"]
    assert all(n > 0 for n in facts["pinned files"])
    assert writer.rounds > 0
    ids = {o["lease_id"] for o in source_offsets(ckpt)}
    assert ids == {facts["lease"]} and leases.seen <= ids
    assert facts["lease"] not in leases.now()
    got = fold(spark.read.parquet(str(out)))
    want = table_now(fluss, name)
    assert len(want) > 100_000 and got == want
    for key in (0, 1, 60_000, 60_050, 99_999, 200_001):
        row = fluss.lookup(name, (key,))
        assert (row["v"] if row else None) == got.get(key)


def count_files(d: Path) -> int:
    return len([f for f in d.iterdir() if f.name.isdigit()]) if d.exists() else 0


# Kills inside batch 0 and mid-snapshot run in tests/spark/test_batch0_kills.py (one retained
# snapshot a second, a concurrent writer); "before the first offset"
# (tests/spark/test_restart_points.py) needs the coordinator stopped while the query plans,
# longer than this cluster's ZooKeeper session (6 s) may allow Fluss's.
def test_driver_killed_after_the_snapshot_phase_restarts_without_a_lease(
        spark, apache_fluss, fluss, wire, leases, name, tmp_path):
    servers = apache_fluss.bootstrap_servers
    load(fluss, name, 20_000)
    wait_for_snapshots(wire, name)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    options = {"maxOffsetsPerTrigger": "4000"}
    driver = Driver(tmp_path, servers, name, str(out), str(ckpt), "-1", "0", options=options)
    try:
        driver.wait_for("TRIGGERED", "the query's first trigger")
        wait_until(lambda: count_files(ckpt / "commits") >= 5 and source_offsets(ckpt)
                   and source_offsets(ckpt)[0]["lease_id"] not in leases.now(), 180,
                   "the first driver to finish the snapshot phase and release its lease")
        fluss.upsert(name, [(5, "changelog-before-kill")])
        n = count_files(ckpt / "offsets")
        wait_until(lambda: count_files(ckpt / "commits") > n, 60,
                   "a changelog batch of the first driver")
    finally:
        driver.kill()
    lease = source_offsets(ckpt)[0]["lease_id"]
    assert lease not in leases.now()     # released once the snapshot phase was over

    def sink(df, batch_id):
        df.write.mode("overwrite").parquet(f"{out}/batch={batch_id}")
    q = (stream(spark, servers, name, **options).writeStream
         .option("checkpointLocation", str(ckpt)).foreachBatch(sink).start())
    try:
        q.processAllAvailable()
        fluss.upsert(name, [(1, "after-restart")])
        fluss.delete(name, [(2,)])
        q.processAllAvailable()
        wait_until(lambda: lease not in leases.now(), 60, "the lease to go after the snapshot "
                   "phase")
    finally:
        q.stop()
    assert {o["lease_id"] for o in source_offsets(ckpt)} == {lease}
    assert leases.seen <= {lease}
    got = fold(spark.read.parquet(str(out)))
    assert got == table_now(fluss, name)
    assert got[1] == "after-restart" and 2 not in got and len(got) == 19_999


def test_tablet_killed_during_the_snapshot_phase(spark, apache_fluss_for_faults, name, tmp_path):
    apache_fluss = apache_fluss_for_faults
    with PyFluss(apache_fluss.bootstrap_servers) as fluss, closing(ApacheFlussWireCluster.connect(
            apache_fluss.bootstrap_servers, request_timeout_s=30)) as wire, \
            closing(FlussLeases(apache_fluss)) as leases:
        servers = apache_fluss.bootstrap_servers
        # Two replicas: Fluss itself may lose acknowledged writes of a one-replica bucket whose
        # tablet is killed -9 (docs/apache_fluss.md).
        load(fluss, name, 20_000, **{"table.replication.factor": "2"})
        wait_for_snapshots(wire, name)
        out, ckpt = tmp_path / "out", tmp_path / "ckpt"
        q = (stream(spark, servers, name, maxOffsetsPerTrigger=4000).writeStream.format("parquet")
             .option("path", str(out)).option("checkpointLocation", str(ckpt))
             .trigger(processingTime="300 milliseconds").start())
        try:
            wait_until(lambda: q.exception() is not None or
                       sum(p["numInputRows"] for p in q.recentProgress) >= 4000, 180,
                       "the first snapshot rows")
            apache_fluss.kill("tablet", 0)
            apache_fluss.restart("tablet", 0)
            fluss.upsert(name, [(i, f"w{i}") for i in range(100)])
            fluss.delete(name, [(i,) for i in range(100, 150)])
            q.processAllAvailable()
            assert q.exception() is None, q.exception()
        finally:
            q.stop()
        lease = source_offsets(ckpt)[0]["lease_id"]
        wait_until(lambda: lease not in leases.now(), 60, "the lease to go")
        assert {o["lease_id"] for o in source_offsets(ckpt)} == {lease}
        got = fold(spark.read.parquet(str(out)))
        assert got == table_now(fluss, name) and len(got) == 19_950


def test_batch_read_is_the_table_and_takes_no_lease(spark, apache_fluss, fluss, wire, leases,
                                                    name):
    servers = apache_fluss.bootstrap_servers
    load(fluss, name, 30_000, buckets=3)
    wait_for_snapshots(wire, name)
    # Changes after the snapshots: the read merges them from the changelog.
    fluss.upsert(name, [(i, f"late{i}") for i in range(0, 30_000, 7)])
    fluss.delete(name, [(i,) for i in range(1, 30_000, 11)])
    df = (spark.read.format("fluss").option("bootstrap.servers", servers)
          .option("table", name).load())
    got = {r["id"]: r["v"] for r in df.select("id", "v").collect()}
    assert got == table_now(fluss, name)
    assert leases.seen == set()


def test_tiering_keeps_a_lake_copy_of_a_pk_table(spark, apache_fluss, fluss, wire, leases,
                                                 name, tmp_path):
    load(fluss, name, 5_000)
    wait_for_snapshots(wire, name)
    lake = tmp_path / "lake"
    config = TieringConfig(lake=lake, bootstrap_servers=apache_fluss.bootstrap_servers,
                           table_pattern=re.escape(name), trigger_interval="300 milliseconds",
                           poll_interval_s=0.3, discover_interval_s=1.0)
    # Changes after the snapshot, and none once the job runs: the source itself would release the
    # lease only at a later batch, which a quiet table never has, so the job must release it.
    fluss.upsert(name, [(i, f"t{i}") for i in range(0, 5_000, 3)])
    fluss.delete(name, [(i,) for i in range(1, 5_000, 5)])
    job = TieringJob(spark, config).start()
    try:
        def caught_up():
            job.poll()
            return job.caught_up()
        wait_until(caught_up, 180, "the lake copy to catch up with the table")
        lease = job.record.lease_id
        assert lease in leases.seen

        def released():
            job.poll()
            return lease not in leases.now()
        wait_until(released, 60, "the job to release its lease after the snapshot phase")
    finally:
        job.stop()
    copy = LakeTable(table_dir(lake, name)).read()
    assert dict(zip(copy.column("id").to_pylist(), copy.column("v").to_pylist())) == \
        table_now(fluss, name)
