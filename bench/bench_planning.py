"""The driver's planning of a full-mode read of Apache Fluss, its snapshots in S3: how long the
source's driver-side steps take, this checkout against another one.

Run::

    .venv/bin/python bench/bench_planning.py --buckets 16 --repeat 8 [--baseline /tmp/base]

It starts Apache Fluss 0.9.1 (one tablet server, ``kv.snapshot.interval=1s``) with its
``remote.data.dir`` in the local S3 object store (``fluss_spark/local/object_store.py``), writes
``--rows`` rows with pyfluss into a primary-key table of ``--buckets`` buckets and waits for KV
snapshots covering them. Then, ``--repeat`` times after one uncounted warm-up, each checkout in
turn, a fresh process makes the calls Spark makes in the source's driver-side process of an
AvailableNow query, timing each: ``prepareForTriggerAvailableNow``, ``initialOffset`` (the
latest snapshots, each one's files and ``_METADATA`` row count), ``latestOffset`` (the lease
acquired, each pin checked) and ``partitions`` (the splits). Every run's splits must cover
exactly the rows written. ``--baseline`` is a checkout (its ``fluss_spark`` on ``PYTHONPATH``)
run the same way; medians by checkout, and this checkout's time to the end of each step ÷ the
baseline's, paired run by run (min / median / max).
"""

from __future__ import annotations

import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import parser  # bench/common.py (compiles the package)
from fluss_spark.client.backends import open_cluster
from fluss_spark.client.remote_storage import RemoteStorage
from fluss_spark.local.apache_fluss import ApacheFlussProcesses
from fluss_spark.testing.apache_fluss import PyFluss

TABLE = "bench.planned"
STEPS = ("prepare", "initialOffset", "latestOffset", "partitions")
HERE = Path(__file__).resolve().parents[1]

#: One query's driver-side calls in a fresh process; prints their ends (ms) and the rows the
#: splits cover.
DRIVER = """
import json, sys, time
from pyspark.sql.streaming.datasource import ReadAllAvailable
from fluss_spark.connector.source import FlussDataSource
source = FlussDataSource(json.loads(sys.argv[1]))
schema = source.schema()
t0, ends = time.perf_counter(), {}
reader = source.streamReader(schema)
reader.prepareForTriggerAvailableNow()
ends["prepare"] = time.perf_counter()
start = reader.initialOffset()
ends["initialOffset"] = time.perf_counter()
end = reader.latestOffset(start, ReadAllAvailable())
ends["latestOffset"] = time.perf_counter()
splits = reader.partitions(start, end)
ends["partitions"] = time.perf_counter()
reader.stop()
print(json.dumps({"ms": {k: 1e3 * (v - t0) for k, v in ends.items()},
                  "rows": sum(s.row_end - s.row_start for s in splits)}))
"""


def plan_once(root: Path, options: dict[str, str], rows: int) -> dict[str, float]:
    """The driver's steps of one query in a fresh process with ``root``'s fluss_spark: each
    step's end, in ms from the reader's creation."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(options)], env=env,
                         capture_output=True, text=True, check=True, cwd=root).stdout
    result = json.loads(out.strip().splitlines()[-1])
    if result["rows"] != rows:
        raise RuntimeError(f"{root}: the splits cover {result['rows']} rows, expected {rows}")
    return result["ms"]


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--buckets", type=int, default=16)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=8)
    ap.add_argument("--baseline", type=Path, help="another checkout to pair against")
    args = ap.parse_args()
    roots = {"this": HERE} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    for root in roots.values():     # bytecode for both, as common.compile_package for this one
        compileall.compile_dir(str(root / "fluss_spark"), quiet=1)
    fluss = ApacheFlussProcesses(Path(tempfile.mkdtemp(prefix="bench-planning-")), tablets=1,
                                 options={"kv.snapshot.interval": "1s"}, remote_storage="s3")
    fluss.start()
    try:
        store = fluss.object_store.fluss_options()
        storage = RemoteStorage(store["s3.endpoint"], store["s3.region"], store["s3.access-key"],
                                store["s3.secret-key"])
        servers = fluss.bootstrap_servers
        with PyFluss(servers) as writer, open_cluster(servers, storage=storage) as wire:
            writer.create_table(TABLE, "id BIGINT NOT NULL, v STRING", primary_key=["id"],
                                buckets=args.buckets)
            writer.upsert(TABLE, [(i, f"v{i}") for i in range(args.rows)])
            loaded = wire.list_offsets(TABLE)
            deadline = time.monotonic() + 180
            while not all(b in s and s[b].log_offset >= loaded[b]
                          for s in [wire.latest_kv_snapshots(TABLE)] for b in loaded):
                if time.monotonic() > deadline:
                    raise RuntimeError("no KV snapshots covering the rows within 180 s")
                time.sleep(0.5)
        options = {"bootstrap.servers": servers, "table": TABLE, "scan.startup.mode": "full",
                   **store}
        print(f"{args.rows:,} rows in {args.buckets} buckets, snapshots in S3; "
              f"checkouts: {', '.join(f'{k} {v}' for k, v in roots.items())}")
        for root in roots.values():
            plan_once(root, options, args.rows)            # warm-up, not counted
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in roots}
        for i in range(args.repeat):
            for name, root in roots.items():
                runs[name].append(plan_once(root, options, args.rows))
            print(f"run {i}: " + "; ".join(f"{n} " + ", ".join(
                f"{s} {runs[n][-1][s]:.0f}" for s in STEPS) + " ms" for n in roots))
        print("\nms from the reader's creation to the end of each step (median of "
              f"{args.repeat})")
        print(f"{'checkout':10}" + "".join(f"{s:>15}" for s in STEPS))
        for name in roots:
            print(f"{name:10}" + "".join(
                f"{statistics.median(r[s] for r in runs[name]):15.1f}" for s in STEPS))
        if args.baseline:
            print("paired this / baseline, min/median/max:")
            for step in STEPS[1:]:
                ratios = sorted(a[step] / b[step] for a, b in zip(runs["this"], runs["baseline"]))
                print(f"  to the end of {step:14} {ratios[0]:.2f}/{statistics.median(ratios):.2f}/"
                      f"{ratios[-1]:.2f}")
    finally:
        fluss.stop()


if __name__ == "__main__":
    main()
