"""The coordinator's ACL handlers: create, list and drop ACLs in ZooKeeper.

Who may change the ACLs of a resource: a super user, a principal allowed ALTER on the cluster,
or one allowed ALL on the resource (for a table: on its database, the smallest unit whose ACLs
a principal may manage, as in Apache Fluss). A list shows the ACLs of the resources the caller
may DESCRIBE.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Iterable

from fluss_spark.errors import AuthorizationFailed
from fluss_spark.metadata.store import MetadataStore
from fluss_spark.protocol import messages as m
from fluss_spark.protocol.acl import AclBinding, AclFilter, OperationType, Resource, ResourceType
from fluss_spark.server.authorizer import Authorizer
from fluss_spark.transport.dispatch import current_principal


class AclManager:
    """CREATE_ACLS, LIST_ACLS and DROP_ACLS over the store and the coordinator's ACL cache."""

    def __init__(self, store: MetadataStore, authorizer: Authorizer, lock: threading.RLock):
        self._store, self._authorizer, self._lock = store, authorizer, lock

    def _authorize_change(self, resources: Iterable[Resource]) -> None:
        if self._authorizer.allowed(OperationType.ALTER, Resource.cluster()):
            return
        for resource in sorted(set(resources)):
            owner = resource
            if resource.type is ResourceType.TABLE:
                owner = Resource.database_of(resource.name)
            if not self._authorizer.allowed(OperationType.ALL, owner):
                raise AuthorizationFailed(
                    f"principal {current_principal()!r} may not change the ACLs of {resource}: "
                    f"that needs a super user (super.users), ALTER on the cluster or ALL on "
                    f"{owner}")

    def create(self, req: m.CreateAclsRequest) -> m.CreateAclsResponse:
        wanted: dict[Resource, set[AclBinding]] = defaultdict(set)
        for info in req.acls:
            acl = info.binding()
            wanted[acl.resource].add(acl)
        self._authorize_change(wanted)
        created: list[AclBinding] = []
        with self._lock:
            try:
                for resource, acls in sorted(wanted.items()):
                    before, _ = self._store.update_acls(resource, _adding(frozenset(acls)))
                    created.extend(sorted(acls - before))
            finally:
                self._authorizer.cache.refresh(force=True)
        return m.CreateAclsResponse(tuple(m.AclInfo.of(a) for a in created))

    def list(self, req: m.ListAclsRequest) -> m.ListAclsResponse:
        wanted = req.filter.filter()
        self._authorizer.cache.refresh()
        return m.ListAclsResponse(tuple(
            m.AclInfo.of(a) for a in self._authorizer.cache.bindings()
            if wanted.matches(a) and self._authorizer.allowed(OperationType.DESCRIBE,
                                                              a.resource)))

    def drop(self, req: m.DropAclsRequest) -> m.DropAclsResponse:
        filters = [f.filter() for f in req.filters]
        dropped: list[AclBinding] = []
        with self._lock:
            self._authorizer.cache.refresh()
            resources = {a.resource for a in self._authorizer.cache.bindings()
                         if _any_match(filters, a)}
            self._authorize_change(resources)
            try:
                for resource in sorted(resources):
                    before, after = self._store.update_acls(
                        resource, lambda cur: frozenset(a for a in cur
                                                        if not _any_match(filters, a)))
                    dropped.extend(sorted(before - after))
            finally:
                self._authorizer.cache.refresh(force=True)
        return m.DropAclsResponse(tuple(m.AclInfo.of(a) for a in dropped))


def _adding(acls: frozenset[AclBinding]):
    """The change that adds ``acls`` to a resource's ACLs."""
    return lambda current: current | acls


def _any_match(filters: list[AclFilter], acl: AclBinding) -> bool:
    return any(f.matches(acl) for f in filters)
