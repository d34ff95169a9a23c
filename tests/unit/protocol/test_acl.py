"""ACL matching as Apache Fluss does it: the resource hierarchy, implied operations, hosts."""

from __future__ import annotations

import pytest

from fluss_spark.errors import ConfigError
from fluss_spark.protocol.acl import (AclBinding, AclFilter, OperationType, Resource,
                                      ResourceType, allowed, parse_operation, parse_principal,
                                      parse_resource)

R, W, D, ALL = (OperationType.READ, OperationType.WRITE, OperationType.DESCRIBE,
                OperationType.ALL)
ORDERS, OTHER = Resource.table("db.orders"), Resource.table("db2.other")


def acls(*bindings: AclBinding) -> dict:
    out: dict = {}
    for b in bindings:
        out.setdefault(b.resource, set()).add(b)
    return out


def may(grants, op, resource, principal="User:alice", host="10.0.0.1") -> bool:
    return allowed(grants, principal, host, op, resource)


def test_a_table_acl_allows_that_table_only_and_nobody_else():
    grants = acls(AclBinding(ORDERS, "User:alice", R))
    assert may(grants, R, ORDERS)
    assert not may(grants, R, Resource.table("db.other"))
    assert not may(grants, R, ORDERS, principal="User:bob")
    assert not may(grants, W, ORDERS)
    assert not may({}, R, ORDERS)           # nothing matching: denied


def test_a_database_acl_covers_its_tables_and_a_cluster_acl_covers_everything():
    grants = acls(AclBinding(Resource.database("db"), "User:alice", R))
    assert may(grants, R, ORDERS) and may(grants, R, Resource.database("db"))
    assert not may(grants, R, OTHER) and not may(grants, R, Resource.cluster())
    cluster = acls(AclBinding(Resource.cluster(), "User:alice", W))
    assert may(cluster, W, ORDERS) and may(cluster, W, OTHER)
    assert not may(cluster, R, ORDERS)


def test_wildcard_names_and_principals_match_every_one_of_their_kind():
    grants = acls(AclBinding(Resource.table("*"), "User:*", R))
    assert may(grants, R, ORDERS, principal="User:anyone")
    assert not may(grants, R, Resource.database("db"))


def test_all_implies_every_operation_and_describe_is_implied_by_the_others():
    assert all(may(acls(AclBinding(ORDERS, "User:alice", ALL)), op, ORDERS)
               for op in (R, W, D, OperationType.CREATE, OperationType.DROP,
                          OperationType.ALTER))
    for op in (R, W, OperationType.CREATE, OperationType.DROP, OperationType.ALTER, D):
        assert may(acls(AclBinding(ORDERS, "User:alice", op)), D, ORDERS), op
    assert not may(acls(AclBinding(ORDERS, "User:alice", D)), R, ORDERS)
    assert not may(acls(AclBinding(ORDERS, "User:alice", R)), W, ORDERS)


def test_an_acl_with_a_host_allows_only_from_that_address():
    grants = acls(AclBinding(ORDERS, "User:alice", R, host="10.0.0.1"))
    assert may(grants, R, ORDERS, host="10.0.0.1")
    assert not may(grants, R, ORDERS, host="10.0.0.2")
    assert not may(grants, R, ORDERS, host=None)


def test_filters_match_on_every_given_field_and_any_on_the_rest():
    acl = AclBinding(ORDERS, "User:alice", R)
    assert AclFilter().matches(acl)
    assert AclFilter.of(ORDERS, "User:alice", R, "*").matches(acl)
    assert AclFilter(ResourceType.TABLE).matches(acl)
    assert not AclFilter.of(Resource.database("db")).matches(acl)
    assert not AclFilter.of(principal="User:bob").matches(acl)
    assert not AclFilter.of(operation=W).matches(acl)


@pytest.mark.parametrize("text, expected", [
    ("cluster", Resource.cluster()), ("database:db", Resource.database("db")),
    ("table:db.orders", ORDERS), ("TABLE:db.orders", ORDERS), ("table:*", Resource.table("*")),
    ("cluster.db", Resource.database("db")), ("cluster.db.orders", ORDERS),
])
def test_resources_parse_in_this_projects_and_apache_fluss_s_forms(text, expected):
    assert parse_resource(text) == expected
    assert parse_resource(str(expected)) == expected


@pytest.mark.parametrize("text, error", [
    ("topic:x", "unknown resource type 'topic'"), ("table:orders", "invalid resource table"),
    ("database:a.b", "invalid resource database"), ("any:x", "only for filters"),
])
def test_bad_resources_are_refused_in_one_line(text, error):
    with pytest.raises(ConfigError, match=error):
        parse_resource(text)


def test_principals_and_operations_are_checked():
    assert parse_principal("User:alice") == "User:alice"
    with pytest.raises(ConfigError, match="did you mean User:alice"):
        parse_principal("alice")
    with pytest.raises(ConfigError, match="malformed principal"):
        parse_principal("User:a b")
    assert parse_operation("read") is R
    with pytest.raises(ConfigError, match="unknown operation 'FLY'"):
        parse_operation("FLY")
    with pytest.raises(ConfigError, match="only matches ACLs in filters"):
        parse_operation("ANY")
    assert parse_operation("ANY", filter_ok=True) is OperationType.ANY
