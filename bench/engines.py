"""Both engines for a benchmark (or one of them): one ZooKeeper, the embedded cluster and Apache
Fluss, in a temporary directory, started together and stopped together."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Iterable, Sequence

from common import local_spark, make_rows  # bench/common.py
from fluss_spark.client import FlussConnection
from fluss_spark.local.apache_fluss import ApacheFlussProcesses
from fluss_spark.local.embedded import EmbeddedProcesses
from fluss_spark.local.zookeeper import ZooKeeperProcess
from fluss_spark.testing.apache_fluss import PyFluss

EMBEDDED, APACHE = "embedded", "apache-fluss"


class Engines:
    """ZooKeeper + the embedded cluster + Apache Fluss (or only the ``engines`` named);
    ``servers`` by engine name, ``zk_roots``: the ZooKeeper path each engine keeps its data
    under (the embedded cluster's chroot, Apache Fluss's ``zookeeper.path.root``)."""

    def __init__(self, prefix: str, tablets: int, apache_options: dict[str, str] | None = None,
                 engines: Sequence[str] = (EMBEDDED, APACHE)):
        unknown = sorted(set(engines) - {EMBEDDED, APACHE})
        if unknown or not engines:
            raise ValueError(f"unknown engine(s) {', '.join(unknown) or '(none given)'}: use "
                             f"{EMBEDDED} and/or {APACHE}")
        self.work = Path(tempfile.mkdtemp(prefix=prefix))
        self.zk = ZooKeeperProcess(self.work / "zookeeper")
        self.embedded: EmbeddedProcesses | None = None
        self.apache: ApacheFlussProcesses | None = None
        self.spark: Any = None
        self.servers: dict[str, str] = {}
        self.zk_roots: dict[str, str] = {}
        started = []
        try:
            self.zk.start()
            if EMBEDDED in engines:
                t0 = time.perf_counter()
                self.zk_roots[EMBEDDED] = f"/bench-embedded-{uuid.uuid4().hex[:8]}"
                self.embedded = EmbeddedProcesses(
                    self.work / "embedded", tablets=tablets,
                    zookeeper=f"{self.zk.address}{self.zk_roots[EMBEDDED]}")
                self.embedded.start()
                self.servers[EMBEDDED] = self.embedded.bootstrap_servers
                started.append(f"embedded in {time.perf_counter() - t0:.1f}s")
            if APACHE in engines:
                t0 = time.perf_counter()
                self.zk_roots[APACHE] = f"/bench-apache-{uuid.uuid4().hex[:8]}"
                self.apache = ApacheFlussProcesses(
                    self.work / "apache", tablets=tablets, zookeeper=self.zk.address,
                    options={"zookeeper.path.root": self.zk_roots[APACHE],
                             **(apache_options or {})})
                self.apache.start()
                self.servers[APACHE] = self.apache.bootstrap_servers
                started.append(f"Apache Fluss {self.apache.version} in "
                               f"{time.perf_counter() - t0:.1f}s")
        except BaseException:
            self.stop()
            raise
        print(f"started {', '.join(started)} ({tablets} tablet server(s) each)")

    def load(self, table: str, schema: str, rows: int, buckets: int, chunk: int,
             primary_key: Sequence[str] = ()) -> dict[str, float]:
        """Create ``table`` in every engine and write ``common.make_rows`` [0, rows) in chunks
        of ``chunk`` rows (never all rows at once): appended to a log table, upserted into a
        primary-key table (then, in the embedded one, snapshotted). The write times are
        printed, and returned by engine; they are not what the benchmarks measure."""
        secs: dict[str, float] = {}
        for engine, write in ((EMBEDDED, _write_embedded), (APACHE, _write_apache)):
            if engine not in self.servers:
                continue
            t0 = time.perf_counter()
            write(self.servers[engine], table, schema, buckets, primary_key,
                  ((lo, min(rows, lo + chunk)) for lo in range(0, rows, chunk)))
            secs[engine] = time.perf_counter() - t0
            print(f"wrote {rows:,} rows into {engine} in {secs[engine]:.1f}s "
                  f"({rows / secs[engine]:,.0f} rows/s)")
        return secs

    def start_spark(self, app: str) -> Any:
        """The benchmark's SparkSession (``common.local_spark``), stopped first by ``stop``."""
        self.spark = local_spark(app)
        return self.spark

    def stop(self) -> None:
        """Stop Spark and every process (each even if another fails); remove the directory."""
        for c in (self.spark, self.apache, self.embedded, self.zk):
            if c is not None:
                try:
                    c.stop()
                except Exception as exc:  # noqa: BLE001 - keep stopping the others
                    print(f"stopping {type(c).__name__}: {exc}", file=sys.stderr)
        shutil.rmtree(self.work, ignore_errors=True)


def _write_embedded(servers: str, table: str, schema: str, buckets: int,
                    primary_key: Sequence[str], chunks: Iterable[tuple[int, int]]) -> None:
    with FlussConnection(servers) as conn:
        admin = conn.admin()
        admin.create_table(table, schema, primary_key=primary_key, num_buckets=buckets)
        writer = conn.writer(table)
        write = writer.upsert if primary_key else writer.append
        for lo, hi in chunks:
            write(make_rows(lo, hi))
        if primary_key:
            admin.trigger_kv_snapshot(table)


def _write_apache(servers: str, table: str, schema: str, buckets: int,
                  primary_key: Sequence[str], chunks: Iterable[tuple[int, int]]) -> None:
    with PyFluss(servers) as pf:
        pf.create_table(table, schema, primary_key=primary_key, buckets=buckets)
        write = pf.upsert if primary_key else pf.append
        for lo, hi in chunks:
            # PyFluss takes rows (tuples in schema order); pyfluss batches them itself.
            write(table, make_rows(lo, hi).to_pylist())
