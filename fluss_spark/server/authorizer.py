"""Authorization by ACL: each server's cache of the ACLs in ZooKeeper, and the checks handlers
make against it (the model: ``protocol/acl.py``).

With PLAINTEXT everything is allowed. With SASL a super user (``super.users``) and the servers'
internal principal may do anything; anyone else needs an ACL that allows the operation on the
resource or on one above it (table < database < cluster); nothing matching means refused with
AuthorizationFailed, as Apache Fluss's default authorizer does.

Every server polls the version of ``/fluss/acl_changes`` every ``ACL_REFRESH_S`` and re-reads the
ACLs when it moved, so an added or removed ACL is enforced everywhere within ACL_REFRESH_S plus
one ZooKeeper read (the coordinator that made the change at once). While ZooKeeper does not
answer, a server keeps enforcing the ACLs it read last.
"""

from __future__ import annotations

import logging
import threading
from typing import Iterable

from fluss_spark.errors import AuthorizationFailed
from fluss_spark.metadata.acl_store import AclMap
from fluss_spark.metadata.store import MetadataStore
from fluss_spark.protocol.acl import (AclBinding, OperationType, Resource, allowed,
                                      user_principal)
from fluss_spark.server.security import Security
from fluss_spark.transport.dispatch import current_peer_address, current_principal

log = logging.getLogger(__name__)

#: How often a server looks for ACL changes (the bound on how late a change is enforced).
ACL_REFRESH_S = 0.5


class AclCache:
    """The ACLs as last read from ZooKeeper, re-read when their change marker moved."""

    def __init__(self, store: MetadataStore, interval_s: float = ACL_REFRESH_S):
        self._store, self.interval_s = store, interval_s
        self._lock = threading.Lock()
        self._version: int | None = None
        self._acls: AclMap = {}

    def acls(self) -> AclMap:
        """Every ACL by resource (read from ZooKeeper on the first call)."""
        if self._version is None:
            self.refresh()
        return self._acls

    def bindings(self) -> list[AclBinding]:
        return sorted(a for acls in self.acls().values() for a in acls)

    def refresh(self, *, force: bool = False) -> bool:
        """Re-read the ACLs if their change marker moved (or ``force``); whether it did."""
        with self._lock:
            if not force and self._version is not None \
                    and self._store.acl_change_version() == self._version:
                return False
            self._version, self._acls = self._store.load_acls()
            return True

    def start(self, stopping: threading.Event, name: str) -> threading.Thread:
        """Poll for changes every ``interval_s`` until ``stopping`` is set."""
        def loop() -> None:
            failures = 0
            while not stopping.wait(self.interval_s):
                try:
                    self.refresh()
                except Exception as e:  # noqa: BLE001 - keep the last ACLs; retried next round
                    # One line when reading starts failing (e.g. ZooKeeper is down), one when
                    # it works again: a poll every interval must not flood the log.
                    if failures == 0 and not stopping.is_set():
                        log.warning("re-reading the ACLs from ZooKeeper failed: %s: %s; "
                                    "enforcing the ACLs read last until it works again",
                                    type(e).__name__, e)
                    failures += 1
                    continue
                if failures:
                    log.info("ACLs re-read from ZooKeeper again after %d failed attempts",
                             failures)
                    failures = 0
        thread = threading.Thread(target=loop, name=name, daemon=True)
        thread.start()
        return thread


class Authorizer:
    """The ACL checks of one server's handlers, for the principal of the current request."""

    def __init__(self, security: Security, cache: AclCache):
        self.security, self.cache = security, cache

    def allowed(self, operation: OperationType, resource: Resource) -> bool:
        """Whether the current request's principal may do ``operation`` on ``resource``."""
        who = current_principal()
        if self.security.is_super(who):     # also: PLAINTEXT, where nobody authenticates
            return True
        if who is None:
            return False
        return allowed(self.cache.acls(), user_principal(who), current_peer_address(),
                       operation, resource)

    def check(self, operation: OperationType, resource: Resource,
              action: str | None = None) -> None:
        """AuthorizationFailed unless ``allowed``; ``action`` says what was refused."""
        if self.allowed(operation, resource):
            return
        who = current_principal()
        what = action or f"{operation.value} {resource}"
        raise AuthorizationFailed(
            f"principal {who!r} may not {what}: no ACL allows {operation.value} on {resource} "
            f"(a super user grants it: fluss-spark acl add --principal User:{who} "
            f"--operation {operation.value} --resource {resource})")

    def check_tables(self, operation: OperationType, names: Iterable[str], action: str) -> None:
        for name in sorted(set(names)):
            self.check(operation, Resource.table(name), f"{action} (table {name})")

    def visible(self, name: str) -> bool:
        """Whether the current principal may see that table ``name`` exists (DESCRIBE)."""
        return self.allowed(OperationType.DESCRIBE, Resource.table(name))
