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
- ``client``: no Spark; ``open_cluster(servers).read_snapshot(table, bucket, snapshot_id,
  location=...)`` of every bucket, one after the other, in this process (the backend the
  source's readers use, handed where the files are as the driver's listing learned it, as the
  source's splits carry it).
  For Apache Fluss the process's local checkpoint copies (``kv_snapshot.CHECKPOINTS``) are
  dropped first, so the read copies and opens each checkpoint as a fresh Spark worker does; the
  line ``client (cached)`` reads again with the copies the previous read left open. (Spark's
  Python workers are reused between runs and may keep their copies too: the ``spark`` figures
  of Apache Fluss may skip the copy, ~10 ms per 500k-row bucket here.)

The table gives rows/s and the ratios Apache Fluss / ceiling, embedded / ceiling and Apache
Fluss / embedded (of rows/s: below 1 means slower) of the medians; the lines after it give the
same ratios paired run by run (each run's sources read back to back, so drift of a shared
machine's speed cancels) as min/median/max, and the load average before and after.
``--profile`` then runs one client-only read (copies dropped first) of Apache Fluss (and, for
comparison, of the embedded cluster) under cProfile and prints its top entries.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402

from fluss_spark.client.apache_fluss import kv_snapshot  # noqa: E402
from fluss_spark.client.backends import open_cluster  # noqa: E402
from fluss_spark.connector import register  # noqa: E402
from fluss_spark.connector.schema import with_snapshot_metadata  # noqa: E402
from fluss_spark.local.ports import wait_until  # noqa: E402

from common import (ArrowFilesSource, add_profile, noop_read, parser,  # noqa: E402
                    print_profiles)
from engines import APACHE, EMBEDDED, Engines  # noqa: E402 - bench/engines.py

SCHEMA = "id BIGINT NOT NULL, v STRING, amount DOUBLE"
TABLE = "bench.kv"
CEILING = "ceiling"


# -- the snapshots ------------------------------------------------------------------------------
def covering_snapshots(servers: str, timeout_s: float,
                       table: str = TABLE) -> dict[int, tuple[int, int, int, Any]]:
    """``{bucket: (snapshot id, rows, log offset, location)}`` once each bucket's latest KV
    snapshot of ``table`` covers every write of it (Apache Fluss snapshots periodically; the
    embedded one was triggered); ``location`` is where the listing found its files (None for
    the embedded cluster), which the source's splits carry to their readers."""
    cluster = open_cluster(servers)
    found: dict = {}
    try:
        end = {b: o for b, o in cluster.list_offsets(table, spec="latest").items() if o}

        def covered() -> bool:
            found.update(cluster.latest_kv_snapshots(table))
            return all(b in found and found[b].log_offset >= o for b, o in end.items())
        wait_until(covered, timeout_s, f"KV snapshots of {table} at {servers} covering {end}")
        return {b: (s.snapshot_id, s.row_count, s.log_offset,
                    cluster.snapshot_location(table, b, s.snapshot_id))
                for b, s in sorted(found.items())}
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


def client_read(servers: str, snaps: dict[int, tuple[int, int, int, Any]],
                cold: bool = True) -> tuple[float, int, int]:
    """Read every bucket's snapshot with the backend's ``read_snapshot``; (seconds, rows,
    batches). ``cold``: without the checkpoint copies left by an earlier read (Apache Fluss)."""
    if cold:
        drop_checkpoint_copies()
    t0 = time.perf_counter()
    cluster = open_cluster(servers)
    rows = batches = 0
    try:
        for bucket, (sid, _, _, where) in snaps.items():
            scan = cluster.read_snapshot(TABLE, bucket, sid, location=where)
            try:
                for batch in scan:
                    rows += batch.num_rows
                    batches += 1
            finally:
                scan.close()
    finally:
        cluster.close()
    return time.perf_counter() - t0, rows, batches


def export_batches(servers: str, snaps: dict[int, tuple[int, int, int, Any]], target: pa.Schema,
                   directory: Path) -> tuple[int, int]:
    """The batches the fluss source yields for these snapshots (metadata columns added, in the
    query's Arrow schema), one IPC file per bucket; (rows, batches)."""
    directory.mkdir(parents=True)
    cluster = open_cluster(servers)
    rows = count = 0
    try:
        for bucket, (sid, _, log_offset, _) in snaps.items():
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


def print_paired(times: dict[tuple[str, str], list[float]]) -> None:
    """Ratios of rows/s paired run by run, min/median/max."""
    pairs = [(APACHE, CEILING, "spark"), (APACHE, CEILING, "spark (batches)"),
             (EMBEDDED, CEILING, "spark"), (EMBEDDED, CEILING, "spark (batches)"),
             (APACHE, EMBEDDED, "client")]
    for name, base, reader in pairs:
        ratios = sorted(b / a for a, b in zip(times[(name, reader)], times[(base, reader)]))
        print(f"paired {name} / {base}, {reader}: min/median/max {ratios[0]:.2f}/"
              f"{statistics.median(ratios):.2f}/{ratios[-1]:.2f}")


def main(argv=None) -> int:
    ap = parser(__doc__, rows=1_000_000, buckets=2, repeat=3, write_batch_rows=50_000)
    ap.add_argument("--tablets", type=int, default=1, help="tablet servers of each cluster")
    ap.add_argument("--snapshot-interval", default="2s",
                    help="Apache Fluss kv.snapshot.interval (how soon the writes are snapshotted)")
    add_profile(ap, "one client-only read of Apache Fluss (and of the embedded cluster) under "
                "cProfile")
    args = ap.parse_args(argv)

    engines = Engines("bench-apache-fluss-snapshot-", args.tablets,
                      {"kv.snapshot.interval": args.snapshot_interval})
    try:
        servers, work = engines.servers, engines.work
        engines.load(TABLE, SCHEMA, args.rows, args.buckets, args.write_batch_rows, ["id"])
        snaps = {}
        for engine in (EMBEDDED, APACHE):
            t0 = time.perf_counter()
            snaps[engine] = covering_snapshots(servers[engine], 300)
            total = sum(r for _, r, _, _ in snaps[engine].values())
            listed = {b: v[:3] for b, v in snaps[engine].items()}
            print(f"{engine}: KV snapshots {{bucket: (id, rows, log offset)}} {listed} "
                  f"({total:,} rows; waited {time.perf_counter() - t0:.1f}s)")
            if total != args.rows:
                raise RuntimeError(f"{engine}'s snapshots hold {total} rows, expected {args.rows}")

        spark = engines.start_spark("bench-apache-fluss-snapshot")
        register(spark)
        spark.dataSource.register(ArrowFilesSource)
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
        frames[CEILING] = (spark.readStream.format(ArrowFilesSource.name())
                           .option("dir", str(work / "arrow")).schema(schema).load())

        # Warm-up (Python workers, JIT of the Spark side, connections), not counted.
        for name in (EMBEDDED, APACHE, CEILING):
            noop_read(frames[name], work / "ck" / f"warm-{name}")
            if name in servers:
                _, _, batches = client_read(servers[name], snaps[name])
                print(f"{name}: read_snapshot yields {batches} batches")

        names = (EMBEDDED, APACHE, CEILING)
        times: dict[tuple[str, str], list[float]] = {}
        load_before = os.getloadavg()
        for i in range(args.repeat):
            order = names[i % 3:] + names[:i % 3]
            line = []
            for name in order:
                wall, batches, n = noop_read(frames[name], work / "ck" / f"{name}-{i}")
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
        print_paired(times)
        print(f"load average (1, 5, 15 min) before the runs {load_before}, after "
              f"{os.getloadavg()}")

        if args.profile:
            # Copies dropped first, so that each profiled read copies and opens the checkpoints.
            print_profiles("one client-only read_snapshot",
                           {e: partial(client_read, servers[e], snaps[e], cold=False)
                            for e in (APACHE, EMBEDDED)}, args.profile_top,
                           before=drop_checkpoint_copies)
        return 0
    finally:
        engines.stop()


if __name__ == "__main__":
    sys.exit(main())
