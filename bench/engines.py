"""Both engines for a benchmark: one ZooKeeper, the embedded cluster and Apache Fluss, in a
temporary directory, started together and stopped together."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Sequence

from common import local_spark, make_rows  # bench/common.py
from fluss_spark.client import FlussConnection
from fluss_spark.local.apache_fluss import ApacheFlussProcesses
from fluss_spark.local.embedded import EmbeddedProcesses
from fluss_spark.local.zookeeper import ZooKeeperProcess
from fluss_spark.testing.apache_fluss import PyFluss

EMBEDDED, APACHE = "embedded", "apache-fluss"


class Engines:
    """ZooKeeper + the embedded cluster + Apache Fluss; ``servers`` by engine name."""

    def __init__(self, prefix: str, tablets: int, apache_options: dict[str, str] | None = None):
        self.work = Path(tempfile.mkdtemp(prefix=prefix))
        self.zk = ZooKeeperProcess(self.work / "zookeeper")
        self.embedded: EmbeddedProcesses | None = None
        self.apache: ApacheFlussProcesses | None = None
        self.spark: Any = None
        try:
            self.zk.start()
            t0 = time.perf_counter()
            self.embedded = EmbeddedProcesses(
                self.work / "embedded", tablets=tablets,
                zookeeper=f"{self.zk.address}/bench-embedded-{uuid.uuid4().hex[:8]}")
            self.embedded.start()
            t1 = time.perf_counter()
            self.apache = ApacheFlussProcesses(
                self.work / "apache", tablets=tablets, zookeeper=self.zk.address,
                options={"zookeeper.path.root": f"/bench-apache-{uuid.uuid4().hex[:8]}",
                         **(apache_options or {})})
            self.apache.start()
            t2 = time.perf_counter()
        except BaseException:
            self.stop()
            raise
        print(f"started embedded in {t1 - t0:.1f}s, Apache Fluss {self.apache.version} in "
              f"{t2 - t1:.1f}s ({tablets} tablet server(s) each)")
        self.servers = {EMBEDDED: self.embedded.bootstrap_servers,
                        APACHE: self.apache.bootstrap_servers}

    def load(self, table: str, schema: str, rows: int, buckets: int, chunk: int,
             primary_key: Sequence[str] = ()) -> None:
        """Create ``table`` in both engines and write ``common.make_rows`` [0, rows) in chunks of
        ``chunk`` rows: appended to a log table, upserted into a primary-key table (then, in
        the embedded one, snapshotted). The write times are printed, not measured."""
        for engine, write in ((EMBEDDED, _write_embedded), (APACHE, _write_apache)):
            t0 = time.perf_counter()
            write(self.servers[engine], table, schema, buckets, primary_key,
                  [(lo, min(rows, lo + chunk)) for lo in range(0, rows, chunk)])
            secs = time.perf_counter() - t0
            print(f"wrote {rows:,} rows into {engine} in {secs:.1f}s ({rows / secs:,.0f} rows/s)")

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
                    primary_key: Sequence[str], chunks: list[tuple[int, int]]) -> None:
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
                  primary_key: Sequence[str], chunks: list[tuple[int, int]]) -> None:
    with PyFluss(servers) as pf:
        pf.create_table(table, schema, primary_key=primary_key, buckets=buckets)
        write = pf.upsert if primary_key else pf.append
        for lo, hi in chunks:
            # PyFluss takes rows (tuples in schema order); pyfluss batches them itself.
            write(table, make_rows(lo, hi).to_pylist())
