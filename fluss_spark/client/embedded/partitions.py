"""Which partition a read or write of the embedded client addresses: names, specs and row values
resolved to the partitions the cluster's metadata lists."""

from __future__ import annotations

from fluss_spark.client import partition_names
from fluss_spark.errors import PartitionNotExist
from fluss_spark.protocol.messages import PartitionInfo, TableInfo
from fluss_spark.protocol.partitions import spec_text, values_of


def name_of(info: TableInfo, partition: str) -> str:
    """The partition's name from its name (``2026-11-25``) or its spec (``dt=2026-11-25``)."""
    return partition_names.name_of(info.name, info.partition_keys, partition)


def spec_of(info: TableInfo, name: str) -> str:
    """The command line's form of the partition ``name`` of ``info``: ``dt=2026-11-25``."""
    return spec_text(info.partition_keys, values_of(name))


def find(conn, info: TableInfo, name: str) -> PartitionInfo | None:
    """The partition ``name`` from the cached metadata, else from fresh metadata; None if the
    cluster has no such partition."""
    for p in info.partitions:
        if p.name == name:
            return p
    fresh = conn.refresh_table(info.name)
    return next((p for p in fresh.partitions if p.name == name), None)


def missing(info: TableInfo, name: str) -> PartitionNotExist:
    return partition_names.missing(info.name, info.partition_keys, name)


def lookup(conn, info: TableInfo, partition: str | None) -> PartitionInfo | None:
    """The partition a read addresses: None for an unpartitioned table (``partition`` None);
    a partitioned table needs one, an unpartitioned one refuses one."""
    name = partition_names.required_name(info.name, info.partition_keys, partition)
    if name is None:
        return None
    found = find(conn, info, name)
    if found is None:
        raise missing(info, name)
    return found


__all__ = ["find", "lookup", "missing", "name_of", "spec_of"]
