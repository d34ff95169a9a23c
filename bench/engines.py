"""Both engines for a benchmark: one ZooKeeper, the embedded cluster and Apache Fluss, in a
temporary directory, started together and stopped together."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

from fluss_spark.local.apache_fluss import ApacheFlussProcesses
from fluss_spark.local.embedded import EmbeddedProcesses
from fluss_spark.local.zookeeper import ZooKeeperProcess

EMBEDDED, APACHE = "embedded", "apache-fluss"


class Engines:
    """ZooKeeper + the embedded cluster + Apache Fluss; ``servers`` by engine name."""

    def __init__(self, prefix: str, tablets: int, apache_options: dict[str, str] | None = None):
        self.work = Path(tempfile.mkdtemp(prefix=prefix))
        self.zk = ZooKeeperProcess(self.work / "zookeeper")
        self.embedded: EmbeddedProcesses | None = None
        self.apache: ApacheFlussProcesses | None = None
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

    def stop(self) -> None:
        """Stop every process (each even if another fails) and remove the directory."""
        for c in (self.apache, self.embedded, self.zk):
            if c is not None:
                try:
                    c.stop()
                except Exception as exc:  # noqa: BLE001 - keep stopping the others
                    print(f"stopping {type(c).__name__}: {exc}", file=sys.stderr)
        shutil.rmtree(self.work, ignore_errors=True)
