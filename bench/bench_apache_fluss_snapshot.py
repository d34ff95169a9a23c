"""Snapshot phase (full mode, PK table): Apache Fluss vs the embedded cluster vs the API ceiling.

Run::

    .venv/bin/python bench/bench_apache_fluss_snapshot.py --rows 1000000 --repeat 3 [--profile]

It starts one ZooKeeper, then both clusters on it in temporary directories -- the embedded
``EmbeddedProcesses`` (coordinator + ``--tablets`` tablet servers) and Apache Fluss 0.9.1
(``ApacheFlussProcesses``, ``kv.snapshot.interval`` of ``--snapshot-interval``) -- and writes the
same ``--rows`` rows into a primary-key table of each (``id BIGINT NOT NULL, v STRING, amount
DOUBLE``, primary key ``id``, ``--buckets`` buckets): into the embedded one with
``FlussConnection.writer(table).upsert`` in Arrow chunks of ``--write-batch-rows`` rows, then
``admin.trigger_kv_snapshot``; into Apache Fluss with the official client (pyfluss, through
``fluss_spark.testing.apache_fluss.PyFluss.upsert``), then it waits until the periodic KV
snapshots cover every write (each bucket's snapshot log offset >= its latest log offset). The
write times are printed but are not what is measured.

Measured, ``--repeat`` times with the order of the three sources rotating, the median counts:

- ``spark``: ``spark.readStream.format("fluss")`` with ``scan.startup.mode=full`` to the ``noop``
  sink, ``trigger(availableNow=True)``, a fresh checkpoint per run, one SparkSession (local[2])
  for everything: wall time from ``start()`` to termination (query start-up, planning and the
  KV snapshot lease included), and on a line of its own ``spark (batches)``: the micro-batches
  that read rows (``triggerExecution`` in the query progress). Against Apache Fluss each bucket's
  split copies the snapshot's RocksDB checkpoint files and decodes them in the Python worker
  (``client/apache_fluss/kv_snapshot.py``); against the embedded cluster the rows come through
  server-side scan sessions;
- ``ceiling``: a minimal Python Data Source (``DataSourceStreamReader`` with
  ``SupportsTriggerAvailableNow``, one micro-batch) yielding the SAME Arrow batches as the fluss
  source yields for Apache Fluss (same schema, metadata columns included; one partition per
  bucket), from memory-mapped Arrow IPC files written before timing: what Spark's Python Data
  Source API itself allows;
- ``client``: no Spark; ``open_cluster(servers).read_snapshot(table, bucket, snapshot_id)`` of
  every bucket, one after the other, in this process (the backend the source's readers use).
  For Apache Fluss the process's local checkpoint copies (``kv_snapshot.CHECKPOINTS``) are
  dropped first, so the read copies and opens each checkpoint as a fresh Spark worker does; the
  line ``client (cached)`` reads again with the copies the previous read left open. (Spark's
  Python workers are reused between runs and may keep their copies too: the ``spark`` figures
  of Apache Fluss may skip the copy, ~10 ms per 500k-row bucket here.)

The table gives rows/s and the ratios Apache Fluss / ceiling, embedded / ceiling and Apache
Fluss / embedded (of rows/s: below 1 means slower). ``--profile`` then runs one client-only read
(copies dropped first) of Apache Fluss (and, for comparison, of the embedded cluster) under
cProfile and prints its top entries.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.datasource import (DataSource, DataSourceStreamReader,  # noqa: E402
                                    InputPartition)
from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow  # noqa: E402

from fluss_spark.client import FlussConnection  # noqa: E402
from fluss_spark.client.apache_fluss import kv_snapshot  # noqa: E402
from fluss_spark.client.backends import open_cluster  # noqa: E402
from fluss_spark.connector import register  # noqa: E402
from fluss_spark.connector.schema import with_snapshot_metadata  # noqa: E402
from fluss_spark.local.ports import wait_until  # noqa: E402
from fluss_spark.testing.apache_fluss import PyFluss  # noqa: E402

from engines import APACHE, EMBEDDED, Engines  # noqa: E402 - bench/engines.py

SCHEMA = "id BIGINT NOT NULL, v STRING, amount DOUBLE"
TABLE = "bench.kv"
CEILING = "ceiling"


# -- the ceiling: a minimal Python Data Source over the same Arrow batches ----------------------
# (bench_spark.py has its twin: Spark pickles a data source defined in __main__ by value, so each
# script defines its own instead of importing one that Spark's Python workers could not find.)
class _FilePartition(InputPartition):
    """One bucket's batches, as one Arrow IPC file."""

    def __init__(self, path: str):
        self.path = path


class SameBatchesSource(DataSource):
    """Yields pre-built Arrow batches, one IPC file (= one partition) per bucket."""

    @classmethod
    def name(cls):
        return "bench_same_batches"

    def schema(self):
        return self.options["schema"]

    def streamReader(self, schema):
        return _SameBatchesReader(self.options["dir"], schema)


class _SameBatchesReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """One micro-batch holding every file; read() yields each file's batches unchanged."""

    def __init__(self, directory, schema):
        self.directory = directory
        self.schema = schema

    def initialOffset(self):
        return {"done": 0}

    def latestOffset(self, start, limit):
        return {"done": 1}

    def prepareForTriggerAvailableNow(self):
        pass

    def partitions(self, start, end):
        if start == end:
            return []
        return [_FilePartition(str(p)) for p in sorted(Path(self.directory).glob("*.arrow"))]

    def read(self, partition):
        with pa.memory_map(partition.path) as source:
            reader = ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)


# -- loading -------------------------------------------------------------------------------------
def make_rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()),
                     "v": pa.array([f"value-{i}" for i in range(lo, hi)], pa.string()),
                     "amount": pa.array([i * 0.5 for i in range(lo, hi)], pa.float64())})


def load_embedded(servers: str, rows: int, buckets: int, chunk: int) -> float:
    t0 = time.perf_counter()
    with FlussConnection(servers) as conn:
        admin = conn.admin()
        admin.create_table(TABLE, SCHEMA, primary_key=["id"], num_buckets=buckets)
        writer = conn.writer(TABLE)
        for lo in range(0, rows, chunk):
            writer.upsert(make_rows(lo, min(rows, lo + chunk)))
        admin.trigger_kv_snapshot(TABLE)
    return time.perf_counter() - t0


def load_apache(servers: str, rows: int, buckets: int, chunk: int) -> float:
    t0 = time.perf_counter()
    with PyFluss(servers) as pf:
        pf.create_table(TABLE, SCHEMA, primary_key=["id"], buckets=buckets)
        for lo in range(0, rows, chunk):
            pf.upsert(TABLE, make_rows(lo, min(rows, lo + chunk)).to_pylist())
    return time.perf_counter() - t0


def covering_snapshots(servers: str, timeout_s: float) -> dict[int, tuple[int, int, int]]:
    """``{bucket: (snapshot id, rows, log offset)}`` once each bucket's latest KV snapshot covers
    every write of it (Apache Fluss snapshots periodically; the embedded one was triggered)."""
    cluster = open_cluster(servers)
    found: dict = {}
    try:
        end = {b: o for b, o in cluster.list_offsets(TABLE, spec="latest").items() if o}

        def covered() -> bool:
            found.update(cluster.latest_kv_snapshots(TABLE))
            return all(b in found and found[b].log_offset >= o for b, o in end.items())
        wait_until(covered, timeout_s, f"KV snapshots of {TABLE} at {servers} covering {end}")
        return {b: (s.snapshot_id, s.row_count, s.log_offset) for b, s in sorted(found.items())}
    finally:
        cluster.close()


# -- reads ---------------------------------------------------------------------------------------
def drop_checkpoint_copies() -> None:
    """Forget this process's local copies of Apache Fluss checkpoints (``kv_snapshot.CHECKPOINTS``,
    kept open for the next read of the same snapshot), so that the next read copies and opens
    the checkpoint again, as a split in a fresh Spark worker does."""
    cache = getattr(kv_snapshot, "CHECKPOINTS", None)
    if cache is not None:
        cache.clear()


def client_read(servers: str, snaps: dict[int, tuple[int, int, int]],
                cold: bool = True) -> tuple[float, int, int]:
    """Read every bucket's snapshot with the backend's ``read_snapshot``; (seconds, rows,
    batches). ``cold``: without the checkpoint copies left by an earlier read (Apache Fluss)."""
    if cold:
        drop_checkpoint_copies()
    t0 = time.perf_counter()
    cluster = open_cluster(servers)
    rows = batches = 0
    try:
        for bucket, (sid, _, _) in snaps.items():
            scan = cluster.read_snapshot(TABLE, bucket, sid)
            try:
                for batch in scan:
                    rows += batch.num_rows
                    batches += 1
            finally:
                scan.close()
    finally:
        cluster.close()
    return time.perf_counter() - t0, rows, batches


def export_batches(servers: str, snaps: dict[int, tuple[int, int, int]], target: pa.Schema,
                   directory: Path) -> tuple[int, int]:
    """The batches the fluss source yields for these snapshots (metadata columns added, in the
    query's Arrow schema), one IPC file per bucket; (rows, batches)."""
    directory.mkdir(parents=True)
    cluster = open_cluster(servers)
    rows = count = 0
    try:
        for bucket, (sid, _, log_offset) in snaps.items():
            scan = cluster.read_snapshot(TABLE, bucket, sid)
            try:
                batches = [pa.RecordBatch.from_arrays(
                    with_snapshot_metadata(b, log_offset).columns, schema=target) for b in scan]
            finally:
                scan.close()
            with ipc.new_file(str(directory / f"bucket-{bucket:05d}.arrow"), target) as w:
                for b in batches:
                    w.write_batch(b)
            rows += sum(b.num_rows for b in batches)
            count += len(batches)
    finally:
        cluster.close()
    return rows, count


def spark_read(spark, df, checkpoint: Path) -> tuple[float, float, int]:
    """One AvailableNow query to the noop sink: (wall s from start() to termination, s of the
    micro-batches that read rows, rows read)."""
    t0 = time.perf_counter()
    q = (df.writeStream.format("noop").trigger(availableNow=True)
         .option("checkpointLocation", str(checkpoint)).start())
    q.awaitTermination()
    wall = time.perf_counter() - t0
    if q.exception():
        raise RuntimeError(str(q.exception()))
    busy = [p for p in q.recentProgress if p["numInputRows"]]
    return (wall, sum(p["durationMs"]["triggerExecution"] for p in busy) / 1000.0,
            sum(p["numInputRows"] for p in busy))


def profile_client(servers: str, snaps, top: int) -> str:
    drop_checkpoint_copies()
    prof = cProfile.Profile()
    prof.enable()
    client_read(servers, snaps, cold=False)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--buckets", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tablets", type=int, default=1, help="tablet servers of each cluster")
    ap.add_argument("--write-batch-rows", type=int, default=50_000)
    ap.add_argument("--snapshot-interval", default="2s",
                    help="Apache Fluss kv.snapshot.interval (how soon the writes are snapshotted)")
    ap.add_argument("--profile", action="store_true",
                    help="then profile one client-only read of Apache Fluss (and of the embedded "
                         "cluster) under cProfile")
    ap.add_argument("--profile-top", type=int, default=15)
    args = ap.parse_args(argv)

    engines = Engines("bench-apache-fluss-snapshot-", args.tablets,
                      {"kv.snapshot.interval": args.snapshot_interval})
    spark = None
    try:
        servers, work = engines.servers, engines.work

        for engine, load in ((EMBEDDED, load_embedded), (APACHE, load_apache)):
            secs = load(servers[engine], args.rows, args.buckets, args.write_batch_rows)
            print(f"wrote {args.rows:,} rows into {engine} in {secs:.1f}s "
                  f"({args.rows / secs:,.0f} rows/s)")
        snaps = {}
        for engine in (EMBEDDED, APACHE):
            t0 = time.perf_counter()
            snaps[engine] = covering_snapshots(servers[engine], 300)
            total = sum(r for _, r, _ in snaps[engine].values())
            print(f"{engine}: KV snapshots {{bucket: (id, rows, log offset)}} {snaps[engine]} "
                  f"({total:,} rows; waited {time.perf_counter() - t0:.1f}s)")
            if total != args.rows:
                raise RuntimeError(f"{engine}'s snapshots hold {total} rows, expected {args.rows}")

        spark = (SparkSession.builder.master("local[2]").appName("bench-apache-fluss-snapshot")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2")
                 .config("spark.sql.session.timeZone", "UTC").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        spark.dataSource.register(SameBatchesSource)
        frames = {e: (spark.readStream.format("fluss").option("bootstrap.servers", s)
                      .option("table", TABLE).option("scan.startup.mode", "full").load())
                  for e, s in servers.items()}
        schema = frames[APACHE].schema
        if frames[EMBEDDED].schema != schema:
            raise RuntimeError(f"the two engines' schemas differ: {frames[EMBEDDED].schema} vs "
                               f"{schema}")
        target = to_arrow_schema(schema, timezone="UTC")
        n, count = export_batches(servers[APACHE], snaps[APACHE], target, work / "arrow")
        if n != args.rows:
            raise RuntimeError(f"exported {n} rows for the ceiling, expected {args.rows}")
        print(f"ceiling: {count} Arrow batches in {args.buckets} IPC files, schema "
              f"{', '.join(f'{f.name} {f.type}' for f in target)}")
        frames[CEILING] = (spark.readStream.format("bench_same_batches")
                           .option("dir", str(work / "arrow")).schema(schema).load())

        # Warm-up (Python workers, JIT of the Spark side, connections), not counted.
        for name in (EMBEDDED, APACHE, CEILING):
            spark_read(spark, frames[name], work / "ck" / f"warm-{name}")
            if name in servers:
                _, _, batches = client_read(servers[name], snaps[name])
                print(f"{name}: read_snapshot yields {batches} batches")

        names = (EMBEDDED, APACHE, CEILING)
        times: dict[tuple[str, str], list[float]] = {}
        for i in range(args.repeat):
            order = names[i % 3:] + names[:i % 3]
            line = []
            for name in order:
                wall, batches, n = spark_read(spark, frames[name], work / "ck" / f"{name}-{i}")
                if n != args.rows:
                    raise RuntimeError(f"spark read {n} rows from {name}, expected {args.rows}")
                times.setdefault((name, "spark"), []).append(wall)
                times.setdefault((name, "spark (batches)"), []).append(batches)
                text = f"{name} spark {wall:.2f}s (batches {batches:.2f}s)"
                if name in servers:
                    secs, n, _ = client_read(servers[name], snaps[name])
                    if n != args.rows:
                        raise RuntimeError(f"read_snapshot gave {n} rows from {name}, expected "
                                           f"{args.rows}")
                    times.setdefault((name, "client"), []).append(secs)
                    text += f", client {secs:.2f}s"
                if name == APACHE:
                    secs, n, _ = client_read(servers[name], snaps[name], cold=False)
                    if n != args.rows:
                        raise RuntimeError(f"read_snapshot gave {n} rows from {name}, expected "
                                           f"{args.rows}")
                    times.setdefault((name, "client (cached)"), []).append(secs)
                    text += f" (with the copies of the last read: {secs:.2f}s)"
                line.append(text)
            print(f"run {i}: " + "; ".join(line))

        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"\n{args.rows:,} rows, PK table, snapshot phase (full mode), {args.buckets} "
              f"buckets, {args.tablets} tablet server(s) each, local[2], median of {args.repeat}")
        print(f"{'source':<14}{'reader':<17}{'rows':>10}{'seconds':>9}{'rows/s':>13}"
              f"{'vs ceiling':>12}{'vs embedded':>13}")
        for reader in ("spark", "spark (batches)", "client", "client (cached)"):
            for name in names:
                if (name, reader) not in med:
                    continue
                secs = med[(name, reader)]
                ceiling = med.get((CEILING, reader))
                vs_ceiling = f"{ceiling / secs:.2f}" if ceiling else "-"
                embedded_secs = med.get((EMBEDDED, reader))
                vs_embedded = (f"{embedded_secs / secs:.2f}" if name == APACHE and embedded_secs
                               else "-")
                print(f"{name:<14}{reader:<17}{args.rows:>10,}{secs:>9.2f}"
                      f"{args.rows / secs:>13,.0f}{vs_ceiling:>12}{vs_embedded:>13}")
        print("ratios are of rows/s: vs ceiling = source / ceiling, vs embedded = Apache Fluss / "
              "embedded")

        if args.profile:
            for engine in (APACHE, EMBEDDED):
                print(f"\n=== cProfile of one client-only read_snapshot, {engine} (by own time)")
                print(profile_client(servers[engine], snaps[engine], args.profile_top))
        return 0
    finally:
        if spark is not None:
            spark.stop()
        engines.stop()


if __name__ == "__main__":
    sys.exit(main())
