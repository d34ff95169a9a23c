"""Test helpers for tablet servers: a process runner and a small coordinator+tablets cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from fluss_spark.client.rpc import RpcConnection
from fluss_spark.errors import FlussError
from fluss_spark.metadata.store import MetadataStore
from fluss_spark.protocol.arrow_ipc import serialize_schema
from fluss_spark.protocol.api import ApiKey
from fluss_spark.testing.coordinator import CoordinatorProcess, call_until_leader
from fluss_spark.testing.ports import wait_until

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


class TabletProcess:
    """``python -m fluss_spark.server tablet ...`` as a child process (restartable, killable)."""

    def __init__(self, zk_address: str, base_dir: str | Path, *, server_id: int = 0,
                 remote_data_dir: str | Path | None = None, options: list[str] = (),
                 port: int = 0):
        self.zk_address = zk_address
        self.base_dir = Path(base_dir)
        self.server_id = server_id
        self.remote_data_dir = str(remote_data_dir or self.base_dir / "remote")
        self.options = list(options)
        self.port = port
        self.host = "127.0.0.1"
        self.proc: subprocess.Popen | None = None

    @property
    def log_path(self) -> Path:
        return self.base_dir / f"tablet-{self.server_id}.log"

    @property
    def data_dir(self) -> Path:
        return self.base_dir / f"tablet-{self.server_id}"

    def start(self, timeout_s: float = 60.0) -> "TabletProcess":
        self.base_dir.mkdir(parents=True, exist_ok=True)
        ready = self.base_dir / f"tablet-{self.server_id}.ready"
        ready.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "fluss_spark.server", "tablet", "--id", str(self.server_id),
               "--zookeeper", self.zk_address, "--port", str(self.port),
               "--data-dir", str(self.data_dir), "--remote-data-dir", self.remote_data_dir,
               "--ready-file", str(ready)]
        for o in self.options:
            cmd += ["--option", o]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)

        def is_ready():
            if self.proc.poll() is not None:
                raise FlussError(f"tablet server exited with {self.proc.returncode}:\n{self.log()}")
            return ready.exists()

        wait_until(is_ready, timeout_s, f"tablet server {self.server_id}'s ready file")
        info = json.loads(ready.read_text())
        self.host, self.port = info["host"], info["port"]
        return self

    def connection(self, timeout_s: float = 30.0) -> RpcConnection:
        return RpcConnection(self.host, self.port, timeout_s=timeout_s)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:] if self.log_path.exists() else ""

    def kill(self) -> None:
        """kill -9: no shutdown code runs."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout_s: float = 15.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()


class TabletCluster:
    """A coordinator process and tablet processes sharing one ZooKeeper chroot and snapshot
    store; tables get the two-column ``SCHEMA`` (id BIGINT, name STRING)."""

    def __init__(self, zk_address: str, base: Path, tablets: int = 1, options=()):
        self.zk_address = zk_address
        self.remote = base / "remote"
        self.coordinator = CoordinatorProcess(zk_address, base / "coord").start()
        self.tablets = [TabletProcess(zk_address, base, server_id=i, remote_data_dir=self.remote,
                                      options=list(options)).start() for i in range(tablets)]
        self.store = MetadataStore(zk_address).start()
        wait_until(lambda: len(self.store.tablets()) == tablets, 30, "tablet registration")
        self.coord = self.coordinator.connection()
        self.conns = [t.connection() for t in self.tablets]

    def create(self, name, *, pk=(), buckets=1, props=None) -> int:
        body = {"name": name, "schema": serialize_schema(SCHEMA), "primary_key": list(pk),
                "bucket_key": list(pk), "num_buckets": buckets, "properties": props or {},
                "ignore_if_exists": False}
        return call_until_leader(self.coord, ApiKey.CREATE_TABLE, body)["table_id"]

    def close(self):
        for c in self.conns:
            c.close()
        self.coord.close()
        for t in self.tablets:
            t.stop()
        self.coordinator.stop()
        self.store.close()

    def logs(self) -> str:
        return "\n".join(t.log() for t in self.tablets) + self.coordinator.log()
