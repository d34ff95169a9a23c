"""Messages of KV snapshot leases (coordinator): pins that keep snapshots from being deleted."""

from __future__ import annotations

from dataclasses import dataclass

from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.messages.base import (Bool, Int, ListOf, MapOf, Message, Nested,
                                                Request, Str, wire)

#: Lease ids and holders: their rule (protocol/names.py) is checked by the lease manager, which
#: answers InvalidLeaseId; on the wire they are bounded strings.
LEASE_ID = Str(max_len=1024)
#: {table_id: {bucket: snapshot_id}}; ids may come as digit strings from loosely typed clients.
PINS = MapOf(Int(digits_ok=True), MapOf(Int(digits_ok=True), Int()))


@dataclass(frozen=True)
class LeaseInfo(Message):
    """A KV snapshot lease: its expiry and its pins (table id -> bucket -> snapshot id)."""

    lease_id: str = wire(LEASE_ID)
    expires_at_ms: int = wire(Int(), 0)
    created_ms: int = wire(Int(), 0)
    tables: dict = wire(PINS, default_factory=dict, compare=False)
    pin_count: int = wire(Int(), 0)
    holders: dict = wire(MapOf(Int(digits_ok=True), Str()), default_factory=dict, compare=False)
    owner: str | None = wire(Str(), None)


@dataclass(frozen=True)
class AcquireLeaseResponse(Message):
    """``unavailable``: the pins not granted because that snapshot is not registered (any more)."""

    unavailable: dict = wire(PINS, default_factory=dict)
    expires_at_ms: int = wire(Int(), 0)


@dataclass(frozen=True)
class AcquireLeaseRequest(Request[AcquireLeaseResponse]):
    """Pin ``tables`` for ``duration_ms`` (1 ms to 365 days) under ``lease_id`` (created, or
    extended and added to); ``holder``: the query the pins are for (another holder's table is
    LeaseHeldByOther). Lease ids and holders follow ``protocol/names.py`` (InvalidLeaseId)."""

    API_KEY = ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE
    RESPONSE = AcquireLeaseResponse
    lease_id: str = wire(LEASE_ID)
    duration_ms: int = wire(Int(None, None))
    tables: dict = wire(PINS)
    holder: str | None = wire(LEASE_ID, None)


@dataclass(frozen=True)
class RenewLeaseResponse(Message):
    expires_at_ms: int = wire(Int())


@dataclass(frozen=True)
class RenewLeaseRequest(Request[RenewLeaseResponse]):
    API_KEY = ApiKey.RENEW_KV_SNAPSHOT_LEASE
    RESPONSE = RenewLeaseResponse
    lease_id: str = wire(LEASE_ID)
    duration_ms: int = wire(Int(None, None))


@dataclass(frozen=True)
class ReleaseLeaseResponse(Message):
    remaining_pins: int = wire(Int())


@dataclass(frozen=True)
class ReleaseLeaseRequest(Request[ReleaseLeaseResponse]):
    """Unpin buckets ``{table_id: [bucket]}``."""

    API_KEY = ApiKey.RELEASE_KV_SNAPSHOT_LEASE
    RESPONSE = ReleaseLeaseResponse
    lease_id: str = wire(LEASE_ID)
    tables: dict = wire(MapOf(Int(digits_ok=True), ListOf(Int(digits_ok=True))))


@dataclass(frozen=True)
class DropLeaseResponse(Message):
    """``dropped``: false when there was no such lease (servers before this field always
    dropped)."""

    dropped: bool = wire(Bool(), True)


@dataclass(frozen=True)
class DropLeaseRequest(Request[DropLeaseResponse]):
    API_KEY = ApiKey.DROP_KV_SNAPSHOT_LEASE
    RESPONSE = DropLeaseResponse
    lease_id: str = wire(LEASE_ID)


@dataclass(frozen=True)
class ListLeasesResponse(Message):
    leases: tuple[LeaseInfo, ...] = wire(ListOf(Nested(LeaseInfo)), ())


@dataclass(frozen=True)
class ListLeasesRequest(Request[ListLeasesResponse]):
    API_KEY = ApiKey.LIST_KV_SNAPSHOT_LEASES
    RESPONSE = ListLeasesResponse


@dataclass(frozen=True)
class DescribeLeaseRequest(Request[LeaseInfo]):
    API_KEY = ApiKey.DESCRIBE_KV_SNAPSHOT_LEASE
    RESPONSE = LeaseInfo
    lease_id: str = wire(LEASE_ID)
