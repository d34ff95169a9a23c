"""Snapshot-phase throughput of format("fluss") against the Python Data Source API ceiling.

Run::

    .venv/bin/python bench/bench_spark.py --rows 1000000 --buckets 4 --repeat 5
    .venv/bin/python bench/bench_spark.py --rows 4000000 --buckets 4 --repeat 3 --breakdown

It starts a local cluster, loads a PK table (id BIGINT, name STRING, amount DOUBLE), snapshots
it, and times, in one SparkSession (local[2]):

- ``fluss``: ``readStream.format("fluss")`` (full mode, Trigger.AvailableNow) -- the snapshot
  phase through scan sessions, lease included;
- ``ceiling``: a minimal Python streaming data source yielding the same Arrow batches (same
  schema, same partitions) from memory-mapped Arrow IPC files -- what the API itself allows;
- ``parquet``: ``spark.read.parquet`` of the same rows (a batch job);
- ``fluss-cols`` (noop sink): ``format("fluss")`` with ``columns=id,amount``, projected on the
  tablet servers (the ``name`` string column never leaves them), against ``fluss``;

each into the ``noop`` and the ``parquet`` sinks.

Pairing: every repeat runs all sources of a sink back to back, the order reversed on every other
repeat, and the ratios are computed per repeat (fluss against the ceiling of the same repeat),
so background load hits both sides of a ratio alike. The script prints min / median / max of each
side's seconds and of the paired ratios. Ratios are throughput ratios, ``ceiling s / fluss s``
(below 1: fluss is slower), as in the older rows of BENCHMARKS.md. ``--warmup`` runs (not counted)
start the Python workers first.

Streaming figures are the time of the micro-batches that read rows (``triggerExecution`` in query
progress), without the query's fixed start-up; ``exec`` is their ``addBatch`` alone (the Spark job
that runs the read tasks); batch figures are wall time of the job.

Every run is checked: the noop sink's ``numInputRows`` summed over the query's batches, and the
parquet sink's output read back, must equal ``--rows``.

``--breakdown`` adds the evidence of where the time goes: ``durationMs`` per micro-batch (fluss vs
ceiling, noop sink), the CPU seconds the tablet servers and Spark (JVM + Python workers) spent
during each run, and, from extra runs of both sources wrapped alike, the time each ``read()`` task
spends producing batches (inside the source's generator) vs handing them to Spark (between
yields). ``--profile`` adds one more fluss run whose ``read()`` generators run under cProfile.
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402

from bench_scan import loopback_s  # noqa: E402  (bench/ is the script's directory)
from common import (ArrowFilesReader, ArrowFilesSource, available_now,  # noqa: E402
                    local_spark, parser)

from fluss_spark.client import FlussConnection  # noqa: E402
from fluss_spark.connector import register  # noqa: E402
from fluss_spark.connector.schema import with_snapshot_metadata  # noqa: E402
from fluss_spark.connector.source import FlussDataSource, FlussStreamReader  # noqa: E402
from fluss_spark.local.embedded import EmbeddedProcesses  # noqa: E402

# ---------------------------------------------------------------------------------------------
# Executor-side instrumentation (pickled by value with the classes below; bench only)


def _instrumented(inner, out_dir: str | None, tag: str | None, label: str, profile: bool):
    """Yield ``inner``'s batches; write per-task timings (and a cProfile dump) to ``out_dir``.

    ``produce`` is the time spent inside the source's generator (for fluss: RPCs, decoding,
    building batches), ``handoff`` the time between yields, when Spark's worker serialises the
    batch and sends it to the JVM (and waits for it to take it)."""
    if not out_dir:
        yield from inner
        return
    prof = cProfile.Profile() if profile else None
    produce = handoff = 0.0
    rows = batches = 0
    first = None
    t_start = time.perf_counter()
    cpu_start = time.process_time()
    while True:
        t0 = time.perf_counter()
        if prof is not None:
            prof.enable()
        try:
            batch = next(inner)
        except StopIteration:
            break
        finally:
            if prof is not None:
                prof.disable()
        t1 = time.perf_counter()
        produce += t1 - t0
        if first is None:
            first = t1 - t_start
        rows += batch.num_rows
        batches += 1
        yield batch
        handoff += time.perf_counter() - t1
    wall = time.perf_counter() - t_start
    name = f"{tag}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump({"tag": tag, "label": label, "pid": os.getpid(), "wall": wall,
                   "produce": produce, "handoff": handoff, "first": first or 0.0,
                   "rows": rows, "batches": batches,
                   "cpu": time.process_time() - cpu_start}, f)
    if prof is not None:
        prof.dump_stats(os.path.join(out_dir, name + ".prof"))


class MemoryBatchesSource(ArrowFilesSource):
    """The ceiling, its batches cast to the query's schema and ``read()`` wrapped by
    ``_instrumented``."""

    @classmethod
    def name(cls):
        return "bench_memory"

    def streamReader(self, schema):
        return _MemoryReader(self.options["dir"], schema, self.options.get("bench.timing"),
                             self.options.get("bench.tag"))


class _MemoryReader(ArrowFilesReader):
    def __init__(self, directory, schema, timing_dir=None, tag=None):
        super().__init__(directory, schema)
        self.timing_dir = timing_dir
        self.tag = tag

    def _batches(self, partition):
        target = to_arrow_schema(self.schema, timezone="UTC")
        for batch in super().read(partition):
            yield pa.RecordBatch.from_arrays(batch.columns, schema=target)

    def read(self, partition):
        return _instrumented(self._batches(partition), self.timing_dir, self.tag,
                             Path(partition.path).stem, False)


class TimedFlussSource(FlussDataSource):
    """``format("fluss")`` with ``read()`` wrapped by ``_instrumented`` (breakdown runs only)."""

    _BENCH = ("bench.timing", "bench.tag", "bench.profile")

    @classmethod
    def name(cls):
        return "bench_fluss_timed"

    def _options(self):
        from fluss_spark.connector.options import parse_options
        return parse_options({k: v for k, v in dict(self.options).items() if k not in self._BENCH})

    def streamReader(self, schema):
        reader = _TimedFlussReader(self._options(), schema)
        reader.timing_dir = self.options.get("bench.timing")
        reader.tag = self.options.get("bench.tag")
        reader.profile = self.options.get("bench.profile") == "true"
        return reader


class _TimedFlussReader(FlussStreamReader):
    timing_dir = tag = None
    profile = False

    def read(self, partition):
        return _instrumented(iter(super().read(partition)), self.timing_dir, self.tag,
                             f"bucket-{getattr(partition, 'bucket', '?')}", self.profile)


# ---------------------------------------------------------------------------------------------
# Setup


def load_table(conn, table: str, rows: int, buckets: int) -> None:
    admin = conn.admin()
    admin.create_table(table, "id BIGINT NOT NULL, name STRING, amount DOUBLE",
                       primary_key=["id"], num_buckets=buckets)
    writer = conn.writer(table)
    step = 100_000
    for lo in range(0, rows, step):
        hi = min(rows, lo + step)
        writer.upsert(pa.table({"id": pa.array(range(lo, hi), pa.int64()),
                                "name": [f"name-{i}" for i in range(lo, hi)],
                                "amount": [i * 0.5 for i in range(lo, hi)]}))
    admin.trigger_kv_snapshot(table)


def export_snapshot(conn, table: str, target: pa.Schema, arrow_dir: Path, parquet_dir: Path,
                    batch_bytes: int) -> tuple[int, int]:
    """The same rows as the fluss source yields, as IPC files (ceiling) and Parquet files;
    returns (rows, bytes of the snapshot pages the scan sessions move)."""
    info = conn.admin().get_table(table)
    arrow_dir.mkdir(parents=True)
    parquet_dir.mkdir(parents=True)
    total = moved = 0
    for b in range(info.num_buckets):
        pages = list(conn.kv_scanner(table).scan(b, batch_size_bytes=batch_bytes))
        moved += sum(x.nbytes for x in pages)
        batches = [pa.RecordBatch.from_arrays(with_snapshot_metadata(x).columns, schema=target)
                   for x in pages]
        total += sum(x.num_rows for x in batches)
        with ipc.new_file(str(arrow_dir / f"bucket-{b}.arrow"), target) as w:
            for x in batches:
                w.write_batch(x)
        pq.write_table(pa.Table.from_batches(batches, schema=target),
                       str(parquet_dir / f"bucket-{b}.parquet"))
    return total, moved


# ---------------------------------------------------------------------------------------------
# CPU accounting from /proc (Linux)

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (ppid, CPU seconds of the process and its reaped children)."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        # fields[0] is state (stat field 3): ppid=4, utime=14, stime=15, cutime=16, cstime=17
        ppid = int(fields[1])
        ticks = sum(int(x) for x in fields[11:15])
        table[int(entry)] = (ppid, ticks / _TICK)
    return table


def _tree_cpu(table, roots) -> float:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    seen, stack, total = set(), list(roots), 0.0
    while stack:
        pid = stack.pop()
        if pid in seen or pid not in table:
            continue
        seen.add(pid)
        total += table[pid][1]
        stack.extend(children.get(pid, []))
    return total


class CpuMeter:
    """CPU seconds of the cluster's processes and of Spark's (the JVM and its Python workers).

    Python workers that exit between two samples are counted through their parent's cutime only
    once reaped; the difference over a run is therefore a close lower bound."""

    def __init__(self, cluster_pids, jvm_pid):
        self.cluster_pids = [p for p in cluster_pids if p]
        self.jvm_pid = jvm_pid

    def sample(self) -> tuple[float, float, float]:
        table = _proc_table()
        return (_tree_cpu(table, self.cluster_pids),
                _tree_cpu(table, [self.jvm_pid]) if self.jvm_pid else float("nan"),
                time.perf_counter())


def _jvm_pid(spark) -> int | None:
    proc = getattr(spark.sparkContext._gateway, "proc", None)
    return getattr(proc, "pid", None)


# ---------------------------------------------------------------------------------------------
# Runs


class RowCountError(AssertionError):
    pass


def run_stream(spark, df, sink: str, out: Path, checkpoint: Path, rows: int) -> dict:
    """Run one AvailableNow query; returns the seconds of its micro-batches that read rows
    (whole: triggerExecution, exec: addBatch alone) and every batch's durationMs. The query's
    fixed start-up (~5 s here) is left out so that the figures measure throughput; the first
    batch adds planning (offsets, lease, splits)."""
    q, _ = available_now(df, checkpoint, sink, out if sink == "parquet" else None)
    progress = list(q.recentProgress)
    if progress and progress[0]["batchId"] != 0:
        raise RuntimeError("recentProgress lost the first batches; raise "
                           "spark.sql.streaming.numRecentProgressUpdates")
    got = sum(p["numInputRows"] for p in progress)
    if got != rows:
        raise RowCountError(f"{out.name}: the query read {got} rows, expected {rows}")
    if sink == "parquet":
        written = spark.read.parquet(str(out)).count()
        if written != rows:
            raise RowCountError(f"{out.name}: the parquet sink holds {written} rows, "
                                f"expected {rows}")
    busy = [p for p in progress if p["numInputRows"]]
    return {"whole": sum(p["durationMs"]["triggerExecution"] for p in busy) / 1000.0,
            "exec": sum(p["durationMs"].get("addBatch", 0) for p in busy) / 1000.0,
            "batches": [{"batchId": p["batchId"], "rows": p["numInputRows"],
                         **p["durationMs"]} for p in progress]}


def run_batch(spark, src: Path, sink: str, out: Path, rows: int) -> dict:
    df = spark.read.parquet(str(src))
    t0 = time.perf_counter()
    if sink == "noop":
        df.write.format("noop").mode("overwrite").save()
    else:
        df.write.parquet(str(out))
    secs = time.perf_counter() - t0
    if sink == "parquet":
        written = spark.read.parquet(str(out)).count()
        if written != rows:
            raise RowCountError(f"{out.name}: the parquet output holds {written} rows, "
                                f"expected {rows}")
    return {"whole": secs, "exec": secs, "batches": []}


def stats(xs: list[float]) -> tuple[float, float, float]:
    return min(xs), statistics.median(xs), max(xs)


def fmt3(xs: list[float], spec: str = ".2f") -> str:
    lo, med, hi = stats(xs)
    return f"{lo:{spec}} / {med:{spec}} / {hi:{spec}}"


_FIELDS = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "addBatch", "commitOffsets",
           "triggerExecution")


def print_breakdown(runs: dict, repeat: int) -> None:
    """durationMs per micro-batch, median over repeats, for fluss and ceiling (noop sink)."""
    print("\n== Breakdown, noop sink: durationMs per micro-batch, median over "
          f"{repeat} repeats (ms) ==")
    print("   'other' = triggerExecution minus the listed parts; busy = batch read rows")
    head = f"{'source':<9}{'batch':>6}{'rows':>11}" + "".join(f"{f:>{len(f) + 2}}" for f in _FIELDS)
    print(head + f"{'other':>8}")
    for name in ("fluss", "ceiling"):
        per_rep = [r["batches"] for r in runs[(name, "noop")]]
        n = max(len(b) for b in per_rep)
        for i in range(n):
            rowsets = [b[i] for b in per_rep if len(b) > i]
            med = {f: statistics.median(x.get(f, 0) for x in rowsets) for f in _FIELDS}
            other = med["triggerExecution"] - sum(med[f] for f in _FIELDS[:-1])
            nrows = statistics.median(x["rows"] for x in rowsets)
            print(f"{name:<9}{i:>6}{nrows:>11,.0f}"
                  + "".join(f"{med[f]:>{len(f) + 2},.0f}" for f in _FIELDS)
                  + f"{other:>8,.0f}")
    print("\nsummed over busy batches, min / median / max over repeats (s):")
    for name in ("fluss", "ceiling"):
        for f in _FIELDS:
            xs = [sum(b.get(f, 0) for b in r["batches"] if b["rows"]) / 1000.0
                  for r in runs[(name, "noop")]]
            print(f"  {name:<8}{f:<18}{fmt3(xs):>22}")


def main(argv=None) -> int:
    ap = parser(__doc__, rows=1_000_000, buckets=4)
    ap.add_argument("--repeat", type=int, default=5, help="paired repeats per sink (default 5)")
    ap.add_argument("--warmup", type=int, default=1,
                    help="uncounted runs of every source per sink first (default 1; 0: none)")
    ap.add_argument("--batch-bytes", type=int, default=4 << 20)
    ap.add_argument("--breakdown", action="store_true",
                    help="print durationMs per micro-batch, CPU per run and read() timings")
    ap.add_argument("--profile", action="store_true",
                    help="with --breakdown: one more fluss run under cProfile in the workers")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")

    work = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    timing = work / "timing"
    timing.mkdir()
    cluster = EmbeddedProcesses(work / "cluster", tablets=2).start()
    spark = None
    try:
        table = "bench.orders"
        with FlussConnection(cluster.bootstrap_servers) as conn:
            t0 = time.perf_counter()
            load_table(conn, table, args.rows, args.buckets)
            print(f"loaded {args.rows} rows into {args.buckets} buckets in "
                  f"{time.perf_counter() - t0:.1f}s")
            spark = local_spark("bench-fluss")
            register(spark)
            spark.dataSource.register(MemoryBatchesSource)
            spark.dataSource.register(TimedFlussSource)

            def fluss_reader(fmt="fluss"):
                return (spark.readStream.format(fmt)
                        .option("bootstrap.servers", cluster.bootstrap_servers)
                        .option("table", table)
                        .option("scan.batch.bytes", str(args.batch_bytes)))

            fluss_df = fluss_reader().load()
            schema = fluss_df.schema
            target = to_arrow_schema(schema, timezone="UTC")
            rows, moved = export_snapshot(conn, table, target, work / "arrow", work / "pq",
                                          args.batch_bytes)
        if rows != args.rows:
            raise RowCountError(f"the snapshot holds {rows} rows, expected {args.rows}")
        parquet_rows = sum(pq.ParquetFile(p).metadata.num_rows for p in (work / "pq").iterdir())
        if parquet_rows != rows:
            raise RowCountError(f"the parquet copy holds {parquet_rows} rows, expected {rows}")

        def memory_reader():
            return (spark.readStream.format("bench_memory").option("dir", str(work / "arrow"))
                    .schema(schema))

        memory_df = memory_reader().load()
        cols_df = fluss_reader().option("columns", "id,amount").load()
        meter = CpuMeter([p["pid"] for p in cluster.processes()], _jvm_pid(spark))

        def one(name: str, sink: str, tag: str) -> dict:
            out, ck = work / "out" / tag, work / "ck" / tag
            c0 = meter.sample()
            if name == "parquet":
                r = run_batch(spark, work / "pq", sink, out, rows)
            else:
                df = {"fluss": fluss_df, "ceiling": memory_df, "fluss-cols": cols_df}[name]
                r = run_stream(spark, df, sink, out, ck, rows)
            c1 = meter.sample()
            r["cpu_cluster"], r["cpu_spark"] = c1[0] - c0[0], c1[1] - c0[1]
            r["wall"] = c1[2] - c0[2]
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(ck, ignore_errors=True)
            return r

        sources = {"noop": ["fluss", "ceiling", "parquet", "fluss-cols"],
                   "parquet": ["fluss", "ceiling", "parquet"]}
        runs: dict[tuple[str, str], list[dict]] = {}
        for sink in ("noop", "parquet"):
            for w in range(args.warmup):
                for name in sources[sink]:
                    one(name, sink, f"warmup-{name}-{sink}-{w}")
            for i in range(args.repeat):
                order = sources[sink] if i % 2 == 0 else list(reversed(sources[sink]))
                for name in order:
                    runs.setdefault((name, sink), []).append(one(name, sink, f"{name}-{sink}-{i}"))
                f, c = runs[("fluss", sink)][-1], runs[("ceiling", sink)][-1]
                print(f"  {sink:<8}repeat {i}: order {','.join(order)}; fluss {f['whole']:.2f}s, "
                      f"ceiling {c['whole']:.2f}s, paired {c['whole'] / f['whole']:.2f}",
                      flush=True)

        print(f"\n{rows} snapshot rows (every run checked), {args.buckets} buckets, local[2], "
              f"{args.repeat} paired repeats (+{args.warmup} warm-up), "
              f"load average now {os.getloadavg()[0]:.2f}")
        print("seconds and rows/s: min / median / max; streaming = micro-batches that read "
              "rows, exec = their addBatch")
        print(f"{'source':<12}{'sink':<9}{'seconds':>22}{'rows/s (median)':>17}"
              f"{'exec seconds':>22}")
        for sink in ("noop", "parquet"):
            for name in sources[sink]:
                rs = runs[(name, sink)]
                whole = [r["whole"] for r in rs]
                line = (f"{name:<12}{sink:<9}{fmt3(whole):>22}"
                        f"{rows / statistics.median(whole):>17,.0f}")
                if name != "parquet":
                    line += f"{fmt3([r['exec'] for r in rs]):>22}"
                print(line)

        print("\npaired ratios per repeat (throughput, = ceiling s / fluss s; < 1: fluss slower)")
        print(f"{'ratio':<36}{'sink':<9}{'min / median / max':>22}   per repeat")
        pairs = [("fluss / ceiling", "fluss", "ceiling", "whole"),
                 ("fluss / ceiling, exec", "fluss", "ceiling", "exec"),
                 ("fluss / spark.read.parquet", "fluss", "parquet", "whole"),
                 ("ceiling / spark.read.parquet", "ceiling", "parquet", "whole")]
        for sink in ("noop", "parquet"):
            for label, a, b, key in pairs:
                xs = [rb[key] / ra[key] for ra, rb in zip(runs[(a, sink)], runs[(b, sink)])]
                print(f"{label:<36}{sink:<9}{fmt3(xs):>22}   {' '.join(f'{x:.2f}' for x in xs)}")
        xs = [f["exec"] / c["exec"]
              for f, c in zip(runs[("fluss", "noop")], runs[("fluss-cols", "noop")])]
        print(f"{'fluss-cols speed-up vs fluss, exec':<36}{'noop':<9}{fmt3(xs):>22}   "
              f"{' '.join(f'{x:.2f}' for x in xs)}")

        # The physical bound of a networked source on this machine: the snapshot pages' bytes
        # cross a loopback socket, copied by the kernel on both sides, on the same 2 cores.
        loop = [loopback_s(moved) for _ in range(3)]
        gap = [f["exec"] - c["exec"]
               for f, c in zip(runs[("fluss", "noop")], runs[("ceiling", "noop")])]
        print(f"\nloopback socket moving the {moved / 1e6:.0f} MB of snapshot pages from one "
              f"process to another: {fmt3(loop)} s; fluss - ceiling, exec, noop: {fmt3(gap)} s")

        if args.breakdown:
            print_breakdown(runs, args.repeat)
            print("\nCPU seconds during each run (whole query incl. start-up), min / median / max:")
            print(f"{'source':<12}{'sink':<9}{'wall s':>22}{'tablet+coord+zk':>22}"
                  f"{'Spark JVM+workers':>22}")
            for sink in ("noop", "parquet"):
                for name in sources[sink]:
                    rs = runs[(name, sink)]
                    print(f"{name:<12}{sink:<9}{fmt3([r['wall'] for r in rs]):>22}"
                          f"{fmt3([r['cpu_cluster'] for r in rs]):>22}"
                          f"{fmt3([r['cpu_spark'] for r in rs]):>22}")
            timed_breakdown(spark, work, timing, fluss_reader, memory_reader, rows, args)
        return 0
    finally:
        if spark is not None:
            spark.stop()
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


def timed_breakdown(spark, work: Path, timing: Path, fluss_reader, memory_reader, rows: int,
                    args) -> None:
    """Extra paired noop runs with both sources' read() wrapped alike: per-task timings."""
    def run(name, tag, profile=False):
        if name == "fluss":
            df = (fluss_reader("bench_fluss_timed").option("bench.timing", str(timing))
                  .option("bench.tag", tag)
                  .option("bench.profile", "true" if profile else "false").load())
        else:
            df = (memory_reader().option("bench.timing", str(timing)).option("bench.tag", tag)
                  .load())
        r = run_stream(spark, df, "noop", work / "out" / tag, work / "ck" / tag, rows)
        tasks = []
        for p in timing.glob(f"{tag}-*.json"):
            tasks.append(json.loads(p.read_text()))
        if sum(t["rows"] for t in tasks) != rows:
            raise RowCountError(f"{tag}: the read() timings cover "
                                f"{sum(t['rows'] for t in tasks)} rows, expected {rows}")
        return r, tasks

    # one uncounted pair: the wrapped sources' first use
    run("fluss", "tw-fluss"), run("ceiling", "tw-ceiling")
    rep: dict[str, list] = {"fluss": [], "ceiling": []}
    for i in range(args.repeat):
        for name in (("fluss", "ceiling") if i % 2 == 0 else ("ceiling", "fluss")):
            rep[name].append(run(name, f"t-{name}-{i}"))
    print(f"\n== read() tasks, noop sink, {args.repeat} extra paired runs with both sources "
          "wrapped alike ==")
    print("per task (one bucket each): wall = first next() to exhaustion; produce = inside the "
          "source's generator;\nhandoff = between yields (Spark's worker serialising and sending "
          "the batch); cpu = the worker process's CPU during the task")
    print(f"{'source':<9}{'repeat':>7}{'exec s':>8}{'tasks':>6}{'batches':>8}{'wall sum':>10}"
          f"{'wall max':>10}{'produce':>9}{'handoff':>9}{'cpu':>8}{'first':>8}")
    for name in ("fluss", "ceiling"):
        for i, (r, tasks) in enumerate(rep[name]):
            print(f"{name:<9}{i:>7}{r['exec']:>8.2f}{len(tasks):>6}"
                  f"{sum(t['batches'] for t in tasks):>8}"
                  f"{sum(t['wall'] for t in tasks):>10.2f}{max(t['wall'] for t in tasks):>10.2f}"
                  f"{sum(t['produce'] for t in tasks):>9.2f}"
                  f"{sum(t['handoff'] for t in tasks):>9.2f}"
                  f"{sum(t['cpu'] for t in tasks):>8.2f}"
                  f"{max(t['first'] for t in tasks):>8.2f}")
    xs = [c[0]["exec"] / f[0]["exec"] for f, c in zip(rep["fluss"], rep["ceiling"])]
    print(f"paired exec ratio of these wrapped runs (ceiling / fluss): {fmt3(xs)}")
    fl = [sum(t["produce"] for t in tasks) for _, tasks in rep["fluss"]]
    ce = [sum(t["produce"] for t in tasks) for _, tasks in rep["ceiling"]]
    fh = [sum(t["handoff"] for t in tasks) for _, tasks in rep["fluss"]]
    ch = [sum(t["handoff"] for t in tasks) for _, tasks in rep["ceiling"]]
    print(f"produce, summed over tasks (s): fluss {fmt3(fl)}, ceiling {fmt3(ce)}")
    print(f"handoff, summed over tasks (s): fluss {fmt3(fh)}, ceiling {fmt3(ch)}")

    if args.profile:
        run("fluss", "p-fluss", profile=True)
        profs = [str(p) for p in timing.glob("p-fluss-*.prof")]
        print(f"\n== cProfile of the fluss read() generators ({len(profs)} tasks, inside "
              "next() only), top 25 by internal time ==")
        st = pstats.Stats(*profs, stream=sys.stdout)
        st.sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    sys.exit(main())
