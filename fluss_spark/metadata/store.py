"""MetadataStore: typed reads and writes of the ZooKeeper layout over one kazoo client."""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from kazoo.client import KazooClient
from kazoo.security import READ_ACL_UNSAFE, make_digest_acl
from kazoo.exceptions import (BadVersionError, ConnectionClosedError, ConnectionLoss,
                              NodeExistsError, NoNodeError, NotEmptyError,
                              OperationTimeoutError, SessionExpiredError)
from kazoo.handlers.threading import AsyncResult, KazooTimeoutError, SequentialThreadingHandler
from kazoo.recipe.election import Election

from fluss_spark.errors import (FlussError, MetadataStoreUnavailable, NotCoordinatorLeader,
                                TableAlreadyExist, TableNotExist)
from fluss_spark.metadata import layout
from fluss_spark.metadata.layout import (AssignmentRecord, CoordinatorRecord, SnapshotRecord,
                                         TableRecord, TabletRecord)
from fluss_spark.errors import CorruptMessage, StorageError
from fluss_spark.metadata.layout import LeaseRecord
from fluss_spark.protocol.codec import packb

log = logging.getLogger(__name__)

#: Longest pause between two attempts to reconnect to ZooKeeper.
_RECONNECT_MAX_DELAY_S = 1.0


class _BoundedWaitHandler(SequentialThreadingHandler):
    """kazoo's threading handler whose synchronous calls wait at most ``wait_s`` for an answer."""

    def __init__(self, wait_s: float):
        super().__init__()
        self.wait_s = wait_s

    def async_result(self) -> AsyncResult:
        return _BoundedResult(self)


class _BoundedResult(AsyncResult):
    """An AsyncResult whose ``get()`` without a timeout waits ``handler.wait_s``, not forever."""

    def get(self, block=True, timeout=None):
        # kazoo queues a request made while it is reconnecting and its synchronous API waits
        # for the answer without limit: during an outage one call would hang its RPC (holding
        # the coordinator's lock) until ZooKeeper came back. Bounded, it raises
        # KazooTimeoutError, which the store reports as the retriable MetadataStoreUnavailable.
        return super().get(block, self._handler.wait_s if timeout is None else timeout)


class MetadataStore:
    """Owns one kazoo session; every method maps to one layout path.

    ``zookeeper_address`` is ``host:port[,host:port...][/chroot]``. A call that ZooKeeper does
    not answer (connection lost, or not reconnected within ``session_timeout_s``) raises the
    retriable ``MetadataStoreUnavailable``; whether a write it carried was applied is then
    unknown (ZooKeeper may still apply a request sent before the loss), so callers change their
    own state only after a write returns and answer "retry" otherwise.
    """

    def __init__(self, zookeeper_address: str, *, timeout_s: float = 15.0,
                 session_timeout_s: float = 10.0, digest: str | None = None):
        """``digest``: ``username:password`` for ZooKeeper digest authentication; every node
        this store creates (and ``/fluss`` itself) then lets only that user change it."""
        self.address = zookeeper_address
        hosts, slash, chroot = zookeeper_address.partition("/")
        self._chroot = "/" + chroot.strip("/") if slash and chroot.strip("/") else ""
        # A connected client gets ConnectionLoss within 2/3 of the session timeout when the
        # server goes silent, so waiting one session timeout only cuts short the waits for a
        # reconnection that is not coming before the session would expire anyway.
        # kazoo's default reconnection backoff doubles up to an hour: after an outage of t
        # seconds its next attempt can come about t seconds after ZooKeeper is back, past the
        # session timeout. At most a second between attempts resumes the session in time.
        self._acl = None
        auth = {}
        if digest:
            user, _, password = digest.partition(":")
            self._acl = [make_digest_acl(user, password, all=True), READ_ACL_UNSAFE[0]]
            auth = {"auth_data": [("digest", digest)], "default_acl": self._acl}
        self.zk = KazooClient(hosts=hosts, timeout=session_timeout_s, **auth,
                              handler=_BoundedWaitHandler(session_timeout_s),
                              connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2,
                                                "max_delay": _RECONNECT_MAX_DELAY_S})
        self._timeout_s = timeout_s
        #: (epoch path, znode version) once this store writes for the active coordinator: every
        #: write then checks it in the same transaction, so a coordinator that lost its
        #: leadership (paused past its session, cut off) cannot change anything any more.
        self._fence: tuple[str, int] | None = None
        #: Called when a write found the fence taken by another coordinator.
        self.on_fenced: Callable[[], None] | None = None
        #: What this store last wrote or read of each lease, so the next write sends only
        #: the parts that changed (dropped whenever a write's outcome is unknown).
        self._lease_states: dict[str, _LeaseState] = {}
        self._v1_seen_empty = False
        #: Snapshot index pages as this store last wrote or read them: path -> (znode
        #: version, {(bucket, snapshot_id): record}), the base of its next change.
        self._page_cache: dict[str, tuple[int, dict]] = {}

    def start(self) -> "MetadataStore":
        try:
            self.zk.start(timeout=self._timeout_s)
        except Exception as e:  # kazoo raises its own timeout type
            raise FlussError(f"cannot reach ZooKeeper at {self.address}: {e}; is it running?") from None
        if self._chroot:
            # kazoo needs the chroot node to exist before it is used as a root.
            self.zk.ensure_path(self._chroot)
            self.zk.chroot = self._chroot
        for path in (layout.TABLETS, layout.TABLES, layout.SNAPSHOTS, layout.SNAPSHOT_INDEX,
                     layout.LEASES, layout.COORDINATOR_ELECTION, "/fluss/counters"):
            self.zk.ensure_path(path)
        if self._acl is not None:
            acls, _ = self.zk.get_acls(layout.ROOT)
            if list(acls) != list(self._acl):   # first start with ZooKeeper authentication
                self._protect(layout.ROOT, self._acl)
        return self

    def _protect(self, path: str, acl: list) -> None:
        """Give ``path`` and the nodes below it this store's ACL (nodes made before ZooKeeper
        authentication was configured are open to everyone until then)."""
        try:
            acls, _ = self.zk.get_acls(path)
            if list(acls) != list(acl):
                self.zk.set_acls(path, acl)
            children = self.zk.get_children(path)
        except NoNodeError:
            return
        for child in children:
            self._protect(f"{path}/{child}", acl)

    def close(self) -> None:
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass

    # -- coordinator ------------------------------------------------------------------------
    # -- fencing ----------------------------------------------------------------------------
    def claim_epoch(self) -> int:
        """Make this store the coordinator's writer: bump the coordinator epoch and fence every
        later write on it. Returns the new epoch."""
        path = layout.COORDINATOR_EPOCH
        self.zk.ensure_path(path)
        while True:
            data, stat = self.zk.get(path)
            epoch = (layout.decode_int(data) if data else 0) + 1
            try:
                new = self.zk.set(path, layout.encode_int(epoch), version=stat.version)
            except BadVersionError:
                continue
            self._fence = (path, new.version)
            return epoch

    def still_writer(self) -> bool:
        """Whether no other coordinator claimed the epoch since ``claim_epoch``."""
        if self._fence is None:
            return False
        stat = self.zk.exists(self._fence[0])
        return stat is not None and stat.version == self._fence[1]

    def _transaction(self):
        tx = self.zk.transaction()
        if self._fence is not None:
            tx.check(*self._fence)
        return tx

    def _commit(self, tx, what: str) -> list:
        """Commit; the results of the caller's own operations (the fence check taken off)."""
        return self._committed(tx.commit(), what)

    def _committed(self, results: list, what: str) -> list:
        """The results of a committed transaction without the fence check, or
        NotCoordinatorLeader when the fence check failed."""
        if self._fence is None:
            return results
        if isinstance(results[0], (BadVersionError, NoNodeError)):
            if self.on_fenced is not None:
                self.on_fenced()
            raise NotCoordinatorLeader(
                f"another coordinator took over (the coordinator epoch changed), so this one no "
                f"longer writes ({what}); retry against the active coordinator")
        return results[1:]

    def _write(self, op: str, path: str, *args, **kwargs):
        """``create``, ``set_data`` or ``delete``, fenced when this store writes for the active
        coordinator; raises what the plain kazoo call raises (NodeExistsError, ...)."""
        if self._fence is None:
            return getattr(self.zk, "set" if op == "set_data" else op)(path, *args, **kwargs)
        tx = self._transaction()
        getattr(tx, op)(path, *args, **kwargs)
        (result,) = self._commit(tx, f"{op} {path}")
        if isinstance(result, Exception):
            raise result
        return result

    def _delete_tree(self, path: str) -> None:
        """Delete ``path`` and everything under it, fenced, in transactions of at most 500
        nodes (deepest first); NoNodeError when ``path`` does not exist."""
        if self._fence is None:
            self.zk.delete(path, recursive=True)
            return
        for _ in range(5):
            nodes = self._subtree(path)
            if nodes is None:
                raise NoNodeError(path)
            failed = False
            for i in range(0, len(nodes), 500):
                tx = self._transaction()
                for node in nodes[i:i + 500]:
                    tx.delete(node)
                if any(isinstance(r, Exception) for r in self._commit(tx, f"delete {path}")):
                    failed = True     # the tree changed under us: list it again
                    break
            if not failed:
                return
        raise FlussError(f"deleting {path} kept failing: its children keep changing")

    def _subtree(self, path: str) -> list[str] | None:
        """``path`` and its descendants, deepest first; None when ``path`` does not exist."""
        try:
            children = self.zk.get_children(path)
        except NoNodeError:
            return None
        out: list[str] = []
        for child in children:
            out.extend(self._subtree(f"{path}/{child}") or [])
        out.append(path)
        return out

    def election(self, identifier: str) -> Election:
        return self.zk.Election(layout.COORDINATOR_ELECTION, identifier)

    def remove_stale_election_nodes(self, identifier: str) -> int:
        """Delete election nodes that carry ``identifier`` but belong to another session.

        A coordinator restarted on the same host:port after kill -9 finds the node of its dead
        predecessor (which holds the address it has now bound, so no live process can own it)
        and removes it instead of waiting for that session to expire.
        """
        removed = 0
        own = self.zk.client_id[0] if self.zk.client_id else None
        for child in self._children(layout.COORDINATOR_ELECTION):
            path = f"{layout.COORDINATOR_ELECTION}/{child}"
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                continue
            if data.decode(errors="replace") == identifier and stat.ephemeralOwner != own:
                try:
                    self.zk.delete(path)
                    removed += 1
                except NoNodeError:
                    pass
        return removed

    def set_active_coordinator(self, record: CoordinatorRecord) -> None:
        try:
            self._write("delete", layout.COORDINATOR_ACTIVE)
        except NoNodeError:
            pass
        self._write("create", layout.COORDINATOR_ACTIVE, record.encode(), ephemeral=True)

    def active_coordinator(self) -> CoordinatorRecord | None:
        return self._get(layout.COORDINATOR_ACTIVE, CoordinatorRecord)

    # -- tablet servers ---------------------------------------------------------------------
    def register_tablet(self, record: TabletRecord) -> None:
        path = layout.tablet_path(record.id)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.zk.create(path, record.encode(), ephemeral=True)
                return
            except NodeExistsError:
                # The ephemeral node of a killed predecessor lingers until its session expires.
                if time.monotonic() > deadline:
                    raise FlussError(f"tablet server id {record.id} is already registered by a "
                                     "live process; pick another --id") from None
                time.sleep(0.5)

    def tablets(self) -> dict[int, TabletRecord]:
        out = {}
        for child in self._children(layout.TABLETS):
            rec = self._get(f"{layout.TABLETS}/{child}", TabletRecord)
            if rec is not None:
                out[rec.id] = rec
        return out

    def delete_tablet(self, tablet_id: int) -> None:
        """Remove a tablet registration (a dead predecessor's lingering ephemeral node)."""
        try:
            self.zk.delete(layout.tablet_path(tablet_id))
        except NoNodeError:
            pass

    # -- tables -----------------------------------------------------------------------------
    def next_table_id(self) -> int:
        path = layout.TABLE_ID_COUNTER
        self.zk.ensure_path(path)
        while True:
            data, stat = self.zk.get(path)
            value = layout.decode_int(data) + 1
            try:
                self._write("set_data", path, layout.encode_int(value), version=stat.version)
                return value
            except BadVersionError:
                continue

    def create_table(self, table: TableRecord, assignment: AssignmentRecord) -> None:
        tx = self._transaction()
        tx.create(layout.table_path(table.name), table.encode())
        tx.create(layout.assignment_path(table.name), assignment.encode())
        results = self._commit(tx, f"create table {table.name}")
        for r in results:
            if isinstance(r, NodeExistsError):
                raise TableAlreadyExist(f"table {table.name} already exists")
            if isinstance(r, Exception):
                raise FlussError(f"creating table {table.name} failed: {r!r}")

    def drop_table(self, name: str) -> None:
        try:
            self._delete_tree(layout.table_path(name))
        except NoNodeError:
            raise TableNotExist(f"table {name} does not exist") from None

    def table_names(self) -> list[str]:
        return sorted(self._children(layout.TABLES))

    def table(self, name: str) -> TableRecord | None:
        return self._get(layout.table_path(name), TableRecord)

    def assignment(self, name: str) -> AssignmentRecord | None:
        return self._get(layout.assignment_path(name), AssignmentRecord)

    def set_assignment(self, name: str, assignment: AssignmentRecord) -> None:
        self._write("set_data", layout.assignment_path(name), assignment.encode())

    def tables(self) -> list[tuple[TableRecord, AssignmentRecord | None]]:
        out = []
        for name in self.table_names():
            rec = self.table(name)
            if rec is not None:
                out.append((rec, self.assignment(name)))
        return out

    # -- KV snapshots -----------------------------------------------------------------------
    # Layout v2 keeps a table's snapshots in index pages of 128 buckets (SnapshotIndexPage);
    # the v1 znodes (one per snapshot) are still read everywhere until migrate_snapshots moves
    # them, and a record in both places reads once (the page's copy wins).
    def put_snapshot(self, rec: SnapshotRecord) -> None:
        def change(records: dict) -> None:
            records[(rec.bucket, rec.snapshot_id)] = rec
        self._update_page(rec.table_id, layout.snapshot_page_of(rec.bucket), change)

    def delete_snapshot(self, table_id: int, bucket: int, snapshot_id: int) -> None:
        def change(records: dict) -> None:
            records.pop((bucket, snapshot_id), None)
        if not self._update_page(table_id, layout.snapshot_page_of(bucket), change) \
                and not self._v1_gone():
            # Not in the index: a layout v1 snapshot that was never migrated.
            try:
                self._write("delete", layout.snapshot_path(table_id, bucket, snapshot_id))
            except NoNodeError:
                pass

    def snapshot_ids(self, table_id: int, bucket: int) -> list[int]:
        page = self._page(table_id, layout.snapshot_page_of(bucket))
        ids = {s for b, s in page if b == bucket}
        ids.update(int(c) for c in self._v1_children(layout.snapshots_path(table_id, bucket)))
        return sorted(ids)

    def snapshot_buckets(self, table_id: int) -> list[int]:
        buckets = {b for page in self._pages(table_id).values() for b, _ in page}
        buckets.update(int(c) for c in self._v1_children(layout.snapshots_path(table_id)))
        return sorted(buckets)

    def snapshot(self, table_id: int, bucket: int, snapshot_id: int) -> SnapshotRecord | None:
        rec = self._page(table_id, layout.snapshot_page_of(bucket)).get((bucket, snapshot_id))
        if rec is not None:
            return rec
        if self._v1_gone():
            return None
        return self._get(layout.snapshot_path(table_id, bucket, snapshot_id), SnapshotRecord)

    def snapshot_table_ids(self) -> list[int]:
        return sorted({int(c) for c in self._children(layout.SNAPSHOT_INDEX)}
                      | {int(c) for c in self._children(layout.SNAPSHOTS)})

    def delete_table_snapshots(self, table_id: int) -> None:
        prefix = layout.snapshot_index_path(table_id) + "/"
        for path in [p for p in self._page_cache if p.startswith(prefix)]:
            del self._page_cache[path]
        for path in (layout.snapshot_index_path(table_id), layout.snapshots_path(table_id)):
            try:
                self._delete_tree(path)
            except NoNodeError:
                pass

    def all_snapshots(self) -> list[SnapshotRecord]:
        """Every registered KV snapshot: the index pages of every table (pipelined reads, so
        O(tables + pages) round trips in flight), plus any layout v1 znodes left."""
        tables = [int(t) for t in self._children(layout.SNAPSHOT_INDEX)]
        listings = [(t, self.zk.get_children_async(layout.snapshot_index_path(t)))
                    for t in tables]
        paths = []
        for table_id, listing in listings:
            try:
                paths += [layout.snapshot_index_path(table_id, int(p)) for p in listing.get()]
            except NoNodeError:
                continue
        found: dict[tuple[int, int, int], SnapshotRecord] = {}
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
                    found[(rec.table_id, rec.bucket, rec.snapshot_id)] = rec
                    records[(rec.bucket, rec.snapshot_id)] = rec
                self._page_cache[path] = (stat.version, records)
        for rec in self._v1_snapshots():
            found.setdefault((rec.table_id, rec.bucket, rec.snapshot_id), rec)
        return list(found.values())

    def migrate_snapshots(self) -> int:
        """Move layout v1 snapshot znodes into index pages, then delete them; returns how
        many were moved. Idempotent: a move cut off anywhere leaves records in the old place,
        the new one or both (read once), and the next call finishes it."""
        moved = 0
        for table_id in sorted(int(c) for c in self._children(layout.SNAPSHOTS)):
            recs, znodes = self._v1_tree(table_id)
            by_page: dict[int, list[SnapshotRecord]] = {}
            for rec in recs:
                by_page.setdefault(layout.snapshot_page_of(rec.bucket), []).append(rec)
            for page, group in sorted(by_page.items()):
                def change(records: dict, group=group) -> None:
                    for rec in group:
                        records.setdefault((rec.bucket, rec.snapshot_id), rec)
                self._update_page(table_id, page, change)
            if not self._delete_listed(znodes + [layout.snapshots_path(table_id)]):
                try:    # the tree changed since it was listed: list it again
                    self._delete_tree(layout.snapshots_path(table_id))
                except NoNodeError:
                    pass
            moved += len(recs)
            if recs:
                log.info("moved %d KV snapshot records of table %d into the snapshot index",
                         len(recs), table_id)
        return moved

    def _delete_listed(self, paths: list[str], per_multi: int = 500, in_flight: int = 8) -> bool:
        """Delete ``paths`` (children before parents) in fenced multis, several in flight:
        ZooKeeper applies one session's requests in order, and a v1 tree of 100,000
        snapshots is 300 multis. False when some multi failed (a node was gone or had
        new children); the others still applied."""
        txs = []
        for i in range(0, len(paths), per_multi):
            tx = self._transaction()
            for path in paths[i:i + per_multi]:
                tx.delete(path)
            txs.append(tx)
        ok = True
        for i in range(0, len(txs), in_flight):
            pending = [tx.commit_async() for tx in txs[i:i + in_flight]]
            for result in pending:
                results = self._committed(result.get(), "delete layout v1 snapshot znodes")
                ok = ok and not any(isinstance(r, Exception) for r in results)
        return ok

    def _v1_gone(self) -> bool:
        """Whether the layout v1 tree is known to be empty. Nothing writes v1 znodes any more,
        so once seen empty it stays empty, and the lookups of tablets and of the registry stop
        paying a ZooKeeper round trip for it."""
        if not self._v1_seen_empty and not self._children(layout.SNAPSHOTS):
            self._v1_seen_empty = True
        return self._v1_seen_empty

    def _v1_children(self, path: str) -> list[str]:
        return [] if self._v1_gone() else self._children(path)

    def _page(self, table_id: int, page: int) -> dict[tuple[int, int], SnapshotRecord]:
        try:
            data, _ = self.zk.get(layout.snapshot_index_path(table_id, page))
        except NoNodeError:
            return {}
        return {(r.bucket, r.snapshot_id): r
                for r in layout.SnapshotIndexPage.decode(data).records}

    def _pages(self, table_id: int) -> dict[int, dict[tuple[int, int], SnapshotRecord]]:
        return {int(p): self._page(table_id, int(p))
                for p in self._children(layout.snapshot_index_path(table_id))}

    def _update_page(self, table_id: int, page: int, change: Callable[[dict], object]) -> bool:
        """Apply ``change`` to a page's ``{(bucket, snapshot_id): record}`` and write it with a
        version check (retried when someone else wrote it meanwhile); returns whether the
        page changed. An emptied page is deleted.

        The page as this store last wrote or read it is the base when known, so a commit
        costs one write, not a read and a write; a version check that fails (someone else
        wrote it) drops that copy and reads the page again."""
        path = layout.snapshot_index_path(table_id, page)
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
                    self._write("delete", path, version=version)
                    return True
                encoded = layout.SnapshotIndexPage(table_id, page, tuple(new.values())).encode()
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
                    self.zk.ensure_path(layout.snapshot_index_path(table_id))
                    self._write("create", path, encoded)
                    self._page_cache[path] = (0, new)
                else:
                    stat = self._write("set_data", path, encoded, version=version)
                    self._page_cache[path] = (stat.version, new)
                return True
            except (BadVersionError, NodeExistsError, NoNodeError):
                fresh = True
                continue    # written or deleted by someone else since we read it: read again

    def _v1_snapshots(self, table_ids: list[int] | None = None) -> list[SnapshotRecord]:
        """Every layout v1 snapshot record (of ``table_ids``)."""
        if table_ids is None:
            table_ids = sorted(int(c) for c in self._children(layout.SNAPSHOTS))
        return [rec for t in table_ids for rec in self._v1_tree(t)[0]]

    def _v1_tree(self, table_id: int) -> tuple[list[SnapshotRecord], list[str]]:
        """(records, znodes below the table's node, children first) of a table's layout v1
        snapshots, read with pipelined requests."""
        buckets = sorted(int(c) for c in self._children(layout.snapshots_path(table_id)))
        paths: list[str] = []
        for i in range(0, len(buckets), 1000):
            futures = [(b, self.zk.get_children_async(layout.snapshots_path(table_id, b)))
                       for b in buckets[i:i + 1000]]
            for bucket, f in futures:
                try:
                    ids = f.get()
                except NoNodeError:
                    continue
                paths += [layout.snapshot_path(table_id, bucket, int(s)) for s in ids]
        out, found = [], []
        for i in range(0, len(paths), 1000):
            reads = [(p, self.zk.get_async(p)) for p in paths[i:i + 1000]]
            for path, read in reads:
                try:
                    out.append(SnapshotRecord.decode(read.get()[0]))
                    found.append(path)
                except NoNodeError:
                    continue
        return out, found + [layout.snapshots_path(table_id, b) for b in buckets]

    # -- KV snapshot leases ------------------------------------------------------------------
    def lease_ids(self) -> list[str]:
        return sorted(self._children(layout.LEASES))

    def save_lease(self, record: LeaseRecord,
                   changed: Mapping[int, Iterable[int] | None] | None = None) -> int:
        """Write a lease; returns the bytes now stored for it (header plus part znodes).

        ``changed``: ``{table_id: buckets}`` whose pins differ from the last record this store
        wrote or loaded for the lease (None for a whole table; a table not named is unchanged);
        only their parts are encoded and written. Without it every part is encoded again and
        only those whose bytes differ are written. See LeaseRecord for why a crash at any point
        leaves the old or the new lease.
        """
        lease_id = layout.check_lease_id(record.lease_id)
        path = layout.lease_path(lease_id)
        for _ in range(5):
            state = self._lease_states.get(lease_id)
            if state is None:
                state = self._read_lease_state(path)
                changed = None
            try:
                return self._write_lease(path, record, state, changed)
            except _StaleLease:
                self._lease_states.pop(lease_id, None)
            except BaseException:
                # Unknown what ZooKeeper applied: read it again before the next write.
                self._lease_states.pop(lease_id, None)
                raise
        raise FlussError(f"lease {lease_id}: its znodes kept changing under this writer; "
                         "is another coordinator writing?")

    def _read_lease_state(self, path: str) -> "_LeaseState | None":
        """What is stored for a lease, without decoding its pins (None when absent)."""
        try:
            data, stat = self.zk.get(path)
        except NoNodeError:
            return None
        header = LeaseRecord.decode_header(data)
        children = set(self._children(path))
        return _LeaseState(version=stat.version, generation=_max_generation(header, children),
                           parts={}, refs={}, children=children, complete=False)

    def _write_lease(self, path: str, record: LeaseRecord, state: "_LeaseState | None",
                     changed) -> int:
        encoded = self._encode_lease(record, state, changed)
        inline, children = layout.place_lease_parts(encoded)
        generation = (state.generation if state else 0) + 1
        refs, names, creates = [], {}, []
        for key in children:
            data = encoded[key]
            old_name = state.refs.get(key) if state else None
            parsed = layout.parse_lease_part_name(old_name) if old_name is not None else None
            if state is not None and parsed is not None and state.parts.get(key) == data:
                gen = parsed[2]
                names[key] = old_name
            else:
                gen = generation
                names[key] = layout.lease_part_name(key[0], key[1], gen)
                creates.append((names[key], data))
            refs.append(layout.lease_ref(key, gen, data))
        header = record.header(generation, [encoded[k] for k in inline], refs)
        keep = set(names.values())
        deletes = sorted(state.children - keep) if state else []
        created_size = sum(len(d) for _, d in creates)
        if len(header) + created_size <= layout.LEASE_MULTI_BYTES:
            tx = self._transaction()
            if state is None:
                tx.create(path, header)
            for name, data in creates:
                tx.create(f"{path}/{name}", data)
            if state is not None:
                tx.set_data(path, header, version=state.version)
            for name in deletes:
                tx.delete(f"{path}/{name}")
            results = self._commit(tx, f"save lease {record.lease_id}")
            if any(isinstance(r, Exception) for r in results):
                raise _StaleLease()
            version = 0 if state is None else results[len(creates)].version
        else:
            version = self._write_lease_in_steps(path, record, state, header, creates, deletes)
        self._lease_states[record.lease_id] = _LeaseState(
            version=version, generation=generation, parts=encoded,
            refs={k: names[k] for k in children}, children=keep, complete=True)
        return len(header) + sum(len(encoded[k]) for k in children)

    def _write_lease_in_steps(self, path: str, record: LeaseRecord, state, header: bytes,
                              creates: list, deletes: list) -> int:
        """A lease write too big for one multi: the new parts first (several multis; a crash
        leaves orphans that no header names), then one multi that switches the header and
        deletes the replaced parts. Returns the header's new znode version."""
        version = state.version if state is not None else None
        pending = list(creates)
        if state is None:
            # The parent comes first; until the switch it says "writing" and a loader
            # discards such a never-acknowledged lease.
            try:
                self._write("create", path, record.header(0, [], [], state="writing"))
            except NodeExistsError:
                raise _StaleLease() from None     # created meanwhile by another writer
            version = 0
        while pending:
            tx, size = self._transaction(), 0
            while pending and (size == 0 or size + len(pending[0][1]) <= layout.LEASE_MULTI_BYTES):
                name, data = pending.pop(0)
                tx.create(f"{path}/{name}", data)
                size += len(data)
            if any(isinstance(r, Exception) for r in self._commit(tx, "write lease parts")):
                raise _StaleLease()
        tx = self._transaction()
        tx.set_data(path, header, version=version)
        for name in deletes:
            tx.delete(f"{path}/{name}")
        results = self._commit(tx, f"save lease {record.lease_id}")
        if any(isinstance(r, Exception) for r in results):
            raise _StaleLease()
        return results[0].version

    @staticmethod
    def _encode_lease(record: LeaseRecord, state: "_LeaseState | None", changed
                      ) -> dict[tuple[int, int], bytes]:
        """``{(table_id, part): encoded part}`` of the record; parts that ``changed`` says are
        unchanged are taken from what was last written."""
        if changed is None or state is None or not state.complete:
            return {(e["t"], layout._entry_part(e)): packb(e)
                    for e in layout.encode_lease_pins(record.tables)}
        encoded: dict[tuple[int, int], bytes] = {}
        cached_tables = {t for t, _ in state.parts}
        for (t, k), data in state.parts.items():
            if t in record.tables and t not in changed:
                encoded[(t, k)] = data
        for t, pins in record.tables.items():
            if not pins or (t not in changed and t in cached_tables):
                continue
            buckets = changed.get(t)
            parts = None if buckets is None else {b // layout.LEASE_PART_BUCKETS for b in buckets}
            if parts is not None:
                for (ct, k), data in state.parts.items():
                    if ct == t and k not in parts:
                        encoded[(t, k)] = data
            if any(b < 0 for b in (buckets or ())):
                raise ValueError(f"lease pins of table {t}: a bucket is negative")
            for k, (bs, ss) in layout.table_parts(pins, parts).items():
                if len(bs):
                    encoded[(t, k)] = packb(layout.encode_lease_part(t, k, bs, ss))
        return encoded

    def load_lease(self, lease_id: str) -> LeaseRecord | None:
        """Read one lease; None when absent or when its first write never finished."""
        path = layout.lease_path(lease_id)
        try:
            data, stat = self.zk.get(path)
        except NoNodeError:
            return None
        header = LeaseRecord.decode_header(data)
        if header.get("state") == "writing":
            return None
        if "refs" in header:
            names = [layout.lease_part_name(t, k, g) for t, k, g, _, _ in header["refs"]]
            parts = dict(zip(names, self._get_all(path, names, lease_id)))
            rec = LeaseRecord.decode(header, parts=parts)
            keys = {}
            for raw in header.get("parts") or []:
                entry = layout._unpack_part(raw, lease_id)
                keys[(int(entry["t"]), layout._entry_part(entry))] = raw
            refs = {}
            for (t, k, g, _, _), name in zip(header["refs"], names):
                keys[(t, k)] = parts[name]
                refs[(t, k)] = name
            children = set(self._children(path))
            self._lease_states[lease_id] = _LeaseState(
                version=stat.version, generation=_max_generation(header, children), parts=keys,
                refs=refs, children=children, complete=True)
            return rec
        n = int(header.get("chunks", 0))
        chunks = []
        if n:
            gen = int(header["generation"])
            chunks = self._get_all(path, [layout.lease_chunk_name(gen, i) for i in range(n)],
                                   lease_id)
        return LeaseRecord.decode(header, chunks)

    def _get_all(self, path: str, names: list[str], lease_id: str) -> list[bytes]:
        futures = [self.zk.get_async(f"{path}/{name}") for name in names]
        try:
            return [f.get()[0] for f in futures]
        except NoNodeError:
            raise CorruptMessage(f"lease {lease_id}: a child znode its header names is "
                                 "missing") from None

    def load_leases(self) -> list[LeaseRecord]:
        """Every stored lease; unfinished first writes are removed, not returned."""
        out = []
        for lease_id in self.lease_ids():
            rec = self.load_lease(lease_id)
            if rec is None:
                self.delete_lease(lease_id)
            else:
                out.append(rec)
        return out

    def delete_lease(self, lease_id: str) -> None:
        """Delete a lease and its child znodes in one transaction.

        A recursive delete cut off by a lost connection would leave a header whose parts are
        gone, which no loader can read back (and a coordinator could then never recover).
        """
        self._lease_states.pop(lease_id, None)
        path = layout.lease_path(lease_id)
        children = self._children(path)
        if not children:
            try:
                self._write("delete", path)
                return
            except NoNodeError:
                return
            except NotEmptyError:
                children = self._children(path)   # parts appeared since we looked
        tx = self._transaction()
        for child in children:
            tx.delete(f"{path}/{child}")
        tx.delete(path)
        results = self._commit(tx, f"delete lease {lease_id}")
        if any(isinstance(r, Exception) for r in results):
            # The children changed under us (only an operator could do that): delete what is
            # there now, child by child.
            try:
                self._delete_tree(path)
            except NoNodeError:
                pass

    def lease_stored_bytes(self, lease_id: str) -> int:
        """Bytes the lease occupies in ZooKeeper (header plus children), for metrics and benches."""
        path = layout.lease_path(lease_id)
        try:
            data, _ = self.zk.get(path)
        except NoNodeError:
            return 0
        return len(data) + sum(len(self.zk.get(f"{path}/{c}")[0]) for c in self._children(path))

    # -- helpers ----------------------------------------------------------------------------
    def _children(self, path: str) -> list[str]:
        try:
            return self.zk.get_children(path)
        except NoNodeError:
            return []

    def _get(self, path: str, cls):
        try:
            data, _ = self.zk.get(path)
        except NoNodeError:
            return None
        return cls.decode(data)


@dataclass
class _LeaseState:
    """A lease as stored: header znode version, generation, encoded parts and child znodes."""

    version: int
    generation: int
    parts: dict          # (table_id, part) -> encoded bytes, every part of the lease
    refs: dict           # (table_id, part) -> name of the child znode holding it
    children: set        # names of the lease znode's children (parts and orphans)
    complete: bool       # False: parts unknown (read without decoding), encode everything


class _StaleLease(Exception):
    """The lease changed in ZooKeeper since this store last saw it: read it again."""


def _max_generation(header: dict, children: Iterable[str]) -> int:
    """The highest generation of the header and of any child (orphans included), so a new
    generation's names never collide with a child left by an interrupted write."""
    gens = [int(header.get("generation", 0) or 0)]
    for child in children:
        part = layout.parse_lease_part_name(child)
        chunk = layout.parse_lease_chunk_name(child)
        if part is not None:
            gens.append(part[2])
        elif chunk is not None:
            gens.append(chunk[0])
    return max(gens)


#: kazoo's ways of saying "ZooKeeper did not answer": the operation may be retried. A request
#: made while the client is reconnecting ends in KazooTimeoutError (see _BoundedResult), one
#: cut off in flight in ConnectionLoss, one sent after the session ended in SessionExpiredError.
_CONNECTION_ERRORS = (ConnectionLoss, OperationTimeoutError, SessionExpiredError,
                      ConnectionClosedError, KazooTimeoutError)


def _retriable_on_connection_loss(method):
    """Turn a lost ZooKeeper connection into MetadataStoreUnavailable, which callers (and
    clients, over the wire) know to retry; every other error passes unchanged."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except _CONNECTION_ERRORS as e:
            operation = f"{method.__name__}({', '.join(_describe(a) for a in args)})"
            raise MetadataStoreUnavailable(
                f"the server lost its ZooKeeper connection (zk {self.address}) while "
                f"{operation}: {type(e).__name__}; retry") from None
    return call


def _describe(arg) -> str:
    """A short name for an argument in an error message (a lease id, not a whole record)."""
    for attr in ("lease_id", "name"):
        value = getattr(arg, attr, None)
        if isinstance(value, str):
            return repr(value)
    if isinstance(arg, SnapshotRecord):
        return f"table {arg.table_id} bucket {arg.bucket} snapshot {arg.snapshot_id}"
    if isinstance(arg, (str, int)):
        return repr(arg)
    return type(arg).__name__


for _name, _method in list(vars(MetadataStore).items()):
    if not _name.startswith("_") and callable(_method) and _name not in ("start", "close"):
        setattr(MetadataStore, _name, _retriable_on_connection_loss(_method))
