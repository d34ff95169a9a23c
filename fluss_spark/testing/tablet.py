"""Test helpers for tablet servers: a process runner and a small coordinator+tablets cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pyarrow as pa

from fluss_spark.transport.client import RpcConnection
from fluss_spark.metadata.store import MetadataStore
from fluss_spark.protocol.arrow_ipc import serialize_schema
from fluss_spark.protocol.api import ApiKey
from fluss_spark.testing.coordinator import CoordinatorProcess, call_until_leader
from fluss_spark.local.ports import wait_until
from fluss_spark.local.server_process import ServerProcess

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


class TabletProcess(ServerProcess):
    """``python -m fluss_spark.server tablet ...`` as a child process (restartable, killable)."""

    def __init__(self, zk_address: str, base_dir: str | Path, *, server_id: int = 0,
                 remote_data_dir: str | Path | None = None, options: Sequence[str] = (),
                 port: int = 0):
        self.base_dir = Path(base_dir)
        super().__init__("tablet", zk_address, server_id=server_id, port=port, options=options,
                         data_dir=self.base_dir / f"tablet-{server_id}",
                         remote_data_dir=remote_data_dir or self.base_dir / "remote",
                         ready_file=self.base_dir / f"tablet-{server_id}.ready",
                         log_path=self.base_dir / f"tablet-{server_id}.log")

    def start(self, timeout_s: float = 60.0) -> "TabletProcess":
        super().start(timeout_s)
        return self

    def connection(self, timeout_s: float = 30.0) -> RpcConnection:
        assert self.port is not None, "the tablet process has not been started"
        return RpcConnection(self.host, self.port, timeout_s=timeout_s)


class TabletCluster:
    """A coordinator process and tablet processes sharing one ZooKeeper chroot and snapshot
    store; tables get the two-column ``SCHEMA`` (id BIGINT, name STRING)."""

    def __init__(self, zk_address: str, base: Path, tablets: int = 1, options=()):
        self.zk_address = zk_address
        self.remote = base / "remote"
        self.coordinator = CoordinatorProcess(zk_address, base / "coord",
                                              remote_data_dir=self.remote).start()
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
