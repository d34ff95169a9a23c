"""KV snapshot lease ids as a ZooKeeper holds them, watched from outside either engine.

Both engines keep one znode per lease under a ``leases/kv_snapshot`` path: this project's
coordinator under its chroot (``/fluss/leases/kv_snapshot``), Apache Fluss under its
``zookeeper.path.root``. Reading ZooKeeper directly sees a lease the moment it is stored, whichever
client made it.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from kazoo.client import KazooClient

from fluss_spark.metadata.layout import LEASES


class ZooKeeperLeases:
    """Lease ids under ``path`` of the ZooKeeper at ``hosts`` (``host:port[/chroot]``), polled
    every ``interval_s``: every id that appeared while it ran and was not there at its start is
    in ``seen``. Use as a context manager, or call ``close()``."""

    def __init__(self, hosts: str, path: str, interval_s: float = 0.05):
        self.path, self.interval_s = path.rstrip("/"), interval_s
        self.zk = KazooClient(hosts=hosts)
        self.zk.start(30)
        self.before = self.now()
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def now(self) -> set[str]:
        """The lease ids stored right now."""
        return set(self.zk.get_children(self.path)) if self.zk.exists(self.path) else set()

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                self.seen |= self.now() - self.before
                self.look(self.seen)
            except Exception:  # noqa: BLE001 - a lease removed while listing; the next look sees it
                pass
            self._stop.wait(self.interval_s)

    def look(self, lease_ids: set[str]) -> None:
        """Called on every poll with the ids seen so far; nothing here."""

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(5)
        self.zk.stop()
        self.zk.close()

    def __enter__(self) -> "ZooKeeperLeases":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class FlussLeases(ZooKeeperLeases):
    """The lease ids of an Apache Fluss cluster (``ApacheFlussProcesses``), in its ZooKeeper at
    ``<zookeeper.path.root>/leases/kv_snapshot``."""

    def __init__(self, apache_fluss, interval_s: float = 0.05):
        #: lease id -> the (table id, partition id) whose pins its record held while watched.
        self.partitions: dict[str, set[tuple[int, int]]] = {}
        root = apache_fluss.options["zookeeper.path.root"].rstrip("/")
        super().__init__(apache_fluss.zookeeper_address, f"{root}/leases/kv_snapshot",
                         interval_s)

    def look(self, lease_ids: set[str]) -> None:
        for lease_id in lease_ids & self.now():
            self.partitions.setdefault(lease_id, set()).update(self.pinned_partitions(lease_id))

    def pinned_partitions(self, lease_id: str) -> set[tuple[int, int]]:
        """The (table id, partition id) the lease pins now. Fluss 0.9.1 keeps a lease's expiry
        and, per table, the path of a JSON file in ``remote.data.dir`` in the znode (``{version,
        expiration_time, tables: [{table_id, lease_metadata_path}]}``); the file holds the
        table's pins (``{version, table_id, bucket_snapshots | partition_snapshots:
        [{partition_id, bucket_snapshots}]}``)."""
        data, _ = self.zk.get(f"{self.path}/{lease_id}")
        found = set()
        for table in json.loads(data).get("tables", []):
            path = table["lease_metadata_path"].removeprefix("file:")
            pins = json.loads(Path(path).read_bytes())
            found |= {(pins["table_id"], p["partition_id"])
                      for p in pins.get("partition_snapshots", [])}
        return found


class EmbeddedLeases(ZooKeeperLeases):
    """The lease ids of this project's cluster (``EmbeddedProcesses``), in ZooKeeper under its
    chroot."""

    def __init__(self, cluster, interval_s: float = 0.05):
        super().__init__(cluster.zookeeper_address, LEASES, interval_s)
