"""The servers' ACL checks: super users bypass, PLAINTEXT allows all, changes are re-read."""

from __future__ import annotations

import pytest

from fluss_spark.errors import AuthorizationFailed
from fluss_spark.protocol.acl import AclBinding, OperationType, Resource
from fluss_spark.server.authorizer import AclCache, Authorizer
from fluss_spark.server.security import Security
from fluss_spark.transport.dispatch import run_as

ORDERS = Resource.table("db.orders")
READ = OperationType.READ


class FakeAclStore:
    """The two MetadataStore calls AclCache makes, over a dict; counts full loads."""

    def __init__(self):
        self.version, self.acls, self.loads = -1, {}, 0

    def grant(self, acl: AclBinding) -> None:
        self.acls[acl.resource] = self.acls.get(acl.resource, frozenset()) | {acl}
        self.version += 1

    def revoke_all(self) -> None:
        self.acls, self.version = {}, self.version + 1

    def acl_change_version(self) -> int:
        return self.version

    def load_acls(self):
        self.loads += 1
        return self.version, dict(self.acls)


@pytest.fixture
def store():
    return FakeAclStore()


def sasl_authorizer(store) -> Authorizer:
    return Authorizer(Security(sasl=True, users={"admin": "x", "alice": "y"},
                               super_users=frozenset({"admin"})), AclCache(store))


def test_without_an_acl_a_user_is_refused_in_a_line_that_says_how_to_grant(store):
    auth = sasl_authorizer(store)
    with pytest.raises(AuthorizationFailed) as err:
        run_as("alice", auth.check, READ, ORDERS, "scan db.orders", address="127.0.0.1")
    assert str(err.value).startswith("principal 'alice' may not scan db.orders: no ACL allows "
                                      "READ on table:db.orders")
    assert "fluss-spark acl add --principal User:alice --operation READ" in str(err.value)
    assert run_as("admin", auth.allowed, READ, ORDERS)                # a super user bypasses
    assert run_as("internal", auth.allowed, READ, ORDERS)             # so do the servers
    assert not run_as(None, auth.allowed, READ, ORDERS)


def test_plaintext_allows_everything(store):
    auth = Authorizer(Security(), AclCache(store))
    assert run_as(None, auth.allowed, OperationType.DROP, Resource.cluster())


def test_acls_are_re_read_only_when_their_change_marker_moved(store):
    auth = sasl_authorizer(store)
    assert not run_as("alice", auth.allowed, READ, ORDERS, address="10.0.0.7")
    store.grant(AclBinding(ORDERS, "User:alice", READ, host="10.0.0.7"))
    assert auth.cache.refresh()
    assert run_as("alice", auth.allowed, READ, ORDERS, address="10.0.0.7")
    assert not run_as("alice", auth.allowed, READ, ORDERS, address="10.0.0.8")
    loads = store.loads
    assert not auth.cache.refresh() and store.loads == loads         # unchanged: no reload
    store.revoke_all()
    assert auth.cache.refresh()
    assert not run_as("alice", auth.allowed, READ, ORDERS, address="10.0.0.7")
