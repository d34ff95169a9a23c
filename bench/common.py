"""What the benchmark scripts share: their argument parser, cProfile, the local SparkSession, the
AvailableNow query and the ceiling data source (``bench/`` is each script's directory)."""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark import cloudpickle  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.datasource import (DataSource, DataSourceStreamReader,  # noqa: E402
                                    InputPartition)
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow  # noqa: E402


def compile_package() -> None:
    """Write fluss_spark's bytecode beside its sources, as an installed wheel holds it. Each
    query's driver-side Python process and each new Spark worker imports the package afresh;
    with ``PYTHONDONTWRITEBYTECODE`` set (or a read-only checkout) every one of them would first
    compile its ~200 modules (~0.1 s a process here), a cost an installed package never pays and
    the ceiling's few lines hardly do."""
    import compileall

    import fluss_spark
    compileall.compile_dir(os.path.dirname(fluss_spark.__file__), quiet=1)


compile_package()

# Spark's Python workers cannot import this module (bench/ is on no path of theirs): the data
# sources and functions defined here travel by value, as those of a script's __main__ do.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def parser(doc: str, **defaults: Any) -> argparse.ArgumentParser:
    """An ArgumentParser described by ``doc``'s first line, with a ``--name`` option (underscores
    become dashes) per keyword, typed by its default."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    for name, default in defaults.items():
        ap.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    return ap


def add_profile(ap: argparse.ArgumentParser, what: str) -> None:
    """``--profile`` (then ``what`` runs under cProfile) and ``--profile-top`` (entries shown)."""
    ap.add_argument("--profile", action="store_true", help=f"then profile {what}")
    ap.add_argument("--profile-top", type=int, default=15)


def profiled(top: int, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """Run ``fn(*args, **kwargs)`` under cProfile; its ``top`` entries by own time, as text."""
    prof = cProfile.Profile()
    prof.enable()
    fn(*args, **kwargs)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def print_profiles(what: str, runs: dict[str, Callable[[], Any]], top: int,
                   before: Callable[[], Any] = lambda: None) -> None:
    """Each of ``runs`` once under cProfile (``before`` it, unprofiled), printing its ``top``
    entries by own time."""
    for name, run in runs.items():
        before()
        print(f"\n=== cProfile of {what}, {name} (by own time)")
        print(profiled(top, run))


def make_rows(lo: int, hi: int) -> pa.Table:
    """Rows ``id`` in [lo, hi), ``v`` = "value-<id>", ``amount`` = id / 2."""
    ids = pa.array(range(lo, hi), pa.int64())
    return pa.table({"id": ids,
                     "v": pc.binary_join_element_wise("value-", pc.cast(ids, pa.string()), ""),
                     "amount": pc.multiply(pc.cast(ids, pa.float64()), 0.5)})


def local_spark(app: str, conf: dict[str, str] | None = None) -> SparkSession:
    """A local[2] SparkSession without UI or console progress, 2 shuffle partitions, UTC, that
    logs errors only; ``conf`` adds settings."""
    builder = (SparkSession.builder.master("local[2]").appName(app)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def available_now(df: Any, checkpoint: Path, sink: str = "noop", path: Path | None = None,
                  what: str | None = None) -> tuple[Any, float]:
    """Run ``df`` into ``sink`` with Trigger.AvailableNow; (the finished query, wall s from
    ``start()`` to termination). The query's failure is raised, prefixed with ``what``."""
    writer = (df.writeStream.format(sink).trigger(availableNow=True)
              .option("checkpointLocation", str(checkpoint)))
    if path is not None:
        writer = writer.option("path", str(path))
    t0 = time.perf_counter()
    q = writer.start()
    q.awaitTermination()
    wall = time.perf_counter() - t0
    if q.exception():
        raise RuntimeError(f"{what}: {q.exception()}" if what else str(q.exception()))
    return q, wall


def noop_read(df: Any, checkpoint: Path) -> tuple[float, float, int]:
    """One AvailableNow query to the noop sink: (wall s from start() to termination, s of the
    micro-batches that read rows, rows read)."""
    q, wall = available_now(df, checkpoint)
    busy = [p for p in q.recentProgress if p["numInputRows"]]
    return (wall, sum(p["durationMs"]["triggerExecution"] for p in busy) / 1000.0,
            sum(p["numInputRows"] for p in busy))


# -- the ceiling: a minimal Python Data Source over pre-built Arrow batches ---------------------
class _FilePartition(InputPartition):
    """One bucket's batches, as one Arrow IPC file."""

    def __init__(self, path: str):
        self.path = path


class ArrowFilesSource(DataSource):
    """Yields pre-built Arrow batches, one IPC file (= one partition) per bucket, from the
    directory of option ``dir``: what Spark's Python Data Source API itself allows."""

    @classmethod
    def name(cls):
        return "bench_arrow_files"

    def schema(self):
        return self.options["schema"]

    def streamReader(self, schema):
        return ArrowFilesReader(self.options["dir"], schema)


class ArrowFilesReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
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
