"""Snapshot phase at scale: how rows/s, memory, the lease and the checkpoint grow with the table.

Run::

    .venv/bin/python bench/bench_scale.py --rows 1000000,4000000 \\
        --engines embedded,apache-fluss [--buckets 16] [--repeat 1]

It starts one ZooKeeper and the engines named by ``--engines`` on it (``bench/engines.py``:
the embedded ``EmbeddedProcesses`` and Apache Fluss 0.9.1, ``--tablets`` tablet servers each),
then, for every N of ``--rows`` from the smallest up, writes N rows into a primary-key table
``bench.scale_<N>`` of each engine (``id BIGINT NOT NULL, v STRING, amount DOUBLE``, primary key
``id``, ``--buckets`` buckets; ``common.make_rows`` in Arrow chunks of ``--write-batch-rows``,
never all N at once: upserted by ``FlussConnection.writer``, then snapshotted, into the embedded
cluster; through pyfluss into Apache Fluss), waits until each bucket's KV snapshot covers its
writes, and reads the table with ``spark.readStream.format("fluss")``, ``scan.startup.mode=full``,
``Trigger.AvailableNow``, to the ``noop`` sink (a fresh checkpoint per run; one uncounted
warm-up query of a small table first). Each run is checked: the ``numInputRows`` of its
progress events sum to N. The table of N is dropped before the next N is written.

Reported per (engine, N), ``--repeat`` runs (median of the times, maximum of the peaks):

- rows/s over the wall time (``start()`` to termination: query start-up and planning included)
  and over the micro-batches that read rows (``triggerExecution``);
- time to first row: from ``start()`` to the end of the first micro-batch with rows (its
  progress event's ``timestamp`` plus its ``triggerExecution``: when its rows had reached the
  sink), and how many micro-batches read rows;
- peak RSS (VmRSS), sampled from ``/proc/<pid>/status`` every ``--sample-ms`` during the
  query, of the Spark Python workers (every Python process below the Spark JVM:
  ``pyspark.daemon``, the workers it forks and the streaming source's runner; the largest
  single process and the largest sum), of the tablet servers (the largest; also its anonymous
  part, RssAnon, which leaves out mapped files such as the embedded snapshot files) and of the
  coordinator;
- the lease: the largest total size of the znodes under the engine's
  ``leases/kv_snapshot`` in ZooKeeper seen during the query (polled every 4 samples), with the
  znode count;
- the checkpoint: the largest ``offsets/<batch>`` file and the ``commits/`` files (bytes, count).

Then a verdict: micro-batch rows/s at the largest N within 20% of the smallest N's (the wall
rate would flatter the larger N, whose fixed start-up weighs less), and the Python workers'
peak below 1 GB and not growing with N: the largest N's peak at most 1.2x that of the smallest
N whose buckets each hold more than one read batch (``scan.batch.bytes`` of rows, the page a
reader holds; a smaller table's worker never holds a whole page, so its peak is lower whatever
the reader does), or of the smallest N when no other does; and,
from the largest N's write, snapshot and read times, an estimate of a run of ``--estimate-rows``
rows. The load average (``os.getloadavg``) is printed before each run.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from kazoo.client import KazooClient  # noqa: E402
from kazoo.exceptions import NoNodeError  # noqa: E402

from fluss_spark.client.backends import open_cluster  # noqa: E402
from fluss_spark.connector import register  # noqa: E402
from fluss_spark.connector.options import SCAN_BATCH_BYTES  # noqa: E402

from bench_apache_fluss_snapshot import SCHEMA, covering_snapshots  # noqa: E402
from common import available_now, make_rows, parser  # noqa: E402 - bench/common.py
from engines import APACHE, EMBEDDED, Engines  # noqa: E402 - bench/engines.py

#: Where each engine keeps its KV snapshot leases, below its ZooKeeper root.
LEASE_ROOTS = {EMBEDDED: "/fluss/leases/kv_snapshot", APACHE: "/leases/kv_snapshot"}
WARMUP_ROWS = 20_000
MB = 1 << 20


# -- /proc --------------------------------------------------------------------------------------
def rss_bytes(pid: int, kind: str = "VmRSS") -> int:
    """The process's resident set now (``kind`` RssAnon: its anonymous part, without mapped
    files); 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(kind + ":"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def python_descendants(root: int) -> list[int]:
    """Every Python process below ``root`` (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue
        # The command name may hold spaces and parentheses: the fields follow the last ")".
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, ()))
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"python" in f.read().split(b"\0", 1)[0]:
                    found.append(pid)
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


# -- ZooKeeper ----------------------------------------------------------------------------------
def znode_bytes(zk: KazooClient, path: str) -> tuple[int, int]:
    """(bytes of data, znodes) of ``path`` and everything below it; (0, 0) if it is absent."""
    try:
        _, stat = zk.get(path)
        kids = zk.get_children(path)
    except NoNodeError:
        return 0, 0
    size, count = stat.dataLength, 1
    for kid in kids:
        b, n = znode_bytes(zk, f"{path}/{kid}")
        size, count = size + b, count + n
    return size, count


# -- sampling during a query --------------------------------------------------------------------
@dataclass
class Peaks:
    """The largest values seen by a ``Sampler``: RSS per group (largest process, largest sum)
    and the lease znodes (bytes, count)."""

    rss_max: dict[str, int] = field(default_factory=dict)
    rss_sum: dict[str, int] = field(default_factory=dict)
    lease_bytes: int = 0
    lease_znodes: int = 0

    def merge(self, other: "Peaks") -> None:
        for name, value in other.rss_max.items():
            self.rss_max[name] = max(value, self.rss_max.get(name, 0))
        for name, value in other.rss_sum.items():
            self.rss_sum[name] = max(value, self.rss_sum.get(name, 0))
        self.lease_bytes = max(self.lease_bytes, other.lease_bytes)
        self.lease_znodes = max(self.lease_znodes, other.lease_znodes)


class Sampler(threading.Thread):
    """Samples the RSS of each group of processes every ``interval_s`` (``groups``: by name,
    what gives their pids at each sample and the ``/proc/<pid>/status`` field to read) and,
    every 4th sample, the lease znodes below ``lease_path``."""

    def __init__(self, groups: dict[str, tuple[Callable[[], list[int]], str]],
                 zk: KazooClient | None,
                 lease_path: str | None, interval_s: float):
        super().__init__(daemon=True)
        self.groups, self.zk, self.lease_path = groups, zk, lease_path
        self.interval_s = interval_s
        self.peaks = Peaks()
        self._done = threading.Event()

    def run(self) -> None:
        tick = 0
        while True:
            for name, (pids, kind) in self.groups.items():
                sizes = [rss_bytes(p, kind) for p in pids()]
                self.peaks.merge(Peaks({name: max(sizes, default=0)}, {name: sum(sizes)}))
            if self.zk is not None and self.lease_path is not None and tick % 4 == 0:
                size, count = znode_bytes(self.zk, self.lease_path)
                self.peaks.merge(Peaks(lease_bytes=size, lease_znodes=count))
            tick += 1
            if self._done.wait(self.interval_s):
                return

    def stop(self) -> Peaks:
        self._done.set()
        self.join()
        return self.peaks


# -- one run ------------------------------------------------------------------------------------
@dataclass
class Run:
    """One query's figures."""

    wall_s: float
    batches_s: float
    first_row_s: float
    batches: int
    peaks: Peaks
    offsets_bytes: int
    offsets_files: int
    commits_bytes: int
    commits_files: int


def checkpoint_files(checkpoint: Path, kind: str) -> list[int]:
    """Sizes of the checkpoint's ``kind`` (offsets, commits) files, one per batch."""
    d = checkpoint / kind
    return [p.stat().st_size for p in d.iterdir() if p.name.isdigit()] if d.is_dir() else []


def progress_time(progress: dict) -> float:
    """Epoch seconds of a progress event's ``timestamp`` (its micro-batch's start)."""
    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


def measure(df: Any, checkpoint: Path, rows: int, what: str, sampler: Sampler) -> Run:
    """Run ``df`` to the noop sink with AvailableNow while ``sampler`` samples; check that the
    query read ``rows`` rows."""
    start = time.time()
    sampler.start()
    try:
        q, wall = available_now(df, checkpoint, what=what)
    finally:
        peaks = sampler.stop()
    busy = [p for p in q.recentProgress if p["numInputRows"]]
    read = sum(p["numInputRows"] for p in busy)
    if read != rows:
        raise RuntimeError(f"{what}: the query read {read:,} rows, expected {rows:,}")
    first = busy[0]
    offsets, commits = (checkpoint_files(checkpoint, k) for k in ("offsets", "commits"))
    return Run(wall_s=wall,
               batches_s=sum(p["durationMs"]["triggerExecution"] for p in busy) / 1000.0,
               first_row_s=(progress_time(first) - start
                            + first["durationMs"]["triggerExecution"] / 1000.0),
               batches=len(busy), peaks=peaks,
               offsets_bytes=max(offsets, default=0), offsets_files=len(offsets),
               commits_bytes=sum(commits), commits_files=len(commits))


@dataclass
class Result:
    """Every run of one (engine, N), with the write and snapshot-wait times."""

    engine: str
    rows: int
    write_s: float
    snapshot_wait_s: float
    runs: list[Run]

    def median(self, name: str) -> float:
        return statistics.median(getattr(r, name) for r in self.runs)

    @property
    def peaks(self) -> Peaks:
        out = Peaks()
        for r in self.runs:
            out.merge(r.peaks)
        return out

    def largest(self, name: str) -> int:
        return max(getattr(r, name) for r in self.runs)


# -- the benchmark ------------------------------------------------------------------------------
class ScaleBench:
    """The engines, their SparkSession and a ZooKeeper client for the lease znodes."""

    def __init__(self, engines: Engines, sample_s: float, max_offsets: int):
        self.engines = engines
        self.sample_s = sample_s
        self.max_offsets = max_offsets
        self.spark = engines.start_spark("bench-scale")
        register(self.spark)
        self.jvm_pid: int = self.spark.sparkContext._gateway.proc.pid
        self.zk = KazooClient(hosts=engines.zk.address, read_only=True)
        self.zk.start(timeout=30)

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()

    def frame(self, engine: str, table: str) -> Any:
        reader = (self.spark.readStream.format("fluss")
                  .option("bootstrap.servers", self.engines.servers[engine])
                  .option("table", table).option("scan.startup.mode", "full"))
        if self.max_offsets:
            reader = reader.option("maxOffsetsPerTrigger", str(self.max_offsets))
        return reader.load()

    def sampler(self, engine: str) -> Sampler:
        cluster = self.engines.embedded if engine == EMBEDDED else self.engines.apache
        assert cluster is not None

        def pids(role: str) -> Callable[[], list[int]]:
            return lambda: [s.pid for (r, _), s in cluster.servers.items()
                            if r == role and s.pid is not None]
        return Sampler({"python": (lambda: python_descendants(self.jvm_pid), "VmRSS"),
                        "tablet": (pids("tablet"), "VmRSS"),
                        "tablet anon": (pids("tablet"), "RssAnon"),
                        "coordinator": (pids("coordinator"), "VmRSS")},
                       self.zk, self.engines.zk_roots[engine] + LEASE_ROOTS[engine],
                       self.sample_s)

    def run(self, engine: str, table: str, rows: int, label: str) -> Run:
        checkpoint = self.engines.work / "ck" / f"{engine}-{label}"
        return measure(self.frame(engine, table), checkpoint, rows,
                       f"{engine} {table} ({label})", self.sampler(engine))


def load(engines: Engines, table: str, rows: int, buckets: int, chunk: int
         ) -> dict[str, tuple[float, float]]:
    """Write ``rows`` rows into ``table`` of every engine and wait for snapshots covering them;
    ``{engine: (write s, snapshot wait s)}``."""
    writes = engines.load(table, SCHEMA, rows, buckets, chunk, ["id"])
    out = {}
    for engine, servers in engines.servers.items():
        t0 = time.perf_counter()
        snaps = covering_snapshots(servers, 300 + rows / 20_000, table)
        total = sum(n for _, n, _, _ in snaps.values())
        if total != rows:
            raise RuntimeError(f"{engine}: the KV snapshots of {table} hold {total:,} rows, "
                               f"expected {rows:,}")
        out[engine] = (writes[engine], time.perf_counter() - t0)
    return out


def drop(engines: Engines, table: str) -> None:
    for servers in engines.servers.values():
        cluster = open_cluster(servers)
        try:
            cluster.drop_table(table)
        finally:
            cluster.close()


def load_average() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def mb(n: int) -> str:
    return f"{n / MB:,.0f}"


def print_table(results: list[Result]) -> None:
    head = (f"{'engine':<13}{'rows':>12}{'wall s':>8}{'rows/s':>11}{'batch s':>9}"
            f"{'rows/s':>11}{'1st row s':>10}{'batches':>8}{'py MB':>7}{'py sum':>8}"
            f"{'tablet':>8}{'anon':>6}{'coord':>7}{'lease B':>9}{'zn':>4}{'offsets B':>10}"
            f"{'commits B':>10}")
    print(head)
    for r in results:
        p = r.peaks
        wall, batch = r.median("wall_s"), r.median("batches_s")
        print(f"{r.engine:<13}{r.rows:>12,}{wall:>8.2f}{r.rows / wall:>11,.0f}{batch:>9.2f}"
              f"{r.rows / batch:>11,.0f}{r.median('first_row_s'):>10.2f}"
              f"{r.largest('batches'):>8}{mb(p.rss_max['python']):>7}"
              f"{mb(p.rss_sum['python']):>8}{mb(p.rss_max['tablet']):>8}"
              f"{mb(p.rss_max['tablet anon']):>6}"
              f"{mb(p.rss_max['coordinator']):>7}{p.lease_bytes:>9,}{p.lease_znodes:>4}"
              f"{r.largest('offsets_bytes'):>10,}{r.largest('commits_bytes'):>10,}")
    print("py MB: the largest Spark Python process, py sum: all of them at once, tablet: the "
          "largest tablet server (anon: without mapped files), coord: the coordinator (peak "
          "RSS in MB during the query); "
          "lease B / zn: the lease znodes' bytes and count; offsets B: the largest offsets file; "
          "commits B: all commit files")


def fills_pages(rows: int, buckets: int) -> bool:
    """Whether each bucket of a ``rows``-row table holds more than one read batch of rows."""
    row_bytes = make_rows(0, 1000).nbytes / 1000
    return rows / buckets * row_bytes > SCAN_BATCH_BYTES.default


def verdict(results: list[Result], estimate_rows: int, buckets: int) -> bool:
    """Print the verdict per engine and the estimate of an ``estimate_rows`` run; True if every
    engine passes."""
    ok = True
    for engine in dict.fromkeys(r.engine for r in results):
        mine = sorted((r for r in results if r.engine == engine), key=lambda r: r.rows)
        small, large = mine[0], mine[-1]
        rate = (large.rows / large.median("batches_s")) / (small.rows / small.median("batches_s"))
        base = next((r for r in mine[:-1] if fills_pages(r.rows, buckets)), small)
        py_base, py_large = base.peaks.rss_max["python"], large.peaks.rss_max["python"]
        fast = rate >= 0.8
        lean = py_large < 1024 * MB and py_large <= 1.2 * py_base
        ok = ok and fast and lean
        below = ("" if base is small else
                 f"{mb(small.peaks.rss_max['python'])} MB at {small.rows:,}, whose buckets hold "
                 "one batch or less; ")
        print(f"{engine}: micro-batch rows/s at {large.rows:,} = {rate:.2f}x that at "
              f"{small.rows:,} -> {'PASS' if fast else 'FAIL'} (>= 0.80); Python worker peak "
              f"{below}{mb(py_base)} MB at {base.rows:,} -> {mb(py_large)} MB at "
              f"{large.rows:,} -> {'PASS' if lean else 'FAIL'} (< 1024 MB, <= 1.2x)")
        scale = estimate_rows / large.rows
        parts = {"write": large.write_s * scale, "snapshot wait": large.snapshot_wait_s * scale,
                 "query": large.median("wall_s") * scale}
        print(f"{engine}: a {estimate_rows:,}-row run, scaled linearly from {large.rows:,}: "
              f"~{sum(parts.values()) / 60:.0f} min ("
              + ", ".join(f"{k} {v / 60:.1f} min" for k, v in parts.items()) + ")")
    return ok


def main(argv=None) -> int:
    ap = parser(__doc__, rows="1000000,4000000", engines=f"{EMBEDDED},{APACHE}", buckets=16,
                tablets=1, repeat=1, write_batch_rows=50_000, sample_ms=100,
                max_offsets_per_trigger=0, estimate_rows=40_000_000)
    ap.add_argument("--snapshot-interval", default="2s",
                    help="Apache Fluss kv.snapshot.interval (how soon the writes are snapshotted)")
    args = ap.parse_args(argv)
    try:
        sizes = sorted({int(n) for n in args.rows.split(",")})
    except ValueError:
        ap.error(f"--rows {args.rows!r}: give row counts separated by commas, e.g. 1000000,4000000")
    if not sizes or sizes[0] < args.buckets:
        ap.error(f"--rows {args.rows!r}: each count must be at least --buckets ({args.buckets})")

    engines = Engines("bench-scale-", args.tablets,
                      {"kv.snapshot.interval": args.snapshot_interval},
                      engines=[e.strip() for e in args.engines.split(",")])
    bench = None
    try:
        bench = ScaleBench(engines, args.sample_ms / 1000.0, args.max_offsets_per_trigger)
        load(engines, "bench.warmup", WARMUP_ROWS, args.buckets, args.write_batch_rows)
        for engine in engines.servers:
            bench.run(engine, "bench.warmup", WARMUP_ROWS, "warmup")
        drop(engines, "bench.warmup")

        results = []
        for n in sizes:
            table = f"bench.scale_{n}"
            times = load(engines, table, n, args.buckets, args.write_batch_rows)
            for engine in engines.servers:
                runs = []
                for i in range(args.repeat):
                    print(f"{engine} {n:,} rows, run {i}: {load_average()}", flush=True)
                    runs.append(bench.run(engine, table, n, f"{n}-{i}"))
                    r = runs[-1]
                    print(f"  wall {r.wall_s:.2f}s, micro-batches {r.batches_s:.2f}s "
                          f"({r.batches}), first row {r.first_row_s:.2f}s, Python peak "
                          f"{mb(r.peaks.rss_max['python'])} MB", flush=True)
                results.append(Result(engine, n, *times[engine], runs))
            drop(engines, table)

        print(f"\nPK table, snapshot phase (full mode, AvailableNow, noop sink), {args.buckets} "
              f"buckets, {args.tablets} tablet server(s), local[2], median of {args.repeat}; "
              f"{load_average()}")
        print_table(results)
        return 0 if verdict(results, args.estimate_rows, args.buckets) else 1
    finally:
        if bench is not None:
            bench.close()
        engines.stop()


if __name__ == "__main__":
    sys.exit(main())
