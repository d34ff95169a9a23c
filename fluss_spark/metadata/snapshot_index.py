"""The KV snapshot registry in ZooKeeper: index pages of 128 buckets, and the layout v1 znodes
they replace (read, and moved into the pages by ``read_v1`` + ``move_v1``)."""

from __future__ import annotations

import logging
from typing import Any, Callable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from fluss_spark.errors import CorruptMessage, StorageError
from fluss_spark.metadata import layout
from fluss_spark.metadata.layout import SnapshotRecord
from fluss_spark.metadata.zk import ZkSession, retriable_on_connection_loss

log = logging.getLogger(__name__)


@retriable_on_connection_loss
class SnapshotIndex:
    """The registered KV snapshots of every table, read and written through one session.

    A record in both layouts reads once (the page's copy wins).
    """

    def __init__(self, session: ZkSession):
        self._session = session
        self._v1_seen_empty = False
        #: Snapshot index pages as this store last wrote or read them: path -> (znode
        #: version, {(bucket, snapshot_id): record}), the base of its next change.
        self._page_cache: dict[str, tuple[int, dict]] = {}

    @property
    def address(self) -> str:
        return self._session.address

    @property
    def zk(self):
        return self._session.zk

    def put_snapshot(self, rec: SnapshotRecord) -> None:
        def change(records: dict) -> None:
            records[(rec.bucket, rec.snapshot_id)] = rec
        self._update_page(rec.table_id, layout.snapshot_page_of(rec.bucket), change,
                          rec.partition_id)

    def delete_snapshot(self, table_id: int, bucket: int, snapshot_id: int,
                        partition_id: int | None = None) -> None:
        def change(records: dict) -> None:
            records.pop((bucket, snapshot_id), None)
        if not self._update_page(table_id, layout.snapshot_page_of(bucket), change,
                                 partition_id) \
                and partition_id is None and not self._v1_gone():
            # Not in the index: a layout v1 snapshot that was never migrated.
            try:
                self._session.write("delete", layout.snapshot_path(table_id, bucket, snapshot_id))
            except NoNodeError:
                pass

    def snapshot_ids(self, table_id: int, bucket: int,
                     partition_id: int | None = None) -> list[int]:
        ids: set[int] = set()
        if partition_id is None:
            # The old layout first: a move writes the page before it deletes the znodes, so a
            # record moved between the two reads is still seen (in the page).
            ids.update(int(c) for c in self._v1_children(layout.snapshots_path(table_id, bucket)))
        page = self._page(table_id, layout.snapshot_page_of(bucket), partition_id)
        ids.update(s for b, s in page if b == bucket)
        return sorted(ids)

    def snapshot_buckets(self, table_id: int, partition_id: int | None = None) -> list[int]:
        buckets: set[int] = set()
        if partition_id is None:        # the old layout first, as in ``snapshot_ids``
            buckets.update(int(c) for c in self._v1_children(layout.snapshots_path(table_id)))
        buckets.update(b for page in self._pages(table_id, partition_id).values() for b, _ in page)
        return sorted(buckets)

    def snapshot(self, table_id: int, bucket: int, snapshot_id: int,
                 partition_id: int | None = None) -> SnapshotRecord | None:
        page = layout.snapshot_page_of(bucket)
        rec = self._page(table_id, page, partition_id).get((bucket, snapshot_id))
        if rec is not None or partition_id is not None or self._v1_gone():
            return rec
        rec = self._session.get(layout.snapshot_path(table_id, bucket, snapshot_id),
                                SnapshotRecord)
        if rec is None:     # moved into its page since that page was read?
            rec = self._page(table_id, page).get((bucket, snapshot_id))
        return rec

    def snapshot_table_ids(self) -> list[int]:
        return sorted({int(c) for c in self._session.children(layout.SNAPSHOT_INDEX)}
                      | {int(c) for c in self._session.children(layout.SNAPSHOTS)})

    def delete_table_snapshots(self, table_id: int) -> None:
        prefix = layout.snapshot_index_path(table_id) + "/"
        for path in [p for p in self._page_cache if p.startswith(prefix)]:
            del self._page_cache[path]
        for path in (layout.snapshot_index_path(table_id), layout.snapshots_path(table_id)):
            try:
                self._session.delete_tree(path)
            except NoNodeError:
                pass

    def delete_partition_snapshots(self, table_id: int, partition_id: int) -> None:
        """Remove the index node of a dropped partition with its pages."""
        base = layout.snapshot_index_path(table_id, partition_id=partition_id)
        for path in [p for p in self._page_cache if p.startswith(base + "/")]:
            del self._page_cache[path]
        try:
            self._session.delete_tree(base)
        except NoNodeError:
            pass

    def all_snapshots(self) -> list[SnapshotRecord]:
        """Every registered KV snapshot: the index pages (``index_snapshots``) plus any layout
        v1 znodes left (a record in both reads once, the page's copy)."""
        found = {(r.table_id, r.partition_id, r.bucket, r.snapshot_id): r
                 for r in self.index_snapshots()}
        for rec in self._v1_snapshots():
            found.setdefault((rec.table_id, None, rec.bucket, rec.snapshot_id), rec)
        return list(found.values())

    def index_snapshots(self) -> list[SnapshotRecord]:
        """Every KV snapshot in the index pages of every table and partition (pipelined
        reads, so O(tables + partitions + pages) round trips in flight); not the layout v1
        znodes (see ``v1_buckets``)."""
        tables = [int(t) for t in self._session.children(layout.SNAPSHOT_INDEX)]
        listings: list[tuple[int, int | None, Any]] = [
            (t, None, self.zk.get_children_async(layout.snapshot_index_path(t))) for t in tables]
        paths = []
        while listings:
            more: list[tuple[int, int | None, Any]] = []
            for table_id, pid, listing in listings:
                try:
                    children = listing.get()
                except NoNodeError:
                    continue
                for c in children:
                    child_pid = layout.partition_of_node(c)
                    if pid is None and child_pid is not None:
                        more.append((table_id, child_pid, self.zk.get_children_async(
                            layout.snapshot_index_path(table_id, partition_id=child_pid))))
                    elif c.isdigit():
                        paths.append(layout.snapshot_index_path(table_id, int(c), pid))
            listings = more
        found: dict[tuple, SnapshotRecord] = {}
        for i in range(0, len(paths), 1000):
            reads = [(p, self.zk.get_async(p)) for p in paths[i:i + 1000]]
            for path, read in reads:
                try:
                    data, stat = read.get()
                except NoNodeError:
                    continue
                page = layout.SnapshotIndexPage.decode(data)
                records = {}
                for rec in page.records:
                    found[(rec.table_id, rec.partition_id, rec.bucket, rec.snapshot_id)] = rec
                    records[(rec.bucket, rec.snapshot_id)] = rec
                self._page_cache[path] = (stat.version, records)
        return list(found.values())

    def migrate_snapshots(self) -> int:
        """Move every layout v1 snapshot znode into the index pages, then delete it; returns
        how many were moved (``move_v1`` of each table in turn)."""
        moved = 0
        for table_id, buckets in sorted(self.v1_buckets().items()):
            found = self.read_v1(table_id, buckets)
            self.move_v1(table_id, found)
            moved += sum(len(recs) for recs in found.values())
        return moved

    def v1_buckets(self) -> dict[int, list[int]]:
        """{table id: its buckets} that still have a layout v1 snapshot node, listed with
        pipelined requests (one per table); a table whose node is empty maps to []."""
        if self._v1_gone():
            return {}
        tables = sorted(int(c) for c in self._session.children(layout.SNAPSHOTS))
        out: dict[int, list[int]] = {}
        for i in range(0, len(tables), 1000):
            listings = [(t, self.zk.get_children_async(layout.snapshots_path(t)))
                        for t in tables[i:i + 1000]]
            for table_id, listing in listings:
                try:
                    out[table_id] = sorted(int(b) for b in listing.get())
                except NoNodeError:
                    continue
        return out

    def read_v1(self, table_id: int, buckets: list[int]) -> dict[int, list[SnapshotRecord]]:
        """{bucket: its layout v1 snapshot records} of a table's ``buckets``, read with
        pipelined requests; a bucket without a node is left out."""
        paths: list[tuple[int, str]] = []
        out: dict[int, list[SnapshotRecord]] = {}
        for i in range(0, len(buckets), 1000):
            listings = [(b, self.zk.get_children_async(layout.snapshots_path(table_id, b)))
                        for b in buckets[i:i + 1000]]
            for bucket, listing in listings:
                try:
                    ids = listing.get()
                except NoNodeError:
                    continue
                out[bucket] = []
                paths += [(bucket, layout.snapshot_path(table_id, bucket, int(s))) for s in ids]
        for i in range(0, len(paths), 1000):
            reads = [(b, p, self.zk.get_async(p)) for b, p in paths[i:i + 1000]]
            for bucket, path, read in reads:
                try:
                    data = read.get()[0]
                except NoNodeError:
                    continue
                try:
                    out[bucket].append(SnapshotRecord.decode(data))
                except CorruptMessage as e:
                    raise CorruptMessage(f"layout v1 snapshot znode {path}: {e}; restore it from "
                                         "a ZooKeeper backup or delete it") from None
        return out

    def move_v1(self, table_id: int, found: dict[int, list[SnapshotRecord]]) -> None:
        """Move what ``read_v1`` found into the index: write the records into their pages (a
        page's own copy of a record wins), then delete their znodes and bucket nodes, and the
        table's node once it is empty.

        Idempotent: cut off anywhere, every record is in the old place, the new one or both
        (read once), and a later call finishes the move. Every write is fenced."""
        by_page: dict[int, list[SnapshotRecord]] = {}
        for recs in found.values():
            for rec in recs:
                by_page.setdefault(layout.snapshot_page_of(rec.bucket), []).append(rec)
        for page, group in sorted(by_page.items()):
            def change(records: dict, group=group) -> None:
                for rec in group:
                    records.setdefault((rec.bucket, rec.snapshot_id), rec)
            self._update_page(table_id, page, change)
        znodes = [layout.snapshot_path(table_id, r.bucket, r.snapshot_id)
                  for recs in found.values() for r in recs]
        buckets = [layout.snapshots_path(table_id, b) for b in found]
        if not self._delete_listed(znodes + buckets):
            for path in buckets:    # a bucket changed since it was listed: list it again
                try:
                    self._session.delete_tree(path)
                except NoNodeError:
                    pass
        try:
            self._session.write("delete", layout.snapshots_path(table_id))
        except (NoNodeError, NotEmptyError):
            pass        # gone already, or buckets of the table are still to move
        n = len(znodes)
        if n:
            log.info("moved %d KV snapshot records of table %d into the snapshot index", n,
                     table_id)

    def _delete_listed(self, paths: list[str], per_multi: int = 500, in_flight: int = 8) -> bool:
        """Delete ``paths`` (children before parents) in fenced multis, several in flight:
        ZooKeeper applies one session's requests in order, and a v1 tree of 100,000
        snapshots is 300 multis. False when some multi failed (a node was gone or had
        new children); the others still applied."""
        txs = []
        for i in range(0, len(paths), per_multi):
            tx = self._session.transaction()
            for path in paths[i:i + per_multi]:
                tx.delete(path)
            txs.append(tx)
        ok = True
        for i in range(0, len(txs), in_flight):
            pending = [tx.commit_async() for tx in txs[i:i + in_flight]]
            for result in pending:
                results = self._session.committed(result.get(), "delete layout v1 snapshot znodes")
                ok = ok and not any(isinstance(r, Exception) for r in results)
        return ok

    def _v1_gone(self) -> bool:
        """Whether the layout v1 tree is known to be empty. Nothing writes v1 znodes any more,
        so once seen empty it stays empty, and the lookups of tablets and of the registry stop
        paying a ZooKeeper round trip for it."""
        if not self._v1_seen_empty and not self._session.children(layout.SNAPSHOTS):
            self._v1_seen_empty = True
        return self._v1_seen_empty

    def _v1_children(self, path: str) -> list[str]:
        return [] if self._v1_gone() else self._session.children(path)

    def _page(self, table_id: int, page: int,
              partition_id: int | None = None) -> dict[tuple[int, int], SnapshotRecord]:
        try:
            data, _ = self.zk.get(layout.snapshot_index_path(table_id, page, partition_id))
        except NoNodeError:
            return {}
        return {(r.bucket, r.snapshot_id): r
                for r in layout.SnapshotIndexPage.decode(data).records}

    def _pages(self, table_id: int, partition_id: int | None = None
               ) -> dict[int, dict[tuple[int, int], SnapshotRecord]]:
        base = layout.snapshot_index_path(table_id, partition_id=partition_id)
        return {int(p): self._page(table_id, int(p), partition_id)
                for p in self._session.children(base) if p.isdigit()}

    def _update_page(self, table_id: int, page: int, change: Callable[[dict], object],
                     partition_id: int | None = None) -> bool:
        """Apply ``change`` to a page's ``{(bucket, snapshot_id): record}`` and write it with a
        version check (retried when someone else wrote it meanwhile); returns whether the
        page changed. An emptied page is deleted.

        The page as this store last wrote or read it is the base when known, so a commit
        costs one write, not a read and a write; a version check that fails (someone else
        wrote it) drops that copy and reads the page again."""
        path = layout.snapshot_index_path(table_id, page, partition_id)
        fresh = False
        while True:
            cached = self._page_cache.get(path)
            if cached is not None and not fresh:
                version, records = cached
            else:
                try:
                    data, stat = self.zk.get(path)
                    version = stat.version
                    records = {(r.bucket, r.snapshot_id): r
                               for r in layout.SnapshotIndexPage.decode(data).records}
                except NoNodeError:
                    version, records = None, {}
                fresh = True
            new = dict(records)
            change(new)
            if new == records:
                if fresh:
                    return False
                fresh = True        # nothing to write, by a copy: make sure from ZooKeeper
                continue
            try:
                if not new:
                    self._page_cache.pop(path, None)
                    self._session.write("delete", path, version=version)
                    return True
                encoded = layout.SnapshotIndexPage(table_id, page, tuple(new.values()),
                                                   partition_id).encode()
                if len(encoded) > layout.SNAPSHOT_PAGE_MAX_BYTES:
                    raise StorageError(
                        f"the snapshot index page of table {table_id} buckets "
                        f"{page * layout.SNAPSHOT_PAGE_BUCKETS}.."
                        f"{(page + 1) * layout.SNAPSHOT_PAGE_BUCKETS - 1} would hold "
                        f"{len(new)} snapshots ({len(encoded)} bytes), past ZooKeeper's node "
                        f"limit; lower kv.snapshot.num-retained or release leases that pin old "
                        f"snapshots")
                self._page_cache.pop(path, None)    # until the write's outcome is known
                if version is None:
                    self.zk.ensure_path(layout.snapshot_index_path(table_id,
                                                                   partition_id=partition_id))
                    self._session.write("create", path, encoded)
                    self._page_cache[path] = (0, new)
                else:
                    stat = self._session.write("set_data", path, encoded, version=version)
                    self._page_cache[path] = (stat.version, new)
                return True
            except (BadVersionError, NodeExistsError, NoNodeError):
                fresh = True
                continue    # written or deleted by someone else since we read it: read again

    def _v1_snapshots(self) -> list[SnapshotRecord]:
        """Every layout v1 snapshot record."""
        return [rec for t, buckets in self.v1_buckets().items()
                for recs in self.read_v1(t, buckets).values() for rec in recs]
