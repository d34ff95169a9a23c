"""SnapshotRegistry: the KV snapshots registered in ZooKeeper, their retention and lease-aware
GC."""

from __future__ import annotations

import logging
import threading
from typing import Callable, Iterable

import pyarrow.fs as pafs

from fluss_spark.errors import InvalidRequest
from fluss_spark.metadata.layout import SNAPSHOT_PAGE_BUCKETS, SnapshotRecord
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

    Layout v1 snapshots (one znode each, from older releases) are not read at ``load``: the
    mirror starts from the index pages and the list of buckets that still have v1 znodes,
    which ``migrate_step`` moves into the index a page of buckets at a time. Until a bucket is
    moved, a query that needs all of its snapshots (``find``, ``get``) moves it first, and its
    retention waits (it would not see them all).
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
        #: table id -> its buckets whose layout v1 snapshot znodes are not moved yet.
        self._unmoved: dict[int, set[int]] = {}

    def load(self) -> int:
        """Mirror the snapshot index and note which buckets still have layout v1 snapshot
        znodes (they are moved by ``migrate_step``, or on demand); returns how many snapshots
        were read. Reads O(tables + pages) znodes whatever the old layout holds."""
        with self.lock:
            self._snaps = {}
            records = self._store.index_snapshots()
            for rec in records:
                self._cache(rec)
            self._unmoved = {t: set(b) for t, b in self._store.v1_buckets().items()}
            for t in [t for t, b in self._unmoved.items() if not b]:
                self._store.move_v1(t, {})      # an empty node left by an earlier move
                del self._unmoved[t]
            return len(records)

    # -- layout v1 migration -----------------------------------------------------------------
    def unmoved_buckets(self) -> int:
        """How many buckets still have layout v1 snapshot znodes (0: migration finished)."""
        with self.lock:
            return sum(len(b) for b in self._unmoved.values())

    def migrate_step(self, max_buckets: int = SNAPSHOT_PAGE_BUCKETS) -> int:
        """Move the layout v1 snapshots of up to ``max_buckets`` buckets of one table into the
        index; returns how many buckets are left to move.

        The znodes are read without the lock (the long part), then written under it. Nothing
        changes a bucket's v1 znodes meanwhile but a move on demand (its buckets are then
        skipped here) or a table drop (the table is then skipped): retention of an unmoved
        bucket waits, so no deletion races the read."""
        with self.lock:
            if not self._unmoved:
                return 0
            table_id = min(self._unmoved)
            chunk = sorted(self._unmoved[table_id])[:max_buckets]
        found = self._store.read_v1(table_id, chunk)
        with self.lock:
            still = self._unmoved.get(table_id, set())
            self._move(table_id, {b: found.get(b, []) for b in chunk if b in still})
            return sum(len(b) for b in self._unmoved.values())

    def _move_now(self, table_id: int, bucket: int | None = None) -> None:
        """Move a table's (or one bucket's) layout v1 snapshots now, if any are left."""
        buckets = self._unmoved.get(table_id)
        if buckets and (bucket is None or bucket in buckets):
            chunk = sorted(buckets) if bucket is None else [bucket]
            found = self._store.read_v1(table_id, chunk)
            self._move(table_id, {b: found.get(b, []) for b in chunk})

    def _move(self, table_id: int, found: dict[int, list[SnapshotRecord]]) -> None:
        """Under the lock: move ``found`` (every v1 record of those buckets) into the index
        and the mirror, then apply the retention those buckets waited for."""
        if not found:
            return
        self._store.move_v1(table_id, found)
        for recs in found.values():
            for rec in recs:    # a copy already in the mirror (from the page) wins
                self._snaps.setdefault(rec.table_id, {}).setdefault(
                    (None, rec.bucket), {}).setdefault(rec.snapshot_id, rec)
        left = self._unmoved.get(table_id, set()) - set(found)
        if left:
            self._unmoved[table_id] = left
        else:
            self._unmoved.pop(table_id, None)
        for bucket in sorted(found):
            self.apply_retention(table_id, bucket)
        if not self._unmoved:
            log.info("every layout v1 KV snapshot is in the snapshot index")

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
            self._move_now(table_id, bucket)
            return self._snaps.get(table_id, {}).get((partition_id, bucket), {}).get(snapshot_id)

    def find(self, table_id: int, bucket: int | None = None, latest_only: bool = False,
             partition_id: int | None = None) -> list[SnapshotRecord]:
        """Snapshots of a table (every partition of a partitioned one, or the given
        ``partition_id``'s; every bucket, or ``bucket``), by partition, bucket, snapshot id."""
        with self.lock:
            self._move_now(table_id, bucket)
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
            if partition_id is None and bucket in self._unmoved.get(table_id, ()):
                return []       # not all of its snapshots are known yet: after the move
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
            self._store.delete_table_snapshots(table_id)     # the layout v1 tree too
            self._snaps.pop(table_id, None)
            self._unmoved.pop(table_id, None)
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
