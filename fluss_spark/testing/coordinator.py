"""Test helpers for the coordinator: a fake clock, an in-process lease/GC harness, a process runner."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from fluss_spark.client.rpc import RpcConnection
from fluss_spark.errors import FlussError
from fluss_spark.metadata.layout import SnapshotRecord
from fluss_spark.metadata.store import MetadataStore
from fluss_spark.testing.ports import wait_until


class FakeClock:
    """A millisecond clock that only moves when a test advances it."""

    def __init__(self, now_ms: int = 1_700_000_000_000):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


class LeaseHarness:
    """A SnapshotRegistry and a LeaseManager wired as the coordinator wires them, on a real store.

    Snapshots are small real files under ``snapshot_dir``; ``restart`` builds fresh objects
    over the same ZooKeeper chroot and recovers the way a new coordinator does.
    """

    def __init__(self, zk_address: str, snapshot_dir: str | Path, *, num_retained: int = 2,
                 clock: FakeClock | None = None):
        self.zk_address = zk_address
        self.snapshot_dir = Path(snapshot_dir)
        self.clock = clock or FakeClock()
        self.retained: dict[int, int] = {}
        self.default_retained = num_retained
        self.store = MetadataStore(zk_address).start()
        self._build()

    def _build(self) -> None:
        from fluss_spark.server.coordinator.leases import LeaseManager
        from fluss_spark.server.coordinator.snapshots import SnapshotRegistry
        lock = threading.RLock()
        self.registry = SnapshotRegistry(
            self.store, num_retained=lambda t: self.retained.get(t, self.default_retained),
            lock=lock)
        self.leases = LeaseManager(self.store, snapshot_exists=self.registry.exists,
                                   on_unpinned=self.registry.collect, clock=self.clock,
                                   lock=lock)
        self.registry.is_pinned = self.leases.is_pinned

    def restart(self) -> None:
        """Drop every in-memory object and recover from ZooKeeper, in the coordinator's order."""
        self.leases.stop_expiry()
        self.store.close()
        self.store = MetadataStore(self.zk_address).start()
        self._build()
        self.registry.load()
        self.leases.load()
        self.leases.expire_once()
        self.registry.gc_all()

    def file_of(self, table_id: int, bucket: int, snapshot_id: int) -> Path:
        return self.snapshot_dir / str(table_id) / str(bucket) / f"snap-{snapshot_id}.arrow"

    def snapshot(self, table_id: int, bucket: int, snapshot_id: int) -> SnapshotRecord:
        """Write a snapshot file and commit it (retention runs as on COMMIT_KV_SNAPSHOT)."""
        f = self.file_of(table_id, bucket, snapshot_id)
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"snapshot %d" % snapshot_id)
        rec = SnapshotRecord(table_id=table_id, bucket=bucket, snapshot_id=snapshot_id,
                             path=str(f), log_offset=snapshot_id * 10, row_count=snapshot_id)
        self.registry.commit(rec)
        return rec

    def alive(self, table_id: int, bucket: int, snapshot_id: int) -> bool:
        """Whether the snapshot's file AND znode both still exist."""
        return (self.file_of(table_id, bucket, snapshot_id).exists()
                and self.store.snapshot(table_id, bucket, snapshot_id) is not None)

    def stored_ids(self, table_id: int, bucket: int) -> list[int]:
        return self.store.snapshot_ids(table_id, bucket)

    def close(self) -> None:
        self.leases.stop_expiry()
        self.store.close()


class CoordinatorProcess:
    """``python -m fluss_spark.server coordinator ...`` as a child process."""

    def __init__(self, zk_address: str, base_dir: str | Path, *, port: int = 0,
                 options: list[str] = (), disable_apis: list[str] = ()):
        self.zk_address = zk_address
        self.base_dir = Path(base_dir)
        self.port = port
        self.options = list(options)
        self.disable_apis = list(disable_apis)
        self.proc: subprocess.Popen | None = None
        self.host = "127.0.0.1"

    @property
    def log_path(self) -> Path:
        return self.base_dir / "coordinator.log"

    def start(self, timeout_s: float = 30.0) -> "CoordinatorProcess":
        ready = self.base_dir / "coordinator.ready"
        ready.unlink(missing_ok=True)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "fluss_spark.server", "coordinator",
               "--zookeeper", self.zk_address, "--port", str(self.port),
               "--data-dir", str(self.base_dir / "data"),
               "--remote-data-dir", str(self.base_dir / "remote"), "--ready-file", str(ready)]
        for o in self.options:
            cmd += ["--option", o]
        for a in self.disable_apis:
            cmd += ["--disable-api", a]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)

        def is_ready():
            if self.proc.poll() is not None:
                raise FlussError(f"coordinator exited with {self.proc.returncode}:\n{self.log()}")
            return ready.exists()

        wait_until(is_ready, timeout_s, "the coordinator's ready file")
        info = json.loads(ready.read_text())
        self.host, self.port = info["host"], info["port"]
        return self

    def connection(self) -> RpcConnection:
        return RpcConnection(self.host, self.port, timeout_s=30)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

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


def call_until_leader(conn: RpcConnection, api_key, body: dict, timeout_s: float = 30.0):
    """Call, retrying retriable errors (NotCoordinatorLeader, NetworkError) until ``timeout_s``."""
    from fluss_spark.errors import ApiError
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return conn.call(api_key, body)
        except ApiError as e:
            if not e.retriable or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
