"""One kazoo session: bounded waits, retry on connection loss, and fenced transactions."""

from __future__ import annotations

import functools
from typing import Callable, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (BadVersionError, ConnectionClosedError, ConnectionLoss,
                              NoNodeError, OperationTimeoutError, SessionExpiredError)
from kazoo.handlers.threading import AsyncResult, KazooTimeoutError, SequentialThreadingHandler
from kazoo.security import READ_ACL_UNSAFE, make_digest_acl

from fluss_spark.errors import FlussError, MetadataStoreUnavailable, NotCoordinatorLeader
from fluss_spark.metadata import layout
from fluss_spark.metadata.layout import SnapshotRecord

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


class ZkSession:
    """One kazoo client and the coordinator's fence: every write made through ``write``,
    ``transaction`` or ``delete_tree`` checks the fence once ``claim_epoch`` set it.

    ``zookeeper_address`` is ``host:port[,host:port...][/chroot]``; ``digest``
    (``username:password``) makes every node created (and ``/fluss`` itself) changeable by that
    user only.
    """

    def __init__(self, zookeeper_address: str, *, timeout_s: float = 15.0,
                 session_timeout_s: float = 10.0, digest: str | None = None):
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
        #: (epoch path, znode version) once this session writes for the active coordinator:
        #: every write then checks it in the same transaction, so a coordinator that lost its
        #: leadership (paused past its session, cut off) cannot change anything any more.
        self._fence: tuple[str, int] | None = None
        #: Called when a write found the fence taken by another coordinator.
        self.on_fenced: Callable[[], None] | None = None

    def start(self) -> None:
        try:
            self.zk.start(timeout=self._timeout_s)
        except Exception as e:  # noqa: BLE001 - kazoo raises its own timeout type
            raise FlussError(f"cannot reach ZooKeeper at {self.address}: {e}; "
                             "is it running?") from None
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

    def _protect(self, path: str, acl: list) -> None:
        """Give ``path`` and the nodes below it this session's ACL (nodes made before ZooKeeper
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

    # -- fencing ----------------------------------------------------------------------------
    def claim_epoch(self) -> int:
        """Make this session the coordinator's writer: bump the coordinator epoch and fence
        every later write on it. Returns the new epoch."""
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

    # -- transactions -----------------------------------------------------------------------
    def transaction(self):
        """A kazoo transaction that starts with the fence check (when fenced)."""
        tx = self.zk.transaction()
        if self._fence is not None:
            tx.check(*self._fence)
        return tx

    def commit(self, tx, what: str) -> list:
        """Commit; the results of the caller's own operations (the fence check taken off)."""
        return self.committed(tx.commit(), what)

    def committed(self, results: list, what: str) -> list:
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

    def write(self, op: str, path: str, *args, **kwargs):
        """``create``, ``set_data`` or ``delete``, fenced when this session writes for the
        active coordinator; raises what the plain kazoo call raises (NodeExistsError, ...)."""
        if self._fence is None:
            return getattr(self.zk, "set" if op == "set_data" else op)(path, *args, **kwargs)
        tx = self.transaction()
        getattr(tx, op)(path, *args, **kwargs)
        (result,) = self.commit(tx, f"{op} {path}")
        if isinstance(result, Exception):
            raise result
        return result

    def delete_tree(self, path: str) -> None:
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
                tx = self.transaction()
                for node in nodes[i:i + 500]:
                    tx.delete(node)
                if any(isinstance(r, Exception) for r in self.commit(tx, f"delete {path}")):
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

    # -- reads ------------------------------------------------------------------------------
    def children(self, path: str) -> list[str]:
        """The children of ``path``; none when it does not exist."""
        try:
            return self.zk.get_children(path)
        except NoNodeError:
            return []

    def children_version(self, path: str) -> tuple[list[str], int | None]:
        """The children of ``path`` and the zxid of the last change to them (its ``pzxid``:
        creating or deleting a child moves it); ([], None) when ``path`` does not exist."""
        try:
            children, stat = self.zk.get_children(path, include_data=True)
        except NoNodeError:
            return [], None
        return children, stat.pzxid

    def get(self, path: str, cls):
        """The record of type ``cls`` at ``path``, or None."""
        try:
            data, _ = self.zk.get(path)
        except NoNodeError:
            return None
        return cls.decode(data)


# -- retry on connection loss ----------------------------------------------------------------
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


_C = TypeVar("_C", bound=type)


def retriable_on_connection_loss(cls: _C) -> _C:
    """Class decorator: every public method of ``cls`` but ``start`` and ``close`` raises
    MetadataStoreUnavailable when ZooKeeper does not answer (``cls`` has ``address``)."""
    for name, method in list(vars(cls).items()):
        if not name.startswith("_") and callable(method) and name not in ("start", "close"):
            setattr(cls, name, _retriable_on_connection_loss(method))
    return cls
