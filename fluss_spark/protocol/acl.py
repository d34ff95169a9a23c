"""Access control lists: resources, operations, principals, and which ACLs allow a request.

The model is Apache Fluss's. An ACL (``AclBinding``) says: principal P (``User:alice``) is
ALLOWed operation O from host H (``*``: any) on resource R. Resources form a hierarchy
``cluster > database > table``: an ACL on a database covers its tables, one on the cluster
covers everything, and the name ``*`` stands for every resource of its type. ``ALL`` allows
every operation; ``DESCRIBE`` (seeing that something exists) is allowed by any of READ, WRITE,
CREATE, DROP, ALTER and DESCRIBE. ``ANY`` only appears in filters (list and remove). Nothing
matches means denied; super users never reach the ACLs. Client and server both parse with
this module, so a name one side accepts the other accepts too.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from fluss_spark.errors import ConfigError


class ResourceType(str, enum.Enum):
    """What an ACL is about; ANY only in filters."""

    ANY = "ANY"
    CLUSTER = "CLUSTER"
    DATABASE = "DATABASE"
    TABLE = "TABLE"


class OperationType(str, enum.Enum):
    """What a principal may do; ANY only in filters, ALL allows every operation."""

    ANY = "ANY"
    ALL = "ALL"
    READ = "READ"
    WRITE = "WRITE"
    CREATE = "CREATE"
    DROP = "DROP"
    ALTER = "ALTER"
    DESCRIBE = "DESCRIBE"


class PermissionType(str, enum.Enum):
    """ALLOW is the only permission an ACL grants (as in Apache Fluss); ANY only in filters."""

    ANY = "ANY"
    ALLOW = "ALLOW"


#: The name of the one cluster resource.
CLUSTER_NAME = "cluster"
#: The resource name (and host) that stands for every one.
WILDCARD = "*"
_DATABASE = re.compile(r"[A-Za-z0-9_]{1,100}")
_TABLE = re.compile(r"[A-Za-z0-9_]{1,100}\.[A-Za-z0-9_]{1,100}")
#: ``Type:name``: a principal type (User, Group, Role...) and a name without blanks or colons.
_PRINCIPAL = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}:[^\s:]{1,255}")
_HOST = re.compile(r"\*|[A-Za-z0-9.:_-]{1,255}")
#: The operations that an ACL of the key's operation allows besides itself.
_IMPLIES_DESCRIBE = frozenset({OperationType.READ, OperationType.WRITE, OperationType.CREATE,
                               OperationType.DROP, OperationType.ALTER})
RESOURCE_SYNTAX = "cluster, database:<db> or table:<db>.<table> (<name> may be *)"
PRINCIPAL_SYNTAX = "Type:name, e.g. User:alice"


@dataclass(frozen=True, order=True)
class Resource:
    """A resource: the cluster, a database, or a table ``db.table``."""

    type: ResourceType
    name: str

    @classmethod
    def cluster(cls) -> "Resource":
        return cls(ResourceType.CLUSTER, CLUSTER_NAME)

    @classmethod
    def database(cls, name: str) -> "Resource":
        return cls(ResourceType.DATABASE, name)

    @classmethod
    def table(cls, name: str) -> "Resource":
        return cls(ResourceType.TABLE, name)

    @classmethod
    def database_of(cls, table: str) -> "Resource":
        """The database of table ``db.table`` (of ``*``: every database)."""
        return cls.database(table.split(".", 1)[0])

    def lineage(self) -> tuple["Resource", ...]:
        """This resource, the ones above it, and the wildcards of their types: every resource
        an ACL may name to cover this one."""
        if self.type is ResourceType.TABLE:
            return (self, Resource.table(WILDCARD), Resource.database_of(self.name),
                    Resource.database(WILDCARD), Resource.cluster())
        if self.type is ResourceType.DATABASE:
            return self, Resource.database(WILDCARD), Resource.cluster()
        return (self,)

    def __str__(self) -> str:
        if self.type is ResourceType.CLUSTER:
            return CLUSTER_NAME
        return f"{self.type.value.lower()}:{self.name}"


def parse_resource(text: object, what: str = "resource") -> Resource:
    """``cluster``, ``database:db``, ``table:db.table`` (or Apache Fluss's ``cluster.db`` and
    ``cluster.db.table``); ConfigError naming ``what`` otherwise."""
    if not isinstance(text, str):
        raise ConfigError(f"{what} must be a string ({RESOURCE_SYNTAX})")
    kind, sep, name = text.partition(":")
    if not sep and text.startswith(f"{CLUSTER_NAME}."):       # Apache Fluss's SQL form
        parts = text.split(".", 1)[1]
        kind, name = ("table" if "." in parts else "database"), parts
    elif not sep:
        kind, name = text, CLUSTER_NAME
    try:
        rtype = ResourceType(kind.upper())
    except ValueError:
        raise ConfigError(f"unknown {what} type {kind!r}: use {RESOURCE_SYNTAX}") from None
    return make_resource(rtype, name, what)


def make_resource(rtype: ResourceType, name: str, what: str = "resource") -> Resource:
    """The resource, its name checked against its type's rule (ConfigError otherwise)."""
    if rtype is ResourceType.CLUSTER:
        if name != CLUSTER_NAME:
            raise ConfigError(f"{what}: the cluster resource is named {CLUSTER_NAME!r}, "
                              f"not {name!r}")
    elif rtype is ResourceType.DATABASE:
        if name != WILDCARD and not _DATABASE.fullmatch(name):
            raise ConfigError(f"invalid {what} database name {name!r}: letters, digits and "
                              "underscores, or *")
    elif rtype is ResourceType.TABLE:
        if name != WILDCARD and not _TABLE.fullmatch(name):
            raise ConfigError(f"invalid {what} table name {name!r}: use <db>.<table> of "
                              "letters, digits and underscores, or *")
    else:
        raise ConfigError(f"{what} type ANY is only for filters: use {RESOURCE_SYNTAX}")
    return Resource(rtype, name)


def parse_principal(text: object, what: str = "principal") -> str:
    """``Type:name`` (``User:alice``; ``User:*`` is every user); ConfigError otherwise."""
    if not isinstance(text, str) or not _PRINCIPAL.fullmatch(text):
        hint = f"; did you mean User:{text}?" if isinstance(text, str) and \
            _PRINCIPAL.fullmatch(f"User:{text}") else ""
        raise ConfigError(f"malformed {what} {text!r}: use {PRINCIPAL_SYNTAX}{hint}")
    return text


def parse_operation(text: object, *, filter_ok: bool = False) -> OperationType:
    """An operation by name (any case); ANY only when ``filter_ok``."""
    names = [o.value for o in OperationType if filter_ok or o is not OperationType.ANY]
    try:
        op = OperationType(str(text).upper())
    except ValueError:
        raise ConfigError(f"unknown operation {text!r}: use one of {', '.join(names)}") from None
    if op is OperationType.ANY and not filter_ok:
        raise ConfigError(f"operation ANY only matches ACLs in filters; grant one of "
                          f"{', '.join(names)}")
    return op


def parse_host(text: object) -> str:
    if not isinstance(text, str) or not _HOST.fullmatch(text):
        raise ConfigError(f"malformed host {text!r}: an IP address or * (every host)")
    return text


def user_principal(username: str) -> str:
    """The principal of an authenticated username (SASL PLAIN users are ``User`` principals)."""
    return f"User:{username}"


@dataclass(frozen=True, order=True)
class AclBinding:
    """One ACL: ``principal`` is allowed ``operation`` from ``host`` on ``resource``."""

    resource: Resource
    principal: str
    operation: OperationType
    host: str = WILDCARD
    permission: PermissionType = PermissionType.ALLOW

    def allows(self, principal: str, host: str | None, operation: OperationType) -> bool:
        """Whether this ACL lets ``principal`` from ``host`` do ``operation`` (on a resource
        in its lineage)."""
        if self.permission is not PermissionType.ALLOW:
            return False
        if self.principal != principal and \
                self.principal != principal.split(":", 1)[0] + ":" + WILDCARD:
            return False
        if self.host != WILDCARD and self.host != host:
            return False
        return (self.operation is operation or self.operation is OperationType.ALL
                or (operation is OperationType.DESCRIBE
                    and self.operation in _IMPLIES_DESCRIBE))

    def __str__(self) -> str:
        return (f"{self.principal} {self.permission.value} {self.operation.value} on "
                f"{self.resource} from {self.host}")


@dataclass(frozen=True)
class AclFilter:
    """Which ACLs a list or a remove matches; None (or ANY) matches every value."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    principal: str | None = None
    operation: OperationType = OperationType.ANY
    host: str | None = None
    permission: PermissionType = PermissionType.ANY

    @classmethod
    def of(cls, resource: Resource | None = None, principal: str | None = None,
           operation: OperationType = OperationType.ANY, host: str | None = None) -> "AclFilter":
        return cls(resource.type if resource else ResourceType.ANY,
                   resource.name if resource else None, principal, operation, host)

    def matches(self, acl: AclBinding) -> bool:
        return ((self.resource_type is ResourceType.ANY
                 or self.resource_type is acl.resource.type)
                and self.resource_name in (None, acl.resource.name)
                and self.principal in (None, acl.principal)
                and self.operation in (OperationType.ANY, acl.operation)
                and self.host in (None, acl.host)
                and self.permission in (PermissionType.ANY, acl.permission))


def allowed(acls: Mapping[Resource, Iterable[AclBinding]], principal: str, host: str | None,
            operation: OperationType, resource: Resource) -> bool:
    """Whether some ACL of ``acls`` (by resource) allows ``principal`` (``User:alice``) from
    ``host`` to do ``operation`` on ``resource``, directly or through a resource above it."""
    return any(acl.allows(principal, host, operation)
               for r in resource.lineage() for acl in acls.get(r, ()))
