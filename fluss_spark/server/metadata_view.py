"""Wire views of metadata records: GET_METADATA answers, snapshot and lease infos."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from fluss_spark.errors import TableNotExist
from fluss_spark.metadata.layout import (AssignmentRecord, LeaseRecord, PartitionRecord,
                                         SnapshotRecord, TableRecord)
from fluss_spark.metadata.store import MetadataStore
from fluss_spark.protocol import messages as m
from fluss_spark.protocol.acl import OperationType
from fluss_spark.protocol.arrow_ipc import deserialize_schema

if TYPE_CHECKING:
    from fluss_spark.server.authorizer import Authorizer


def table_info(table: TableRecord, assignment: AssignmentRecord | None,
               partitions: Iterable[PartitionRecord] = ()) -> m.TableInfo:
    return m.TableInfo(
        table_id=table.table_id, name=table.name, schema=deserialize_schema(table.schema),
        primary_key=tuple(table.primary_key), bucket_key=tuple(table.bucket_key),
        num_buckets=table.num_buckets, properties=dict(table.properties),
        created_ms=table.created_ms,
        assignment=dict(enumerate(assignment.buckets)) if assignment else {},
        partition_keys=tuple(table.partition_keys),
        partitions=tuple(partition_info(p) for p in partitions), schema_id=table.schema_id)


def build_metadata(store: MetadataStore, names: Iterable[str] | None,
                   authorizer: "Authorizer | None" = None) -> m.GetMetadataResponse:
    """Coordinator address, live tablets, and the requested tables (all when ``names`` is None).

    With an ``authorizer``, naming a table needs DESCRIBE on it, and "all" lists only the
    tables the caller may DESCRIBE."""
    coord = store.active_coordinator()
    if authorizer is not None and names is not None:
        authorizer.check_tables(OperationType.DESCRIBE, names, "get the metadata")
    tables = []
    for name in (names if names is not None else store.table_names()):
        if names is None and authorizer is not None and not authorizer.visible(name):
            continue
        rec = store.table(name)
        if rec is None:
            if names is not None:
                raise TableNotExist(f"table {name} does not exist")
            continue
        tables.append(table_info(rec, store.assignment(name),
                                 store.partitions(name) if rec.partitioned else ()))
    return m.GetMetadataResponse(
        coordinator=m.ServerAddress(coord.host, coord.port) if coord else None,
        tablets=tuple(m.TabletAddress(t.id, t.host, t.port) for t in store.tablets().values()),
        tables=tuple(tables))


def partition_info(rec: PartitionRecord) -> m.PartitionInfo:
    return m.PartitionInfo(partition_id=rec.partition_id, name=rec.name,
                           assignment=dict(enumerate(rec.buckets)), created_ms=rec.created_ms)


def snapshot_info(rec: SnapshotRecord, pinned_by: Iterable[str] = ()) -> m.SnapshotInfo:
    """The wire SnapshotInfo of a registered snapshot and the leases pinning it."""
    return m.SnapshotInfo(table_id=rec.table_id, bucket=rec.bucket, snapshot_id=rec.snapshot_id,
                          path=rec.path, log_offset=rec.log_offset, row_count=rec.row_count,
                          size_bytes=rec.size_bytes, created_ms=rec.created_ms,
                          pinned_by=tuple(pinned_by), partition_id=rec.partition_id)


def lease_info(rec: LeaseRecord) -> m.LeaseInfo:
    return m.LeaseInfo(lease_id=rec.lease_id, expires_at_ms=rec.expires_at_ms,
                       created_ms=rec.created_ms,
                       tables={t: dict(p) for t, p in rec.tables.items()},
                       pin_count=rec.pin_count(), holders=dict(rec.holders), owner=rec.owner,
                       partitions={t: {p: dict(pins) for p, pins in ps.items()}
                                   for t, ps in rec.partitions.items()})
