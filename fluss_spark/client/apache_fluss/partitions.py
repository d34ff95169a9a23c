"""``FlussPartitions``: the partitions of partitioned Apache Fluss tables, listed, created and
dropped, and the partition a read names resolved to its id and bucket leaders."""

from __future__ import annotations

from typing import Mapping, TypeVar

from fluss_spark.client.apache_fluss.connection import (FlussWireConnection, PartitionMetadata,
                                                        split_table_name)
from fluss_spark.client.partition_names import (missing, not_partitioned, required_name,
                                                spec_name)
from fluss_spark.errors import PartitionAlreadyExist, PartitionNotExist
from fluss_spark.protocol.apache_fluss.partition_messages import (CreatePartitionRequest,
                                                                  DropPartitionRequest,
                                                                  ListPartitionInfosRequest,
                                                                  PbPartitionSpec)
from fluss_spark.protocol.messages import PartitionInfo
from fluss_spark.protocol.partitions import spec_text, values_of

R = TypeVar("R", CreatePartitionRequest, DropPartitionRequest)

#: Listings tried when a partition is dropped between the listing and its metadata.
_LISTING_ATTEMPTS = 3


def _info(meta: PartitionMetadata) -> PartitionInfo:
    # Fluss does not say when a partition was created.
    return PartitionInfo(partition_id=meta.partition_id, name=meta.name,
                         assignment={b: leader for b, leader in meta.leaders.items()
                                     if leader is not None})


class FlussPartitions:
    """Partitions of one Apache Fluss cluster's tables, through the coordinator.

    A partition's name is its values in key order joined by ``$``, as in Fluss (whose
    LIST_PARTITION_INFOS answers specs, and GET_METADATA names and bucket leaders).
    """

    def __init__(self, conn: FlussWireConnection):
        self.conn = conn

    def keys(self, table: str) -> tuple[str, ...]:
        return self.conn.table(table).descriptor.partition_key

    def resolve(self, table: str, partition: str | None) -> PartitionMetadata | None:
        """The partition a read names (by name or spec): None for an unpartitioned table and no
        ``partition``; a partitioned table needs one, an unpartitioned one refuses one."""
        keys = self.keys(table)
        name = required_name(table, keys, partition)
        if name is None:
            return None
        try:
            return self.conn.partition(table, name)
        except PartitionNotExist:
            raise missing(table, keys, name) from None

    def list_partitions(self, table: str) -> list[PartitionInfo]:
        """The partitions of ``table`` with their bucket leaders, by name."""
        if not self.keys(table):
            raise not_partitioned(table)
        path = split_table_name(table)
        for attempt in range(_LISTING_ATTEMPTS):
            listed = self.conn.call_coordinator(ListPartitionInfosRequest(table_path=path))
            ids = [p.partition_id for p in listed.partitions_info]
            if not ids:
                return []
            try:
                metas = self.conn.refresh_partitions(table, ids=ids)
            except PartitionNotExist:
                # Dropped (by hand or by retention) since it was listed: list again.
                if attempt + 1 == _LISTING_ATTEMPTS:
                    raise
                continue
            return sorted((_info(m) for m in metas), key=lambda p: p.name)
        raise AssertionError("unreachable")

    def create_partition(self, table: str, spec: Mapping[str, str], *,
                         ignore_if_exists: bool = False) -> PartitionInfo:
        """Create the partition ``spec`` and return it."""
        name, text, request = self._request(table, spec, CreatePartitionRequest,
                                            ignore_if_exists=bool(ignore_if_exists))
        try:
            self.conn.call_coordinator(request)
        except PartitionAlreadyExist:
            raise PartitionAlreadyExist(f"partition {text} of table {table} already "
                                        "exists") from None
        return _info(self.conn.refresh_partitions(table, names=[name])[0])

    def drop_partition(self, table: str, spec: Mapping[str, str], *,
                       ignore_if_not_exists: bool = False) -> None:
        """Drop the partition ``spec`` with its data (Fluss drops its snapshots and log)."""
        _, text, request = self._request(table, spec, DropPartitionRequest,
                                         ignore_if_not_exists=bool(ignore_if_not_exists))
        try:
            self.conn.call_coordinator(request)
        except PartitionNotExist:
            raise PartitionNotExist(f"partition {text} of table {table} does not exist; list "
                                    f"them with `fluss-spark partition list {table}`") from None
        finally:
            self.conn.invalidate(table)

    def _request(self, table: str, spec: Mapping[str, str], kind: type[R],
                 **flag: bool) -> tuple[str, str, R]:
        """(name, spec text, request of ``kind``) for the partition ``spec`` of ``table``,
        after checking the spec against the table's partition keys."""
        keys = self.keys(table)
        name = spec_name(table, keys, spec)
        request = kind(table_path=split_table_name(table),
                       partition_spec=PbPartitionSpec.of(keys, spec), **flag)
        return name, spec_text(keys, values_of(name)), request


__all__ = ["FlussPartitions"]
