"""kill -9 of the Spark driver inside batch 0 while KV snapshots are taken every second and only ONE
is retained, with a writer changing the table all along: the query restarted on the same
checkpoint must deliver, for every bucket, exactly the snapshot its ``offsets/0`` names and then
exactly the bucket's changelog from that snapshot's log offset, under the one lease of its
checkpoint.

Runs on both engines (the embedded cluster and Apache Fluss 0.9.1); on Apache Fluss also over a
day-partitioned table (offsets/0 and mid-snapshot). Kill points:

- ``offsets/0``: the moment ``<ckpt>/offsets/0`` exists (polled every 10 ms), repeated
  ``REPEATS_A`` times (env ``FLUSS_SPARK_KILL_REPEATS``, default 1; 5 passed when it was
  measured), each on a fresh table. The snapshots ``offsets/0`` names must already be pinned
  then: retention deletes an unpinned one within about a second, and the restart replays batch
  0 exactly as logged.
- ``before the first read``: batch 0's sink blocks before touching its DataFrame.
- ``mid-snapshot``: batch 2's sink blocks after writing (3,000 rows per batch: the snapshot phase
  spans about seven batches).
- On Apache Fluss also the other restart points (tests/spark/test_restart_points.py has them on
  the embedded engine): ``before the first offset`` (the coordinator stopped while the source
  plans its first offset: no offset, no lease left behind) and ``after the snapshot phase`` (a
  changelog batch committed, the lease released).

The first driver is a process of its own (``fluss_spark.testing.spark_driver``); the restart runs in
the test's SparkSession. Every check compares the output with an independent reader of each
bucket's changelog: this project's client on the embedded cluster, the official client (pyfluss)
on Apache Fluss. Keys never move between buckets, so a key's bucket is the bucket whose
changelog holds it.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections import Counter
from contextlib import closing
from pathlib import Path

import pyarrow as pa
import pytest

from fluss_spark.client.backends import open_cluster
from fluss_spark.connector.offsets import decode
from fluss_spark.local.ports import wait_until
from fluss_spark.metadata.lease_watch import EmbeddedLeases, FlussLeases, ZooKeeperLeases
from fluss_spark.testing.spark_driver import Driver
from fluss_spark.testing.streams import fold as fold_changelog
from fluss_spark.testing.streams import table_state

pytestmark = pytest.mark.spark

#: How often kill point (a) (the moment offsets/0 exists) is repeated, each on a fresh table.
REPEATS_A = int(os.environ.get("FLUSS_SPARK_KILL_REPEATS", "1"))
ROWS, BUCKETS = 20_000, 3
#: Source options of the first driver and of the restart (the same query).
OPTIONS = {"maxOffsetsPerTrigger": "3000", "scan.kv.read": "snapshot"}
#: A KV snapshot every second, one retained: a table property of the embedded cluster, a server
#: setting of Apache Fluss.
SNAPSHOTS = {"kv.snapshot.interval": "1s", "kv.snapshot.num-retained": "1"}
SCHEMA = "id BIGINT NOT NULL, v STRING"

OFFSETS_0, BEFORE_READ, MID_SNAPSHOT = "offsets/0", "before the first read", "mid-snapshot"
#: The other restart points (tests/spark/test_restart_points.py has them on the embedded engine).
BEFORE_OFFSET, AFTER_SNAPSHOT = "before the first offset", "after the snapshot phase"
POINTS = ([pytest.param(OFFSETS_0, id=f"offsets0-{i + 1}") for i in range(REPEATS_A)]
          + [pytest.param(BEFORE_READ, id="before-read", marks=pytest.mark.extended),
             pytest.param(MID_SNAPSHOT, id="mid-snapshot")])

#: ``(offset, change type, id, v)`` of one changelog record.
Record = tuple[int, str, int, "str | None"]


# -- the two engines ------------------------------------------------------------------------------
class Embedded:
    """This project's session test cluster; snapshot settings are table properties."""

    name = "embedded"

    def __init__(self, cluster):
        from fluss_spark.client import FlussConnection
        self.cluster, self.servers = cluster, cluster.bootstrap_servers
        self.conn = FlussConnection(self.servers, request_timeout_s=30.0)

    def close(self) -> None:
        self.conn.close()

    def new_table(self) -> str:
        return f"test.k_{uuid.uuid4().hex[:12]}"

    def create(self, table: str) -> None:
        self.conn.admin().create_table(table, SCHEMA, primary_key=["id"], num_buckets=BUCKETS,
                                       properties=dict(SNAPSHOTS))
        writer = self.conn.writer(table)
        writer.upsert(pa.table({"id": pa.array(range(ROWS), pa.int64()),
                                "v": [f"v{i}" for i in range(ROWS)]}))

    def client(self) -> "EmbeddedWriter":
        return EmbeddedWriter(self.servers)

    def read_log(self, table: str, end: dict[int, int]) -> dict[int, list[Record]]:
        scanner = self.conn.log_scanner(table)
        out: dict[int, list[Record]] = {}
        for b, e in end.items():
            out[b] = [(r["_log_offset"], r["_change_type"], r["id"], r["v"])
                      for batch in scanner.read(b, 0, e) for r in batch.to_pylist()]
        return out

    def content(self, table: str, logs: dict[int, list[Record]]) -> dict[int, str]:
        return table_state(self.conn, table)      # live KV scans: the servers' own state

    def leases(self) -> ZooKeeperLeases:
        return EmbeddedLeases(self.cluster)

    def coordinator_pid(self) -> int:
        return next(p["pid"] for p in self.cluster.processes() if p["role"] == "coordinator")


class EmbeddedWriter:
    def __init__(self, servers: str):
        from fluss_spark.client import FlussConnection
        self.conn = FlussConnection(servers, request_timeout_s=30.0)

    def upsert(self, table: str, rows: list[tuple[int, str]]) -> None:
        self.conn.writer(table).upsert([{"id": k, "v": v} for k, v in rows])

    def delete(self, table: str, keys: list[int]) -> None:
        self.conn.writer(table).delete([{"id": k} for k in keys])

    def close(self) -> None:
        self.conn.close()


class ApacheFluss:
    """A cluster of this module's own (snapshot settings are server settings), written and read
    independently with pyfluss."""

    name = "apache-fluss"

    def __init__(self, local):
        self.local, self.servers = local, local.bootstrap_servers

    def close(self) -> None:
        pass

    def connect(self):
        """A pyfluss connection of its own. Each use opens one: a connection kept for the whole
        module once left a flush unanswered, and every later write on it waited for that one."""
        from fluss_spark.testing.apache_fluss import PyFluss
        return PyFluss(self.servers)

    def new_table(self) -> str:
        return f"kills.t_{uuid.uuid4().hex[:10]}"

    def create(self, table: str) -> None:
        with self.connect() as fluss:
            fluss.create_table(table, SCHEMA, primary_key=["id"], buckets=BUCKETS)
            fluss.upsert(table, [(i, f"v{i}") for i in range(ROWS)])

    def client(self):
        return ApacheWriter(self.connect())

    def read_log(self, table: str, end: dict[int, int]) -> dict[int, list[Record]]:
        with self.connect() as fluss:
            got = fluss.read_log_ranges(table, {b: (0, e) for b, e in end.items()},
                                        timeout_s=120)
        return {b: [(o, kind, row["id"], row["v"]) for o, kind, row in recs]
                for b, recs in got.items()}

    def content(self, table: str, logs: dict[int, list[Record]]) -> dict[int, str]:
        with self.connect() as fluss:
            return {r["id"]: r["v"] for r in fluss.rows(table, timeout_s=120)}

    def leases(self) -> ZooKeeperLeases:
        return FlussLeases(self.local)

    def coordinator_pid(self) -> int:
        pid = self.local.servers[("coordinator", 0)].pid
        assert pid is not None
        return pid


class ApacheWriter:
    def __init__(self, fluss):
        self.fluss = fluss

    def upsert(self, table: str, rows: list[tuple[int, str]]) -> None:
        self.fluss.upsert(table, rows)

    def delete(self, table: str, keys: list[int]) -> None:
        self.fluss.delete(table, [(k,) for k in keys])

    def close(self) -> None:
        self.fluss.close()


@pytest.fixture(scope="module", params=["embedded", "apache-fluss"])
def engine(request):
    if request.param == "embedded":
        e = Embedded(request.getfixturevalue("cluster"))
    else:
        # Large log segments: every record stays in the tablets' local log (no remote log).
        local = request.getfixturevalue("start_apache_fluss")(
            {**SNAPSHOTS, "log.segment.file-size": "256mb"})
        e = ApacheFluss(local)
    yield e
    e.close()
    if request.param != "embedded":
        local.stop()


# -- the concurrent writer ------------------------------------------------------------------------
class Writer(threading.Thread):
    """Paced rounds until stopped: updates of existing keys, deletes, new keys."""

    def __init__(self, engine, table: str):
        super().__init__(daemon=True)
        self.engine, self.table = engine, table
        self.stop_event = threading.Event()
        self.rounds = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        client = self.engine.client()
        try:
            while not self.stop_event.is_set():
                r = self.rounds
                first = r * 997 % ROWS
                client.upsert(self.table, [((first + i) % ROWS, f"u{r}-{i}") for i in range(100)])
                gone = (ROWS // 2 + r * 20) % ROWS
                client.delete(self.table, [(gone + i) % ROWS for i in range(20)])
                new = 1_000_000 + r * 50
                client.upsert(self.table, [(k, f"n{k}") for k in range(new, new + 50)])
                self.rounds += 1
                self.stop_event.wait(0.3)
        except BaseException as e:  # noqa: BLE001 - reported by finish()
            self.error = e
        finally:
            client.close()

    def finish(self) -> None:
        self.stop_event.set()
        self.join(120)
        assert self.error is None, f"the concurrent writer failed: {self.error!r}"
        assert self.rounds > 0, "the concurrent writer wrote nothing"


# -- checkpoint -----------------------------------------------------------------------------------
def batch_files(d: Path) -> dict[int, Path]:
    return {int(f.name): f for f in d.iterdir() if f.name.isdigit()} if d.exists() else {}


def offsets_of(ckpt: Path) -> dict[int, dict]:
    """``{batch id: fluss source offset}`` of the checkpoint's offset log."""
    import json
    return {i: json.loads(f.read_text().strip().splitlines()[-1])
            for i, f in sorted(batch_files(ckpt / "offsets").items())}


def only_table(offset: dict) -> dict:
    (t,) = offset["tables"].values()
    return t


def snapshot_phase_committed(ckpt: Path) -> bool:
    """A committed batch's end offset shows every bucket's snapshot rows read."""
    commits = batch_files(ckpt / "commits")
    return any(i in commits and all(p[2] >= p[1] for p in only_table(o)["snapshot"].values())
               for i, o in offsets_of(ckpt).items())


def failed(q) -> None:
    """Raise with the lines of a failed query's error that say what failed (not Spark's stack)."""
    exc = q.exception()
    if exc is None:
        return
    text = str(exc)
    lines = [ln.strip() for ln in text.splitlines()
             if "Error" in ln or "Exception" in ln or "NotExist" in ln]
    raise AssertionError("the restarted query failed:\n" + ("\n".join(lines[:12]) or text[:3000]))


# -- the first driver, killed ---------------------------------------------------------------------
def kill_first_driver(engine, table: str, out: Path, ckpt: Path, point: str, tmp_path: Path,
                      leases: ZooKeeperLeases) -> dict:
    """Run the query in a driver process of its own and kill -9 it at ``point``."""
    block_at = {BEFORE_READ: 0, MID_SNAPSHOT: 2}.get(point, -1)
    driver = Driver(tmp_path, engine.servers, table, str(out), str(ckpt), str(block_at),
                    "1" if point == BEFORE_OFFSET else "0",
                    options=OPTIONS, before_read=point == BEFORE_READ)
    try:
        if point == BEFORE_OFFSET:
            # With the coordinator stopped, the source hangs planning its first offset.
            driver.wait_for("LOADED", "the query's schema")
            driver.kill_planning_first_offset(engine.coordinator_pid())
        elif point == AFTER_SNAPSHOT:
            driver.wait_for("TRIGGERED", "the query's first trigger")
            wait_until(lambda: snapshot_phase_committed(ckpt)
                       and offsets_of(ckpt)[0]["lease_id"] not in leases.now(), 240,
                       "the first driver to finish the snapshot phase and release its lease")
            n = len(batch_files(ckpt / "commits"))
            wait_until(lambda: len(batch_files(ckpt / "commits")) > n, 60,
                       "a changelog batch of the first driver")
            driver.kill()
        elif point == OFFSETS_0:
            first = ckpt / "offsets" / "0"
            wait_until(lambda: first.exists() or driver.proc.poll() is not None, 240,
                       "the first driver to write offsets/0", interval_s=0.01)
            driver.kill()
            assert first.exists(), (f"the first driver exited ({driver.proc.returncode}) before "
                                    f"writing offsets/0; its log ends:\n{driver.log_tail()}")
        else:
            line = "BEFORE_READ 0" if point == BEFORE_READ else "IN_BATCH 2"
            driver.wait_for(line, f"the first driver at {point}", 240)
            driver.kill()
    finally:
        driver.kill()
    offsets, commits = batch_files(ckpt / "offsets"), batch_files(ckpt / "commits")
    if point == BEFORE_OFFSET:
        assert not offsets and not leases.seen, (
            f"killed before its first offset, the query left {len(offsets)} offset files and "
            f"lease(s) {sorted(leases.seen)}")
        return {"lease": None, "lease in ZooKeeper at the kill": None}
    want = {MID_SNAPSHOT: [(3, 2)], AFTER_SNAPSHOT: [(len(commits), len(commits)),
                                                     (len(commits) + 1, len(commits))]
            }.get(point, [(1, 0)])
    assert (len(offsets), len(commits)) in want, (
        f"killed at {point}: the checkpoint has {len(offsets)} offset and {len(commits)} commit "
        f"files, expected {want}")
    first = offsets_of(ckpt)[0]
    lease = first["lease_id"]
    # After the snapshot phase the lease is released: only earlier points must find it.
    return {"lease": lease,
            "lease in ZooKeeper at the kill": (None if point == AFTER_SNAPSHOT
                                               else lease in leases.now()),
            "offsets/0 snapshots": only_table(first)["snapshot"]}


# -- restart and run to the end -------------------------------------------------------------------
def run_to_end(spark, engine, table: str, out: Path, ckpt: Path, writer: Writer,
               leases: ZooKeeperLeases) -> None:
    """Restart the query on ``ckpt`` (same options) while the writer runs; once the snapshot
    phase is committed and its lease gone, stop the writer, read to the end, and wait for no lease
    to be left."""
    reader = (spark.readStream.format("fluss").option("bootstrap.servers", engine.servers)
              .option("table", table))
    for k, v in OPTIONS.items():
        reader = reader.option(k, v)

    def sink(df, batch_id):
        df.write.mode("overwrite").parquet(f"{out}/batch={batch_id}")
    q = (reader.load().writeStream.option("checkpointLocation", str(ckpt)).foreachBatch(sink)
         .start())
    try:
        wait_until(lambda: q.exception() is not None or (ckpt / "offsets" / "0").exists(), 120,
                   "the restarted query's first offset")
        failed(q)
        lease = offsets_of(ckpt)[0]["lease_id"]
        wait_until(lambda: q.exception() is not None or
                   (snapshot_phase_committed(ckpt) and lease not in leases.now()), 240,
                   "the restarted query to finish its snapshot phase and release its lease")
        failed(q)
        writer.finish()
        q.processAllAvailable()
        failed(q)
    finally:
        writer.stop_event.set()
        q.stop()


# -- checks ---------------------------------------------------------------------------------------
def fold(records) -> dict[int, str]:
    """``(id, change type, v)`` in order, folded: the last record per key wins, ``-D`` removes
    (``-U`` is always followed by its ``+U``)."""
    state: dict[int, str] = {}
    for key, kind, v in records:
        if kind in ("+I", "+U", "+A"):
            state[key] = v
        elif kind == "-D":
            state.pop(key, None)
    return state


def describe_diff(got: dict, want: dict, limit: int = 3) -> str:
    missing = sorted(want.keys() - got.keys())
    extra = sorted(got.keys() - want.keys())
    other = sorted(k for k in want.keys() & got.keys() if want[k] != got[k])
    parts = []
    if missing:
        parts.append(f"{len(missing)} key(s) missing (e.g. {missing[:limit]})")
    if extra:
        parts.append(f"{len(extra)} key(s) too many (e.g. {extra[:limit]})")
    if other:
        parts.append(f"{len(other)} key(s) with another value (e.g. "
                     f"{[(k, got[k], want[k]) for k in other[:limit]]} as (key, got, want))")
    return "; ".join(parts)


def bucket_failures(b: int, snapshot: list, mine: list[dict], records: list[Record],
                    end: int) -> list[str]:
    """What is wrong with the output rows ``mine`` of bucket ``b``, whose ``offsets/0`` entry is
    ``snapshot`` (``[snapshot_id, row_count, next_row, log_offset]``), against the bucket's
    ``records`` [0, ``end``) read independently."""
    failures: list[str] = []
    sid, row_count, _, log_offset = snapshot
    what = f"bucket {b} (snapshot {sid} of offsets/0, log_offset {log_offset})"
    # Snapshot rows: the bucket's changelog [0, log_offset) folded, each key once.
    snap = [r for r in mine if r["_commit_timestamp"] is None]
    at = sorted({r["_log_offset"] for r in snap} - {log_offset - 1})
    if at:
        failures.append(f"{what}: snapshot rows delivered at _log_offset {at[:5]}, not "
                        f"{log_offset - 1}: they come from another snapshot than offsets/0's")
    twice = sorted(k for k, n in Counter(r["id"] for r in snap).items() if n > 1)
    if twice:
        failures.append(f"{what}: {len(twice)} key(s) delivered twice as snapshot rows "
                        f"(e.g. {twice[:3]})")
    if len(snap) != row_count:
        failures.append(f"{what}: {len(snap)} snapshot rows delivered, offsets/0 says "
                        f"{row_count}")
    want = fold((k, kind, v) for o, kind, k, v in records if o < log_offset)
    diff = describe_diff({r["id"]: r["v"] for r in snap}, want)
    if diff:
        failures.append(f"{what}: snapshot rows differ from the changelog [0, {log_offset}) "
                        f"folded: {diff}")
    # Changelog rows: exactly the records [log_offset, end), each offset once.
    log = [r for r in mine if r["_commit_timestamp"] is not None]
    seen = Counter(r["_log_offset"] for r in log)
    expected = set(range(log_offset, end))
    twice = sorted(o for o, n in seen.items() if n > 1)
    if twice:
        failures.append(f"{what}: {len(twice)} changelog offset(s) delivered more than once "
                        f"(duplicates, e.g. {twice[:5]})")
    missing = sorted(expected - seen.keys())
    if missing:
        failures.append(f"{what}: {len(missing)} changelog offset(s) of [{log_offset}, "
                        f"{end}) never delivered (lost, e.g. {missing[:5]})")
    extra = sorted(seen.keys() - expected)
    if extra:
        failures.append(f"{what}: {len(extra)} changelog offset(s) outside [{log_offset}, "
                        f"{end}) delivered (e.g. {extra[:5]})")
    by_offset = {rec[0]: rec for rec in records}
    differ = [(r["_log_offset"], (r["_change_type"], r["id"], r["v"]),
               by_offset[r["_log_offset"]][1:])
              for r in log if r["_log_offset"] in by_offset
              and (r["_change_type"], r["id"], r["v"]) != by_offset[r["_log_offset"]][1:]]
    if differ:
        failures.append(f"{what}: {len(differ)} changelog record(s) differ from the "
                        f"independent reader's (offset, got, want): {differ[:3]}")
    return failures


def check_per_bucket(spark, engine, table: str, out: Path, ckpt: Path,
                     leases: ZooKeeperLeases) -> list[str]:
    """Every check of the output against the independent reader; returns what failed."""
    failures: list[str] = []
    offsets = offsets_of(ckpt)
    snaps = {int(b): p for b, p in only_table(offsets[0])["snapshot"].items()}
    if set(snaps) != set(range(BUCKETS)):
        failures.append(f"offsets/0 names snapshots of buckets {sorted(snaps)}, not of all "
                        f"{BUCKETS} (each had one before the query started)")
    cluster = open_cluster(engine.servers)
    try:
        end = cluster.list_offsets(table)
    finally:
        cluster.close()
    logs = engine.read_log(table, end)
    key_bucket: dict[int, int] = {}
    for b, recs in logs.items():
        if [r[0] for r in recs] != list(range(end[b])):
            failures.append(f"bucket {b}: the independent reader returned {len(recs)} records, "
                            f"not exactly offsets [0, {end[b]})")
        for _, _, key, _ in recs:
            if key_bucket.setdefault(key, b) != b:
                failures.append(f"key {key} is in the changelogs of buckets {key_bucket[key]} "
                                f"and {b}")
    rows = [r.asDict() for r in spark.read.parquet(str(out)).collect()]
    lost = sorted({r["id"] for r in rows} - key_bucket.keys())
    if lost:
        failures.append(f"{len(lost)} delivered key(s) are in no bucket's changelog "
                        f"(e.g. {lost[:3]})")

    for b in sorted(snaps):
        failures += bucket_failures(b, snaps[b], [r for r in rows if key_bucket.get(r["id"]) == b],
                                    logs.get(b, []), end[b])

    # The whole output folded (per key in log order; snapshot rows sit before the changelog).
    ordered = sorted(rows, key=lambda r: (r["_log_offset"], r["_commit_timestamp"] is not None))
    diff = describe_diff(fold((r["id"], r["_change_type"], r["v"]) for r in ordered),
                         engine.content(table, logs))
    if diff:
        failures.append(f"the whole output folded differs from the table's content: {diff}")

    # One lease: in every offset file, the only one ZooKeeper held, and gone at the end.
    ids = {o["lease_id"] for o in offsets.values()}
    if len(ids) != 1:
        failures.append(f"the offset files name {len(ids)} lease ids: {sorted(ids)}")
    if not leases.seen <= ids:
        failures.append(f"ZooKeeper held lease(s) {sorted(leases.seen - ids)} besides the "
                        f"checkpoint's {sorted(ids)} while the test ran")
    left = leases.now() & (ids | leases.seen)
    if left:
        failures.append(f"lease(s) {sorted(left)} left in ZooKeeper at the end")
    return failures


# -- the test -------------------------------------------------------------------------------------
@pytest.mark.parametrize("point", POINTS)
def test_driver_killed_in_batch0_restarts_exactly(spark, engine, point, tmp_path):
    kill_restart_and_check(spark, engine, point, tmp_path)


@pytest.mark.parametrize("engine", ["apache-fluss"], indirect=True)
@pytest.mark.parametrize("point", [BEFORE_OFFSET, AFTER_SNAPSHOT],
                         ids=["before-first-offset", "after-snapshot-phase"])
def test_apache_fluss_restarts_exactly_from_the_other_restart_points(spark, engine, point,
                                                                     tmp_path):
    kill_restart_and_check(spark, engine, point, tmp_path)


def await_covering_snapshots(cluster, table: str, partition: str | None = None) -> None:
    """Until every bucket (of ``partition``) has a KV snapshot covering what was written."""
    loaded = cluster.list_offsets(table, partition=partition)
    wait_until(lambda: all(b in s and s[b].log_offset >= loaded[b] for b in loaded
                           for s in [cluster.latest_kv_snapshots(table, partition=partition)]),
               120, f"KV snapshots of {table} {partition or ''} covering offsets {loaded}")


def kill_restart_and_check(spark, engine, point: str, tmp_path: Path) -> None:
    """A fresh table under a concurrent writer, its query's driver killed at ``point`` and
    restarted, the output checked bucket by bucket."""
    table = engine.new_table()
    engine.create(table)
    # Every bucket has a snapshot covering the load before the query lists them.
    cluster = open_cluster(engine.servers)
    try:
        await_covering_snapshots(cluster, table)
    finally:
        cluster.close()
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    writer = Writer(engine, table)
    with engine.leases() as leases:
        writer.start()
        facts: dict = {}
        try:
            facts = kill_first_driver(engine, table, out, ckpt, point, tmp_path, leases)
            run_to_end(spark, engine, table, out, ckpt, writer, leases)
            lease = offsets_of(ckpt)[0]["lease_id"]
            wait_until(lambda: lease not in leases.now(), 60, f"lease {lease} to go")
            failures = check_per_bucket(spark, engine, table, out, ckpt, leases)
            if facts["lease in ZooKeeper at the kill"] is False:
                failures.append(f"lease {lease} was not in ZooKeeper when the driver was killed "
                                f"with offsets/0 logged: offsets/0 named snapshots no lease "
                                f"pinned")
        except (AssertionError, TimeoutError) as e:
            failures = [str(e)]
        finally:
            writer.stop_event.set()
    assert not failures, (f"{engine.name}, killed at {point} ({facts}, {writer.rounds} writer "
                          f"rounds):\n  " + "\n  ".join(failures))


def test_the_checks_name_a_lost_a_duplicated_and_a_foreign_record():
    """The per-bucket checks (no cluster, no Spark): an exact output passes; a lost changelog
    record, one delivered twice, and snapshot rows of another snapshot each fail, naming the
    bucket and the offset."""
    records: list[Record] = [(0, "+I", 1, "a"), (1, "+I", 2, "b"), (2, "-U", 1, "a"),
                             (3, "+U", 1, "c"), (4, "-D", 2, "b"), (5, "+I", 3, "d")]
    snapshot = [7, 2, 2, 2]     # snapshot 7 holds offsets [0, 2): keys 1 and 2

    def row(o, kind, k, v, ts):
        return {"id": k, "v": v, "_change_type": kind, "_log_offset": o, "_commit_timestamp": ts}
    snap = [row(1, "+I", 1, "a", None), row(1, "+I", 2, "b", None)]
    log = [row(o, kind, k, v, 1) for o, kind, k, v in records[2:]]
    assert bucket_failures(1, snapshot, snap + log, records, 6) == []

    lost = bucket_failures(1, snapshot, snap + [r for r in log if r["_log_offset"] != 4],
                           records, 6)
    assert len(lost) == 1 and lost[0].startswith("bucket 1 (snapshot 7") \
        and "never delivered (lost, e.g. [4])" in lost[0], lost
    twice = bucket_failures(1, snapshot, snap + log + [log[1]], records, 6)
    assert len(twice) == 1 and "more than once (duplicates, e.g. [3])" in twice[0], twice
    other = bucket_failures(1, snapshot, [dict(r, _log_offset=3) for r in snap] + log, records, 6)
    assert any("another snapshot than offsets/0's" in f for f in other), other
    changed = bucket_failures(1, snapshot, snap + [dict(log[0], v="x")] + log[1:], records, 6)
    assert len(changed) == 1 and "differ from the independent reader's" in changed[0], changed


# -- a partitioned table on Apache Fluss ----------------------------------------------------------
# The embedded engine's version is tests/spark/test_partitions.py's kill test (extended). Here the
# module's Apache Fluss cluster (a snapshot every second, one retained) serves a day-partitioned
# PK table: offsets/0 names a snapshot per partition bucket, and the restart must read exactly
# those, pinned under offsets/0's lease, then each partition's changelog after them.
DAYS = ("2026-11-24", "2026-11-25", "2026-11-26")
DAY_ROWS = 2000
PARTITIONED_OPTIONS = {"maxOffsetsPerTrigger": "1500", "scan.kv.read": "snapshot"}


class DayWriter(Writer):
    """Upserts in the first half of every day's keys and deletes in the second half (each key
    once: Fluss gives the delete of a missing key an offset without a record, which pyfluss's
    reader would wait for), a round every 100 ms until stopped."""

    def run(self) -> None:
        from fluss_spark.testing.apache_fluss import PyFluss
        try:
            with PyFluss(self.engine.servers) as fluss:
                while not self.stop_event.wait(0.1) and self.rounds < DAY_ROWS // 2:
                    r = self.rounds
                    for day in DAYS:
                        fluss.upsert(self.table, [((r * 31 + k) % (DAY_ROWS // 2), day, f"u{r}")
                                                  for k in range(30)])
                        fluss.delete(self.table, [(DAY_ROWS // 2 + r, day)])
                    self.rounds += 1
        except BaseException as e:  # noqa: BLE001 - reported by finish()
            self.error = e


@pytest.mark.parametrize("engine", ["apache-fluss"], indirect=True)
@pytest.mark.parametrize("point", [OFFSETS_0, MID_SNAPSHOT], ids=["offsets0", "mid-snapshot"])
def test_a_partitioned_table_restarts_exactly_after_a_kill_on_apache_fluss(
        spark, engine, point, tmp_path):
    servers = engine.servers
    table = engine.new_table()
    with engine.connect() as fluss, closing(open_cluster(servers)) as cluster:
        fluss.create_table(table, "id BIGINT NOT NULL, dt STRING NOT NULL, v STRING",
                           primary_key=["id", "dt"], buckets=2, partition_keys=["dt"])
        for day in DAYS:
            fluss.create_partition(table, {"dt": day})
            fluss.upsert(table, [(k, day, "0") for k in range(DAY_ROWS)])
        for day in DAYS:
            await_covering_snapshots(cluster, table, day)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    writer = DayWriter(engine, table)
    with engine.leases() as leases:
        writer.start()
        try:
            driver = Driver(tmp_path, servers, table, str(out), str(ckpt),
                            "2" if point == MID_SNAPSHOT else "-1", "0",
                            options=PARTITIONED_OPTIONS)
            try:
                if point == OFFSETS_0:
                    wait_until(lambda: (ckpt / "offsets" / "0").exists()
                               or driver.proc.poll() is not None, 240,
                               "offsets/0 of the first driver", interval_s=0.01)
                else:
                    driver.wait_for("IN_BATCH 2", "the first driver inside batch 2", 240)
            finally:
                driver.kill()
            assert (ckpt / "offsets" / "0").exists(), driver.log_tail()
            first = decode(offsets_of(ckpt)[0])
            pinned_at_kill = first.lease_id in leases.now()
            (tid,) = first.tables
            snapshots = {pos.name: pos.snapshot for pos in first.tables[tid].partitions.values()}

            def sink(df, batch_id):
                df.write.mode("overwrite").parquet(f"{out}/batch={batch_id}")
            reader = (spark.readStream.format("fluss").option("bootstrap.servers", servers)
                      .option("table", table))
            for k, v in PARTITIONED_OPTIONS.items():
                reader = reader.option(k, v)
            q = (reader.load().writeStream.option("checkpointLocation", str(ckpt))
                 .foreachBatch(sink).start())
            try:
                wait_until(lambda: q.exception() is not None or (
                    first.lease_id in leases.seen and first.lease_id not in leases.now()), 240,
                    "the restarted snapshot phase to end and its lease to go")
                failed(q)
                writer.finish()
                q.processAllAvailable()
                failed(q)
            finally:
                q.stop()
        finally:
            writer.stop_event.set()
        assert pinned_at_kill, (f"lease {first.lease_id} was not in ZooKeeper when the driver was "
                                f"killed with offsets/0 logged")
        # One lease ever, its pins per partition, none left.
        assert {o["lease_id"] for o in offsets_of(ckpt).values()} == {first.lease_id}
        assert leases.seen == {first.lease_id} and not leases.now()
        assert {pid for t, pid in leases.partitions[first.lease_id] if t == tid} \
            >= set(first.tables[tid].partitions)
    result = spark.read.parquet(str(out))
    snap = result.where("_commit_timestamp IS NULL").select("id", "dt").collect()
    # offsets/0's snapshots, each row exactly once (a replaced snapshot would differ in count).
    assert sorted(snapshots) == list(DAYS) and all(len(s) == 2 for s in snapshots.values())
    assert Counter(r["dt"] for r in snap) == {
        day: sum(s.row_count for s in snapshots[day].values()) for day in DAYS}
    assert len(set(snap)) == len(snap)
    with engine.connect() as fluss:
        want = {(r["id"], r["dt"]): r["v"] for r in fluss.rows(table, timeout_s=120)}
    assert fold_changelog(result, key=("id", "dt")) == want
