"""Log reads from Apache Fluss's remote storage against reads of the same records on a tablet.

Run::

    .venv/bin/python bench/bench_remote_log.py --rows 200000 --repeat 3

It starts one ZooKeeper and Apache Fluss 0.9.1 (one tablet server, ``log.segment.file-size`` of
``--segment-mb`` MB, the remote-log task every second) in a temporary directory, and writes the
same ``--rows`` rows (``id BIGINT, v STRING``, ``--value-bytes`` of text each) with pyfluss into
two one-bucket log tables: ``remote`` with ``table.log.tiered.local-segments=1``, whose older
segments move to ``remote.data.dir`` and leave the tablet, and ``local``, which keeps 1000
local segments (its segments are copied to remote storage too, but reads are served locally).
It waits until the tablet keeps only the newest segment of ``remote``; the measured range is
``[0, S)``, S the start offset of that segment: in ``remote`` only in remote storage, in
``local`` on the tablet.

Measured ``--repeat`` times, alternating which goes first: the wire client's
``read_log(table, 0, 0, S)`` (``ApacheFlussWireCluster``, the backend the source's executors
use), all columns, every record decoded to Arrow; rows/s and the remote / local ratio.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from common import parser  # bench/common.py
from fluss_spark.client.apache_fluss import ApacheFlussWireCluster
from fluss_spark.local.apache_fluss import ApacheFlussProcesses
from fluss_spark.local.ports import wait_until
from fluss_spark.local.zookeeper import ZooKeeperProcess
from fluss_spark.testing.apache_fluss import PyFluss, local_segment_starts

SCHEMA = "id BIGINT, v STRING"


def timed_read(wire: ApacheFlussWireCluster, table: str, end: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    n = sum(b.num_rows for b in wire.read_log(table, 0, 0, end))
    return time.perf_counter() - t0, n


def main(argv=None) -> int:
    args = parser(__doc__, rows=200_000, value_bytes=200, segment_mb=4, repeat=3,
                  write_chunk=20_000).parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-remote-log-"))
    zk = ZooKeeperProcess(work / "zookeeper")
    cluster: ApacheFlussProcesses | None = None
    try:
        zk.start()
        cluster = ApacheFlussProcesses(work / "apache-fluss", tablets=1, zookeeper=zk.address,
                                       options={
            "zookeeper.path.root": f"/bench-remote-{uuid.uuid4().hex[:8]}",
            "log.segment.file-size": f"{args.segment_mb}mb",
            "remote.log.task-interval-duration": "1s"})
        cluster.start()
        servers = cluster.bootstrap_servers
        # Random hex: the batches' ZSTD compression leaves about half of it.
        rows = [(i, os.urandom(args.value_bytes // 2).hex()) for i in range(args.rows)]
        tables = {"remote": "bench.remote_log", "local": "bench.local_log"}
        t0 = time.perf_counter()
        with PyFluss(servers) as fluss:
            for kind, name in tables.items():
                fluss.create_table(name, SCHEMA, buckets=1, properties={
                    "table.log.tiered.local-segments": "1" if kind == "remote" else "1000"})
                for start in range(0, args.rows, args.write_chunk):
                    fluss.append(name, rows[start:start + args.write_chunk])
        print(f"wrote {args.rows:,} rows into each table in {time.perf_counter() - t0:.1f} s")
        if len(local_segment_starts(cluster, tables["local"])) < 2:
            raise SystemExit("the rows fit in one segment: raise --rows or lower --segment-mb")
        t0 = time.perf_counter()
        def tiered() -> bool:
            starts = local_segment_starts(cluster, tables["remote"])
            return len(starts) == 1 and starts[0] > 0
        wait_until(tiered, 300, "the remote table to keep only its newest segment locally")
        end = local_segment_starts(cluster, tables["remote"])[0]
        assert min(local_segment_starts(cluster, tables["local"])) == 0
        print(f"tiered in {time.perf_counter() - t0:.1f} s; offsets [0, {end:,}) are only in "
              f"remote storage ({len(local_segment_starts(cluster, tables['local']))} segments "
              "on the tablet for the local table)")
        wire = ApacheFlussWireCluster.connect(servers, request_timeout_s=60)
        try:
            timed_read(wire, tables["remote"], end)          # warm-up: connections, schemas
            timed_read(wire, tables["local"], end)
            rates: dict[str, list[float]] = {"remote": [], "local": []}
            for i in range(args.repeat):
                order = ("remote", "local") if i % 2 == 0 else ("local", "remote")
                for kind in order:
                    seconds, n = timed_read(wire, tables[kind], end)
                    assert n == end, (kind, n, end)
                    rates[kind].append(n / seconds)
        finally:
            wire.close()
        print(f"\n{end:,} records of ~{args.value_bytes} B, rows/s, min / median / max of "
              f"{args.repeat}:")
        for kind in ("remote", "local"):
            r = rates[kind]
            print(f"  {kind:6} {min(r) / 1e6:.2f}M / {statistics.median(r) / 1e6:.2f}M / "
                  f"{max(r) / 1e6:.2f}M")
        ratio = statistics.median(rates["remote"]) / statistics.median(rates["local"])
        print(f"  remote / local (medians): {ratio:.2f}")
        return 0
    finally:
        if cluster is not None:
            cluster.stop()
        zk.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
