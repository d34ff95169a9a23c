"""Test helpers for the coordinator: a fake clock, an in-process lease/GC harness, a process
runner."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Sequence

from fluss_spark.testing.clock import FakeClock
from fluss_spark.metadata.layout import SnapshotRecord
from fluss_spark.metadata.store import MetadataStore
from fluss_spark.local.server_process import ServerProcess
from fluss_spark.retry import Backoff, retry
from fluss_spark.transport.client import RpcConnection

__all__ = ["CoordinatorProcess", "LeaseHarness", "call_until_leader", "place_snapshot_file"]


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
        self.dropped_tables: set[int] = set()
        self.dropped_partitions: set[tuple[int, int]] = set()
        self.default_retained = num_retained
        self.store = MetadataStore(zk_address).start()
        self._build()

    def _build(self) -> None:
        from fluss_spark.server.coordinator.leases import LeaseManager
        from fluss_spark.server.coordinator.snapshots import SnapshotRegistry
        lock = threading.RLock()
        self.registry = SnapshotRegistry(
            self.store, num_retained=lambda t: self.retained.get(t, self.default_retained),
            store_root=str(self.snapshot_dir), lock=lock)
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
        from fluss_spark.server.coordinator.recovery import recover
        recover(self.registry, self.leases, table_exists=lambda t: t not in self.dropped_tables,
                partition_exists=lambda t, p: (t, p) not in self.dropped_partitions)

    def drop_table(self, table_id: int) -> None:
        """What dropping a table does to its pins and snapshots (the coordinator's order)."""
        self.dropped_tables.add(table_id)
        self.leases.drop_table_pins(table_id)
        self.registry.drop_table(table_id)

    def drop_partition(self, table_id: int, partition_id: int) -> None:
        """What dropping a partition does to its pins and snapshots (the coordinator's order)."""
        self.dropped_partitions.add((table_id, partition_id))
        self.leases.drop_partition_pins(table_id, partition_id)
        self.registry.drop_partition(table_id, partition_id)

    def file_of(self, table_id: int, bucket: int, snapshot_id: int,
                partition_id: int | None = None) -> Path:
        table_dir = self.snapshot_dir / str(table_id)
        if partition_id is not None:
            table_dir = table_dir / f"p{partition_id}"
        return table_dir / str(bucket) / f"snap-{snapshot_id}.arrow"

    def snapshot(self, table_id: int, bucket: int, snapshot_id: int,
                 partition_id: int | None = None) -> SnapshotRecord:
        """Write a snapshot file and commit it (retention runs as on COMMIT_KV_SNAPSHOT)."""
        f = self.file_of(table_id, bucket, snapshot_id, partition_id)
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"snapshot %d" % snapshot_id)
        rec = SnapshotRecord(table_id=table_id, bucket=bucket, snapshot_id=snapshot_id,
                             path=str(f), log_offset=snapshot_id * 10, row_count=snapshot_id,
                             partition_id=partition_id)
        self.registry.commit(rec)
        return rec

    def alive(self, table_id: int, bucket: int, snapshot_id: int,
              partition_id: int | None = None) -> bool:
        """Whether the snapshot's file AND znode both still exist."""
        return (self.file_of(table_id, bucket, snapshot_id, partition_id).exists()
                and self.store.snapshot(table_id, bucket, snapshot_id, partition_id) is not None)

    def stored_ids(self, table_id: int, bucket: int) -> list[int]:
        return self.store.snapshot_ids(table_id, bucket)

    def close(self) -> None:
        self.leases.stop_expiry()
        self.store.close()


def place_snapshot_file(remote_data_dir: str | Path, table_id: int, bucket: int,
                        snapshot_id: int) -> str:
    """Write a stand-in snapshot file where a tablet would, for tests that commit snapshots by
    hand; returns its path (the coordinator registers only files at their own location)."""
    from fluss_spark.server.snapshot_store import snapshot_location
    path = Path(snapshot_location(str(remote_data_dir), table_id, bucket, snapshot_id))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"snapshot %d" % snapshot_id)
    return str(path)


class CoordinatorProcess(ServerProcess):
    """``python -m fluss_spark.server coordinator ...`` as a child process."""

    def __init__(self, zk_address: str, base_dir: str | Path, *, port: int = 0,
                 options: Sequence[str] = (), disable_apis: Sequence[str] = (),
                 remote_data_dir: str | Path | None = None):
        self.base_dir = Path(base_dir)
        super().__init__("coordinator", zk_address, port=port, options=options,
                         disabled_apis=disable_apis, data_dir=self.base_dir / "data",
                         remote_data_dir=remote_data_dir or self.base_dir / "remote",
                         ready_file=self.base_dir / "coordinator.ready",
                         log_path=self.base_dir / "coordinator.log")

    @property
    def disable_apis(self) -> list[str]:
        return self.disabled_apis

    def start(self, timeout_s: float = 30.0) -> "CoordinatorProcess":
        super().start(timeout_s)
        return self

    def connection(self) -> RpcConnection:
        assert self.port is not None, "the coordinator process has not been started"
        return RpcConnection(self.host, self.port, timeout_s=30)


def call_until_leader(conn: RpcConnection, api_key, body: dict, timeout_s: float = 30.0):
    """A raw call, retrying retriable errors (NotCoordinatorLeader, NetworkError) until
    ``timeout_s``."""
    return retry(lambda: conn.call_raw(api_key, body), timeout_s=timeout_s,
                 backoff=Backoff(0.2, 0.2))
