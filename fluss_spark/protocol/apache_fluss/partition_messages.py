"""Apache Fluss messages of partitioned tables: listing, creating and dropping partitions.

Field numbers and labels follow Fluss 0.9.1's wire format (``docs/apache_fluss_wire.md``). The
partition fields of the other requests (FETCH_LOG, LIST_OFFSETS, KV snapshots and leases,
GET_METADATA) are in ``messages``.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from fluss_spark.protocol.apache_fluss.api import FlussApiKey
from fluss_spark.protocol.apache_fluss.messages import EmptyResponse, FlussRequest, PbTablePath
from fluss_spark.protocol.apache_fluss.proto import (BOOL, INT64, MESSAGE, STRING, ProtoMessage,
                                                     message, pb)


@message
class PbKeyValue(ProtoMessage):
    """One partition key and its value."""

    key: str = pb(1, STRING, required=True)
    value: str = pb(2, STRING, required=True)


@message
class PbPartitionSpec(ProtoMessage):
    """A partition's value per partition key (a partial spec names only some keys)."""

    partition_key_values: list[PbKeyValue] = pb(1, MESSAGE, repeated=True, message=PbKeyValue)

    @classmethod
    def of(cls, keys: Sequence[str], spec: Mapping[str, str]) -> "PbPartitionSpec":
        """The spec of ``{key: value}``, in the order of ``keys`` (the table's partition keys)."""
        return cls(partition_key_values=[PbKeyValue(key=k, value=spec[k]) for k in keys])


@message
class PbPartitionInfo(ProtoMessage):
    """A partition's id (unique in the cluster) and spec."""

    partition_id: int = pb(1, INT64, required=True)
    partition_spec: PbPartitionSpec = pb(2, MESSAGE, required=True, message=PbPartitionSpec)


@message
class ListPartitionInfosResponse(ProtoMessage):
    """The partitions of a table, in no particular order."""

    partitions_info: list[PbPartitionInfo] = pb(1, MESSAGE, repeated=True,
                                                message=PbPartitionInfo)


@message
class ListPartitionInfosRequest(FlussRequest[ListPartitionInfosResponse]):
    """List a partitioned table's partitions (those matching ``partial_partition_spec``)."""

    API_KEY = FlussApiKey.LIST_PARTITION_INFOS
    RESPONSE = ListPartitionInfosResponse
    table_path: PbTablePath = pb(1, MESSAGE, required=True, message=PbTablePath)
    partial_partition_spec: PbPartitionSpec | None = pb(2, MESSAGE, message=PbPartitionSpec)


@message
class CreatePartitionRequest(FlussRequest[EmptyResponse]):
    """Create one partition. Fluss names field 3 ``ignore_if_not_exists``; it means: succeed
    when the partition exists already."""

    API_KEY = FlussApiKey.CREATE_PARTITION
    RESPONSE = EmptyResponse
    table_path: PbTablePath = pb(1, MESSAGE, required=True, message=PbTablePath)
    partition_spec: PbPartitionSpec = pb(2, MESSAGE, required=True, message=PbPartitionSpec)
    ignore_if_exists: bool = pb(3, BOOL, required=True)


@message
class DropPartitionRequest(FlussRequest[EmptyResponse]):
    """Drop one partition with its data."""

    API_KEY = FlussApiKey.DROP_PARTITION
    RESPONSE = EmptyResponse
    table_path: PbTablePath = pb(1, MESSAGE, required=True, message=PbTablePath)
    partition_spec: PbPartitionSpec = pb(2, MESSAGE, required=True, message=PbPartitionSpec)
    ignore_if_not_exists: bool = pb(3, BOOL, required=True)


__all__ = ["CreatePartitionRequest", "DropPartitionRequest", "ListPartitionInfosRequest",
           "ListPartitionInfosResponse", "PbKeyValue", "PbPartitionInfo", "PbPartitionSpec"]
