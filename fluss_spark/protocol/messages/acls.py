"""Messages of ACLs (coordinator): grant, list and remove who may do what on which resource."""

from __future__ import annotations

from dataclasses import dataclass

from fluss_spark.errors import ConfigError
from fluss_spark.protocol.acl import (AclBinding, AclFilter, OperationType, PermissionType,
                                      ResourceType, make_resource, parse_host, parse_principal)
from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.messages.base import Choice, ListOf, Message, Nested, Request, Str, wire

#: ACLs one request may create, or filters one request may drop with.
MAX_ACLS_PER_REQUEST = 1000
#: A resource name: ``cluster``, a database, ``db.table`` (100 characters each side) or ``*``.
RESOURCE_NAME = Str(max_len=201, min_len=1)
#: ``Type:name`` (``protocol.acl`` checks the form).
PRINCIPAL = Str(max_len=320, min_len=3)
HOST = Str(max_len=255, min_len=1)
_TYPES = tuple(t.value for t in ResourceType)
_OPERATIONS = tuple(o.value for o in OperationType)
_PERMISSIONS = tuple(p.value for p in PermissionType)


@dataclass(frozen=True)
class AclInfo(Message):
    """One ACL: ``principal`` is ALLOWed ``operation`` from ``host`` on the resource.
    ``resource_type`` is CLUSTER (named ``cluster``), DATABASE or TABLE (``db.table``);
    ANY is refused here, as are the operation ANY and malformed principals or names."""

    resource_type: str = wire(Choice(*_TYPES))
    resource_name: str = wire(RESOURCE_NAME)
    principal: str = wire(PRINCIPAL)
    operation: str = wire(Choice(*_OPERATIONS))
    host: str = wire(HOST, "*")
    permission: str = wire(Choice(*_PERMISSIONS), "ALLOW")

    def check(self) -> None:
        try:
            self.binding()
        except ConfigError as e:
            raise self.ERROR(f"invalid ACL: {e}") from None

    def binding(self) -> AclBinding:
        """The checked ACL (ConfigError when a part is invalid)."""
        if self.permission != PermissionType.ALLOW.value:
            raise ConfigError(f"permission {self.permission!r}: an ACL can only ALLOW")
        if self.operation == OperationType.ANY.value:
            raise ConfigError("operation ANY only matches ACLs in filters")
        return AclBinding(make_resource(ResourceType(self.resource_type), self.resource_name),
                          parse_principal(self.principal), OperationType(self.operation),
                          parse_host(self.host), PermissionType(self.permission))

    @classmethod
    def of(cls, acl: AclBinding) -> "AclInfo":
        return cls(acl.resource.type.value, acl.resource.name, acl.principal,
                   acl.operation.value, acl.host, acl.permission.value)


@dataclass(frozen=True)
class AclFilterInfo(Message):
    """Which ACLs to list or drop: each field absent (or ANY) matches every value."""

    resource_type: str = wire(Choice(*_TYPES), "ANY")
    resource_name: str | None = wire(RESOURCE_NAME, None)
    principal: str | None = wire(PRINCIPAL, None)
    operation: str = wire(Choice(*_OPERATIONS), "ANY")
    host: str | None = wire(HOST, None)
    permission: str = wire(Choice(*_PERMISSIONS), "ANY")

    def filter(self) -> AclFilter:
        return AclFilter(ResourceType(self.resource_type), self.resource_name, self.principal,
                         OperationType(self.operation), self.host,
                         PermissionType(self.permission))

    @classmethod
    def of(cls, f: AclFilter) -> "AclFilterInfo":
        return cls(f.resource_type.value, f.resource_name, f.principal, f.operation.value,
                   f.host, f.permission.value)


@dataclass(frozen=True)
class CreateAclsResponse(Message):
    """``created``: the ACLs that did not exist before (the others were already there)."""

    created: tuple[AclInfo, ...] = wire(ListOf(Nested(AclInfo)), ())


@dataclass(frozen=True)
class CreateAclsRequest(Request[CreateAclsResponse]):
    """Grant 1..1000 ACLs (all or, on an error, those before the failing resource)."""

    API_KEY = ApiKey.CREATE_ACLS
    RESPONSE = CreateAclsResponse
    acls: tuple[AclInfo, ...] = wire(ListOf(Nested(AclInfo), min_len=1,
                                            max_len=MAX_ACLS_PER_REQUEST))


@dataclass(frozen=True)
class ListAclsResponse(Message):
    acls: tuple[AclInfo, ...] = wire(ListOf(Nested(AclInfo)), ())


@dataclass(frozen=True)
class ListAclsRequest(Request[ListAclsResponse]):
    """The ACLs ``filter`` matches, on resources the caller may DESCRIBE."""

    API_KEY = ApiKey.LIST_ACLS
    RESPONSE = ListAclsResponse
    filter: AclFilterInfo = wire(Nested(AclFilterInfo), default_factory=AclFilterInfo)


@dataclass(frozen=True)
class DropAclsResponse(Message):
    dropped: tuple[AclInfo, ...] = wire(ListOf(Nested(AclInfo)), ())


@dataclass(frozen=True)
class DropAclsRequest(Request[DropAclsResponse]):
    """Remove every ACL that one of 1..1000 ``filters`` matches; ``dropped``: what was removed."""

    API_KEY = ApiKey.DROP_ACLS
    RESPONSE = DropAclsResponse
    filters: tuple[AclFilterInfo, ...] = wire(ListOf(Nested(AclFilterInfo), min_len=1,
                                                     max_len=MAX_ACLS_PER_REQUEST))
