"""SnapshotRegistry: the KV snapshots registered in ZooKeeper, their retention and lease-aware
GC."""

from __future__ import annotations

import logging
import threading
from typing import Callable, Iterable

import pyarrow.fs as pafs

from fluss_spark.errors import InvalidRequest
from fluss_spark.metadata.layout import SnapshotRecord
from fluss_spark.metadata.lease_codec import NO_PARTITION
from fluss_spark.server.snapshot_store import is_within, resolve

log = logging.getLogger(__name__)

SnapshotKey = tuple[int, int, int]


def delete_path(path: str) -> None:
    """Delete a file or a directory tree at a local path or filesystem URI; absent is fine."""
    fs, p = resolve(path)
    info = fs.get_file_info(p)
    if info.type == pafs.FileType.NotFound:
        return
    if info.type == pafs.FileType.Directory:
        fs.delete_dir(p)
    else:
        fs.delete_file(p)


def join_path(base: str, *parts: object) -> str:
    return "/".join([base.rstrip("/")] + [str(p) for p in parts])


#: A bucket's place in a table: (partition id or None, bucket).
Address = tuple[int | None, int]


class SnapshotRegistry:
    """An in-memory mirror of the snapshot index plus retention and GC.

    The active coordinator is the only writer of snapshot znodes, so the mirror, loaded when
    it takes over, is authoritative; a miss is still checked against ZooKeeper. A snapshot
    that leaves its bucket's newest ``num_retained`` is deleted -- file first, then znode --
    only when no lease pins it (``is_pinned``); a pinned one waits until ``collect`` is told
    that its last pin went. ``lock`` is shared with the lease manager. Buckets of partitions
    are kept per (partition id, bucket), and pinned per partition
    (``is_pinned(table_id, bucket, snapshot_id, partition_id)``).
    """

    def __init__(self, store, *, num_retained: Callable[[int], int | None],
                 is_pinned: Callable[..., bool] = lambda t, b, s, p=None: False,
                 delete_files: Callable[[str], None] = delete_path,
                 store_root: str | None = None,
                 lock: threading.RLock | None = None):
        """``store_root``: the snapshot store; files outside it are never deleted."""
        self._store = store
        self._root = store_root
        self._num_retained = num_retained
        self.is_pinned = is_pinned
        self._delete_files = delete_files
        self.lock = lock or threading.RLock()
        self._snaps: dict[int, dict[Address, dict[int, SnapshotRecord]]] = {}

    def load(self) -> int:
        """Mirror every registered snapshot; layout v1 records are moved into the snapshot
        index first (the active coordinator is the only writer), so later recoveries read
        index pages only."""
        with self.lock:
            self._snaps = {}
            self._store.migrate_snapshots()
            records = self._store.all_snapshots()
            for rec in records:
                self._cache(rec)
            return len(records)

    # -- queries -----------------------------------------------------------------------------
    def exists(self, table_id: int, bucket: int, snapshot_id: int,
               partition_id: int | None = None) -> bool:
        with self.lock:
            if snapshot_id in self._snaps.get(table_id, {}).get((partition_id, bucket), {}):
                return True
            rec = self._store.snapshot(table_id, bucket, snapshot_id, partition_id)
            if rec is not None:
                self._cache(rec)
            return rec is not None

    def get(self, table_id: int, bucket: int, snapshot_id: int,
            partition_id: int | None = None) -> SnapshotRecord | None:
        with self.lock:
            return self._snaps.get(table_id, {}).get((partition_id, bucket), {}).get(snapshot_id)

    def find(self, table_id: int, bucket: int | None = None, latest_only: bool = False,
             partition_id: int | None = None) -> list[SnapshotRecord]:
        """Snapshots of a table (every partition of a partitioned one, or the given
        ``partition_id``'s; every bucket, or ``bucket``), by partition, bucket, snapshot id."""
        with self.lock:
            addresses = self._snaps.get(table_id, {})
            chosen = sorted((a for a in addresses
                             if (bucket is None or a[1] == bucket)
                             and (partition_id is None or a[0] == partition_id)),
                            key=lambda a: (-1 if a[0] is None else a[0], a[1]))
            out = []
            for a in chosen:
                ids = sorted(addresses[a])
                if latest_only:
                    ids = ids[-1:]
                out += [addresses[a][s] for s in ids]
            return out

    def counts(self) -> dict[int, int]:
        """Number of registered snapshots per table id."""
        with self.lock:
            return {t: sum(len(s) for s in b.values()) for t, b in self._snaps.items()}

    # -- mutations ---------------------------------------------------------------------------
    def commit(self, rec: SnapshotRecord) -> list[SnapshotKey]:
        """Register a snapshot, then apply its bucket's retention; returns what was deleted."""
        if rec.snapshot_id < 0 or rec.bucket < 0:
            raise InvalidRequest(f"snapshot id and bucket must not be negative: {rec}")
        with self.lock:
            self._store.put_snapshot(rec)
            self._cache(rec)
            return self.apply_retention(rec.table_id, rec.bucket, rec.partition_id)

    def apply_retention(self, table_id: int, bucket: int,
                        partition_id: int | None = None) -> list[SnapshotKey]:
        """Delete the bucket's unpinned snapshots outside its newest ``num_retained``; returns
        (table id, bucket, snapshot id) of each deleted."""
        with self.lock:
            address = (partition_id, bucket)
            ids = sorted(self._snaps.get(table_id, {}).get(address, {}), reverse=True)
            keep = self._num_retained(table_id) or 0
            deleted = []
            for snapshot_id in ids[keep:]:
                pinned = self.is_pinned(table_id, bucket, snapshot_id, partition_id)
                if not pinned and self._delete(table_id, address, snapshot_id):
                    deleted.append((table_id, bucket, snapshot_id))
            return deleted

    def collect(self, keys: Iterable[tuple[int, int, int, int]]) -> list[SnapshotKey]:
        """Called when the last pin of each key went (the lease manager's PinKeys: table id,
        partition id or NO_PARTITION, bucket, snapshot id): apply retention to their buckets
        now."""
        with self.lock:
            deleted = []
            for t, p, b in sorted({(t, p, b) for t, p, b, _ in keys}):
                deleted += self.apply_retention(t, b, None if p == NO_PARTITION else p)
            return deleted

    def gc_all(self) -> list[SnapshotKey]:
        """Apply retention everywhere; snapshots of tables that no longer exist all go."""
        with self.lock:
            deleted = []
            for t in list(self._snaps):
                for pid, b in list(self._snaps.get(t, {})):
                    deleted += self.apply_retention(t, b, pid)
            return deleted

    def drop_table(self, table_id: int) -> int:
        """Delete every snapshot of a dropped table (files and znodes); returns how many."""
        with self.lock:
            addresses = self._snaps.get(table_id, {})
            n = 0
            for a in list(addresses):
                for s in list(addresses.get(a, {})):
                    n += self._delete(table_id, a, s)
            self._store.delete_table_snapshots(table_id)
            self._snaps.pop(table_id, None)
            return n

    def drop_partition(self, table_id: int, partition_id: int) -> int:
        """Delete every snapshot of a dropped partition (files and znodes); returns how many."""
        with self.lock:
            addresses = self._snaps.get(table_id, {})
            n = 0
            for a in [a for a in list(addresses) if a[0] == partition_id]:
                for s in list(addresses.get(a, {})):
                    n += self._delete(table_id, a, s)
            self._store.delete_partition_snapshots(table_id, partition_id)
            return n

    # -- internals ---------------------------------------------------------------------------
    def _cache(self, rec: SnapshotRecord) -> None:
        self._snaps.setdefault(rec.table_id, {}).setdefault(
            (rec.partition_id, rec.bucket), {})[rec.snapshot_id] = rec

    def _delete(self, table_id: int, address: Address, snapshot_id: int) -> bool:
        addresses = self._snaps.get(table_id, {})
        rec = addresses.get(address, {}).get(snapshot_id)
        if rec is None:
            return False
        partition_id, bucket = address
        where = f"table {table_id}" + ("" if partition_id is None
                                       else f" partition id {partition_id}")
        try:
            if self._root is None or is_within(self._root, rec.path):
                self._delete_files(rec.path)
            else:  # registered before locations were checked: only its record goes
                log.warning("KV snapshot %s of %s bucket %s names %s, outside the snapshot "
                            "store %s: its record is removed, the path is left alone",
                            snapshot_id, where, bucket, rec.path, self._root)
        except Exception as e:  # noqa: BLE001 - keep the znode so a later pass retries
            log.warning("cannot delete KV snapshot files %s (%s); will retry", rec.path, e)
            return False
        self._store.delete_snapshot(table_id, bucket, snapshot_id, partition_id)
        del addresses[address][snapshot_id]
        if not addresses[address]:
            del addresses[address]
        if not addresses:
            self._snaps.pop(table_id, None)
        log.info("deleted KV snapshot %s of %s bucket %s", snapshot_id, where, bucket)
        return True
