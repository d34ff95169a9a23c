"""Messages of KV snapshot leases (coordinator): pins that keep snapshots from being deleted."""

from __future__ import annotations

from dataclasses import dataclass

from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.messages.base import (Bool, Int, ListOf, MapOf, Message, Nested,
                                                Request, wire)
from fluss_spark.protocol.messages.records import LEASE_ID, PARTITION_PINS, PINS, LeaseInfo

#: {table_id: [bucket]}: buckets to release.
BUCKETS = MapOf(Int(digits_ok=True), ListOf(Int(digits_ok=True)))
#: {table_id: {partition_id: [bucket]}}: buckets of partitions to release.
PARTITION_BUCKETS = MapOf(Int(digits_ok=True), BUCKETS)


@dataclass(frozen=True)
class AcquireLeaseResponse(Message):
    """``unavailable``: the pins not granted because that snapshot is not registered (any more);
    ``unavailable_partitions`` the same of partitions' pins. A server that knows partition pins
    always sends ``unavailable_partitions`` (maybe empty): its absence tells a client that the
    server ignored the request's ``partitions``."""

    unavailable: dict = wire(PINS, default_factory=dict)
    expires_at_ms: int = wire(Int(), 0)
    unavailable_partitions: dict | None = wire(PARTITION_PINS, None, omit_none=True)


@dataclass(frozen=True)
class AcquireLeaseRequest(Request[AcquireLeaseResponse]):
    """Pin ``tables`` (unpartitioned tables' buckets) and ``partitions`` (partitions' buckets;
    absent in older requests) for ``duration_ms`` (1 ms to 365 days) under ``lease_id``
    (created, or extended and added to); ``holder``: the query the pins are for (another
    holder's table is LeaseHeldByOther). Lease ids and holders follow ``protocol/names.py``
    (InvalidLeaseId)."""

    API_KEY = ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE
    RESPONSE = AcquireLeaseResponse
    lease_id: str = wire(LEASE_ID)
    duration_ms: int = wire(Int(None, None))
    tables: dict = wire(PINS)
    holder: str | None = wire(LEASE_ID, None)
    partitions: dict | None = wire(PARTITION_PINS, None, omit_none=True)


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
    """Unpin buckets: ``tables`` ``{table_id: [bucket]}`` those buckets of the table and of
    every one of its partitions (all of its buckets: all of its pins), ``partitions``
    ``{table_id: {partition_id: [bucket]}}`` those of one partition (absent in older requests)."""

    API_KEY = ApiKey.RELEASE_KV_SNAPSHOT_LEASE
    RESPONSE = ReleaseLeaseResponse
    lease_id: str = wire(LEASE_ID)
    tables: dict = wire(BUCKETS)
    partitions: dict | None = wire(PARTITION_BUCKETS, None, omit_none=True)


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
