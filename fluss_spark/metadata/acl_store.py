"""ACLs in ZooKeeper: one AclRecord znode per resource, and a change marker readers poll."""

from __future__ import annotations

from typing import Callable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from fluss_spark.errors import FlussError
from fluss_spark.metadata import layout
from fluss_spark.metadata.layout import AclRecord
from fluss_spark.metadata.zk import ZkSession, retriable_on_connection_loss
from fluss_spark.protocol.acl import AclBinding, Resource

#: Every ACL, by resource.
AclMap = dict[Resource, frozenset[AclBinding]]


@retriable_on_connection_loss
class ZkAclStore:
    """ACLs under ``/fluss/acls``; every change also moves the version of ``/fluss/acl_changes``
    in the same transaction, so a reader that saw version n and sees it again has missed
    nothing."""

    def __init__(self, session: ZkSession):
        self._session = session

    @property
    def address(self) -> str:
        return self._session.address

    def acl_change_version(self) -> int:
        """The version of the change marker (-1 before the first ACL was ever written)."""
        stat = self._session.zk.exists(layout.ACL_CHANGES)
        return -1 if stat is None else stat.version

    def load_acls(self) -> tuple[int, AclMap]:
        """(change version, every ACL); the version is read first, so the ACLs are at least as
        new as it."""
        version = self.acl_change_version()
        out: AclMap = {}
        for rtype in layout.ACL_RESOURCE_TYPES:
            base = layout.acl_type_path(rtype)
            for name in self._session.children(base):
                rec = self._session.get(f"{base}/{name}", AclRecord)
                if rec is not None and rec.acls:
                    out[rec.resource] = rec.acls
        return version, out

    def update_acls(self, resource: Resource,
                    change: Callable[[frozenset[AclBinding]], frozenset[AclBinding]]
                    ) -> tuple[frozenset[AclBinding], frozenset[AclBinding]]:
        """Apply ``change`` to the stored ACLs of ``resource`` (compare-and-set, retried when
        another writer got there first); returns (before, after). No ACLs left: no znode."""
        path = layout.acl_path(resource)
        zk = self._session.zk
        zk.ensure_path(layout.ACL_CHANGES)
        zk.ensure_path(layout.acl_type_path(resource.type))
        for _ in range(10):
            try:
                data, stat = zk.get(path)
                before, version = AclRecord.decode(data).acls, stat.version
            except NoNodeError:
                before, version = frozenset(), None
            after = frozenset(change(before))
            if after == before:
                return before, after
            tx = self._session.transaction()
            if version is None:
                tx.create(path, AclRecord(resource, after).encode())
            elif after:
                tx.set_data(path, AclRecord(resource, after).encode(), version=version)
            else:
                tx.delete(path, version=version)
            tx.set_data(layout.ACL_CHANGES, b"")
            results = self._session.commit(tx, f"change the ACLs of {resource}")
            if not any(isinstance(r, Exception) for r in results):
                return before, after
            if not any(isinstance(r, (BadVersionError, NodeExistsError, NoNodeError))
                       for r in results):
                raise FlussError(f"changing the ACLs of {resource} failed: {results!r}")
        raise FlussError(f"the ACLs of {resource} kept changing under this update; retry")
