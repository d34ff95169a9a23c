"""SnapshotRegistry: the KV snapshots registered in ZooKeeper, their retention and lease-aware
GC."""

from __future__ import annotations

import logging
import threading
from typing import Callable, Iterable

import pyarrow.fs as pafs

from fluss_spark.errors import InvalidRequest
from fluss_spark.metadata.layout import SnapshotRecord
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


class SnapshotRegistry:
    """An in-memory mirror of ``/fluss/snapshots`` plus retention and GC.

    The active coordinator is the only writer of snapshot znodes, so the mirror, loaded when
    it takes over, is authoritative; a miss is still checked against ZooKeeper. A snapshot
    that leaves its bucket's newest ``num_retained`` is deleted -- file first, then znode --
    only when no lease pins it (``is_pinned``); a pinned one waits until ``collect`` is told
    that its last pin went. ``lock`` is shared with the lease manager.
    """

    def __init__(self, store, *, num_retained: Callable[[int], int | None],
                 is_pinned: Callable[[int, int, int], bool] = lambda t, b, s: False,
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
        self._snaps: dict[int, dict[int, dict[int, SnapshotRecord]]] = {}

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
    def exists(self, table_id: int, bucket: int, snapshot_id: int) -> bool:
        with self.lock:
            if snapshot_id in self._snaps.get(table_id, {}).get(bucket, {}):
                return True
            rec = self._store.snapshot(table_id, bucket, snapshot_id)
            if rec is not None:
                self._cache(rec)
            return rec is not None

    def get(self, table_id: int, bucket: int, snapshot_id: int) -> SnapshotRecord | None:
        with self.lock:
            return self._snaps.get(table_id, {}).get(bucket, {}).get(snapshot_id)

    def find(self, table_id: int, bucket: int | None = None,
             latest_only: bool = False) -> list[SnapshotRecord]:
        """Snapshots of a table (or one bucket), by bucket then snapshot id."""
        with self.lock:
            buckets = self._snaps.get(table_id, {})
            chosen = [bucket] if bucket is not None else sorted(buckets)
            out = []
            for b in chosen:
                ids = sorted(buckets.get(b, {}))
                if latest_only:
                    ids = ids[-1:]
                out += [buckets[b][s] for s in ids]
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
            return self.apply_retention(rec.table_id, rec.bucket)

    def apply_retention(self, table_id: int, bucket: int) -> list[SnapshotKey]:
        """Delete the bucket's unpinned snapshots outside its newest ``num_retained``."""
        with self.lock:
            ids = sorted(self._snaps.get(table_id, {}).get(bucket, {}), reverse=True)
            keep = self._num_retained(table_id) or 0
            deleted = []
            for snapshot_id in ids[keep:]:
                if not self.is_pinned(table_id, bucket, snapshot_id):
                    if self._delete(table_id, bucket, snapshot_id):
                        deleted.append((table_id, bucket, snapshot_id))
            return deleted

    def collect(self, keys: Iterable[SnapshotKey]) -> list[SnapshotKey]:
        """Called when the last pin of each key went: apply retention to their buckets now."""
        with self.lock:
            deleted = []
            for t, b in sorted({(t, b) for t, b, _ in keys}):
                deleted += self.apply_retention(t, b)
            return deleted

    def gc_all(self) -> list[SnapshotKey]:
        """Apply retention everywhere; snapshots of tables that no longer exist all go."""
        with self.lock:
            deleted = []
            for t in list(self._snaps):
                for b in list(self._snaps.get(t, {})):
                    deleted += self.apply_retention(t, b)
            return deleted

    def drop_table(self, table_id: int) -> int:
        """Delete every snapshot of a dropped table (files and znodes); returns how many."""
        with self.lock:
            buckets = self._snaps.get(table_id, {})
            n = 0
            for b in list(buckets):
                for s in list(buckets[b]):
                    n += self._delete(table_id, b, s)
            self._store.delete_table_snapshots(table_id)
            self._snaps.pop(table_id, None)
            return n

    # -- internals ---------------------------------------------------------------------------
    def _cache(self, rec: SnapshotRecord) -> None:
        self._snaps.setdefault(rec.table_id, {}).setdefault(rec.bucket, {})[rec.snapshot_id] = rec

    def _delete(self, table_id: int, bucket: int, snapshot_id: int) -> bool:
        buckets = self._snaps.get(table_id, {})
        rec = buckets.get(bucket, {}).get(snapshot_id)
        if rec is None:
            return False
        try:
            if self._root is None or is_within(self._root, rec.path):
                self._delete_files(rec.path)
            else:  # registered before locations were checked: only its record goes
                log.warning("KV snapshot %s of table %s bucket %s names %s, outside the snapshot "
                            "store %s: its record is removed, the path is left alone",
                            snapshot_id, table_id, bucket, rec.path, self._root)
        except Exception as e:  # noqa: BLE001 - keep the znode so a later pass retries
            log.warning("cannot delete KV snapshot files %s (%s); will retry", rec.path, e)
            return False
        self._store.delete_snapshot(table_id, bucket, snapshot_id)
        del buckets[bucket][snapshot_id]
        if not buckets[bucket]:
            del buckets[bucket]
        if not buckets:
            self._snaps.pop(table_id, None)
        log.info("deleted KV snapshot %s of table %s bucket %s", snapshot_id, table_id, bucket)
        return True
