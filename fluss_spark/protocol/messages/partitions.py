"""Coordinator messages about the partitions of partitioned tables."""

from __future__ import annotations

from dataclasses import dataclass

from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.messages.base import (Bool, Empty, ListOf, MapOf, Message,
                                                Nested, Request, Str, wire)
from fluss_spark.protocol.messages.records import COLUMN, MAX_PARTITIONS, PartitionInfo

#: A partition spec: {partition key: value}, one entry per partition key of the table (the
#: coordinator checks the keys against the table and each value against the naming rule).
SPEC = MapOf(COLUMN, Str(max_len=200))


@dataclass(frozen=True)
class ListPartitionsResponse(Message):
    partitions: tuple[PartitionInfo, ...] = wire(
        ListOf(Nested(PartitionInfo), max_len=MAX_PARTITIONS), ())


@dataclass(frozen=True)
class ListPartitionsRequest(Request[ListPartitionsResponse]):
    """The partitions of ``table``; TABLE_NOT_PARTITIONED for an unpartitioned table."""

    API_KEY = ApiKey.LIST_PARTITIONS
    RESPONSE = ListPartitionsResponse
    table: str = wire(Str(max_len=1024))


@dataclass(frozen=True)
class CreatePartitionRequest(Request[PartitionInfo]):
    """Create the partition ``spec`` of ``table``; answers the partition (also when it existed
    and ``ignore_if_exists`` is set)."""

    API_KEY = ApiKey.CREATE_PARTITION
    RESPONSE = PartitionInfo
    table: str = wire(Str(max_len=1024))
    spec: dict = wire(SPEC)
    ignore_if_exists: bool = wire(Bool(), False)


@dataclass(frozen=True)
class DropPartitionRequest(Request[Empty]):
    """Drop the partition ``spec`` of ``table``: its data, snapshots and lease pins."""

    API_KEY = ApiKey.DROP_PARTITION
    RESPONSE = Empty
    table: str = wire(Str(max_len=1024))
    spec: dict = wire(SPEC)
    ignore_if_not_exists: bool = wire(Bool(), False)


__all__ = ["CreatePartitionRequest", "DropPartitionRequest", "ListPartitionsRequest",
           "ListPartitionsResponse", "PartitionInfo"]
