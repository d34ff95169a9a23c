"""Start-up: how much later a query against Apache Fluss starts and ends than one against the
embedded cluster, and what importing each engine's client costs a fresh process.

Run::

    .venv/bin/python bench/bench_startup.py --rows 20000 --repeat 7

It starts one ZooKeeper, then both clusters on it (``bench/engines.py``), writes the same
``--rows`` rows into a primary-key table of each (``--buckets`` buckets) and waits for KV
snapshots covering them. Then, ``--repeat`` times after one uncounted warm-up each, alternating
the engines, it runs ``readStream.format("fluss")`` with ``scan.startup.mode=full`` to the
``noop`` sink (AvailableNow, fresh checkpoint, one SparkSession, local[2]) and checks that the
query read every row. A small table makes the query mostly start-up: per query it prints the
wall time from ``start()`` to termination, the time from ``start()`` to the first trigger (the
source's driver-side process starting, its schema, initial offset and lease), the micro-batch
(``triggerExecution``, of which ``latestOffset``) and the time from the last trigger's end to
termination. Medians by engine, and Apache Fluss minus embedded paired run by run
(min / median / max).

Then, ``--imports`` times each, alternating: a fresh ``python -c "import <client>"`` of the
Apache Fluss client (``fluss_spark.client.apache_fluss.cluster``) and of the embedded one
(``fluss_spark.client.embedded``), timed inside the process, and whether pandas was imported.
The package's bytecode is compiled first (``bench/common.py``), as an installed wheel's is.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from datetime import datetime
from typing import Any

from bench_apache_fluss_snapshot import TABLE, covering_snapshots  # bench/
from common import available_now, parser  # bench/common.py (compiles the package)
from engines import APACHE, EMBEDDED, Engines  # bench/engines.py
from fluss_spark.connector import register

SCHEMA = "id BIGINT NOT NULL, v STRING, amount DOUBLE"
CLIENTS = {APACHE: "fluss_spark.client.apache_fluss.cluster",
           EMBEDDED: "fluss_spark.client.embedded"}


def _epoch(progress: dict[str, Any]) -> float:
    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


def one_query(spark: Any, servers: str, checkpoint: Any, rows: int) -> dict[str, float]:
    """One AvailableNow read of the table: its phases in seconds (see the module docstring)."""
    df = (spark.readStream.format("fluss").option("bootstrap.servers", servers)
          .option("table", TABLE).option("scan.startup.mode", "full").load())
    started = time.time()
    q, wall = available_now(df, checkpoint)
    ended = started + wall
    progress = q.recentProgress
    read = sum(p["numInputRows"] for p in progress)
    if read != rows:
        raise RuntimeError(f"the query read {read} rows of {servers}, expected {rows}")
    last = progress[-1]
    return {"wall": wall,
            "start to first trigger": _epoch(progress[0]) - started,
            "micro-batches": sum(p["durationMs"]["triggerExecution"] for p in progress) / 1e3,
            "of which latestOffset": sum(p["durationMs"].get("latestOffset", 0)
                                         for p in progress) / 1e3,
            "last trigger to end": ended - _epoch(last)
            - last["durationMs"]["triggerExecution"] / 1e3}


def import_seconds(module: str) -> tuple[float, bool]:
    """(seconds to import ``module`` in a fresh interpreter, whether pandas came with it)."""
    code = (f"import time, sys\nt = time.perf_counter()\nimport {module}\n"
            "print(time.perf_counter() - t, 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    return float(out[0]), out[1] == "True"


def _spread(values: list[float]) -> str:
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, rows=20_000, buckets=2, repeat=7, write_batch_rows=20_000)
    ap.add_argument("--imports", type=int, default=9, help="fresh-process imports per client")
    args = ap.parse_args(argv)

    load_before = os.getloadavg()
    engines = Engines("bench-startup-", 1, {"kv.snapshot.interval": "2s"})
    try:
        engines.load(TABLE, SCHEMA, args.rows, args.buckets, args.write_batch_rows, ["id"])
        for engine, servers in engines.servers.items():
            snaps = covering_snapshots(servers, 300)
            if sum(r for _, r, _, _ in snaps.values()) != args.rows:
                raise RuntimeError(f"{engine}'s snapshots hold {snaps}, not {args.rows} rows")
        spark = engines.start_spark("bench-startup")
        register(spark)
        order = (APACHE, EMBEDDED)
        for engine in order:    # warm-up: the JVM's code paths and the Python workers
            one_query(spark, engines.servers[engine], engines.work / f"warm-{engine}", args.rows)
        runs: dict[str, list[dict[str, float]]] = {e: [] for e in order}
        for i in range(args.repeat):
            for engine in (order if i % 2 == 0 else order[::-1]):
                runs[engine].append(one_query(spark, engines.servers[engine],
                                              engines.work / f"{engine}-{i}", args.rows))
            print(f"run {i}: " + "; ".join(f"{e} wall {runs[e][-1]['wall']:.2f}s"
                                           for e in order))
    finally:
        engines.stop()

    print(f"\n{args.rows:,} rows, PK table, {args.buckets} buckets, full mode, local[2]; "
          f"{args.repeat} paired queries; seconds, median by engine and Apache Fluss minus "
          f"embedded paired (min / median / max)")
    print(f"{'phase':24s} {'apache-fluss':>12s} {'embedded':>9s}   difference")
    for phase in runs[APACHE][0]:
        a = [r[phase] for r in runs[APACHE]]
        e = [r[phase] for r in runs[EMBEDDED]]
        print(f"{phase:24s} {statistics.median(a):12.3f} {statistics.median(e):9.3f}   "
              f"{_spread([x - y for x, y in zip(a, e)])}")

    times: dict[str, list[float]] = {e: [] for e in CLIENTS}
    pandas = set()
    for _ in range(args.imports):
        for engine, module in CLIENTS.items():
            secs, with_pandas = import_seconds(module)
            times[engine].append(secs)
            if with_pandas:
                pandas.add(engine)
    print(f"\nimport in a fresh process, min / median / max of {args.imports}:")
    for engine, module in CLIENTS.items():
        print(f"  {engine:13s} {module:42s} {_spread(times[engine])} s")
    print(f"  pandas imported by: {', '.join(sorted(pandas)) or 'neither'}")
    print(f"load average before {tuple(round(x, 2) for x in load_before)}, after "
          f"{tuple(round(x, 2) for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
