"""What a driver learns of KV snapshots: each one's files and log offset, and their row counts.

A table's buckets are asked about together: their GET_KV_SNAPSHOT_METADATA requests go out a
window at a time on one connection (``FlussRpcConnection.call_many``), and their ``_METADATA``
files, a round trip to remote storage each, are read side by side.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Mapping

from fluss_spark.client.apache_fluss.connection import FlussWireConnection, PartitionMetadata
from fluss_spark.client.apache_fluss.leases import kv_snapshot_metadata, kv_snapshots_metadata
from fluss_spark.client.apache_fluss.snapshot_files import KvSnapshotFiles, read_row_count
from fluss_spark.client.cluster import SnapshotLocation
from fluss_spark.client.remote_storage import warm
from fluss_spark.errors import ApiError
from fluss_spark.protocol.apache_fluss.messages import GetKvSnapshotMetadataResponse
from fluss_spark.protocol.messages import SnapshotInfo

log = logging.getLogger(__name__)

#: Snapshots' ``_METADATA`` files read at once.
ROW_COUNT_READERS = 8


def snapshot_files(conn: FlussWireConnection, table: str, bucket: int, snapshot_id: int,
                   part: PartitionMetadata | None) -> KvSnapshotFiles:
    """The files and log offset of one KV snapshot; ``KvSnapshotNotExist`` when it is gone."""
    resp = kv_snapshot_metadata(conn, conn.table(table).table_id, bucket, snapshot_id,
                                None if part is None else part.partition_id)
    return _files_of(conn, table, bucket, snapshot_id, part, resp)


def snapshot_infos(conn: FlussWireConnection, table: str, snapshots: Mapping[int, int],
                   part: PartitionMetadata | None) -> dict[int, SnapshotInfo]:
    """Each bucket's snapshot (``snapshots``: snapshot id by bucket) with its directory, log
    offset and row count (from its ``_METADATA``, or counted from its checkpoint when Fluss
    recorded none); ``KvSnapshotNotExist`` when one is gone."""
    table_id = conn.table(table).table_id
    pid = None if part is None else part.partition_id
    with ThreadPoolExecutor(max(1, min(ROW_COUNT_READERS, len(snapshots)))) as pool:
        # The S3 client, built once a process, is built while the coordinator answers.
        pool.submit(warm, conn.storage)
        answers = kv_snapshots_metadata(conn, [(table_id, pid, b, sid)
                                               for b, sid in snapshots.items()])
        files = []
        for (b, sid), answer in zip(snapshots.items(), answers):
            if isinstance(answer, ApiError):
                raise answer
            files.append(_files_of(conn, table, b, sid, part, answer))
        counts = list(pool.map(read_row_count, files))
    infos = {}
    for f, rows in zip(files, counts):
        if rows is None:
            log.info("%s records no row count; counting its rows", f.describe())
            from fluss_spark.client.apache_fluss.kv_snapshot import count_rows
            rows = count_rows(f)
        infos[f.bucket] = SnapshotInfo(table_id=table_id, bucket=f.bucket,
                                       snapshot_id=f.snapshot_id, path=f.directory,
                                       log_offset=f.log_offset, row_count=rows,
                                       partition_id=pid)
    return infos


def known_location(conn: FlussWireConnection, table: str, bucket: int, snapshot_id: int,
                   part: PartitionMetadata | None) -> SnapshotLocation | None:
    """The files of one KV snapshot as ``conn`` was last told them (asking no server)."""
    answer = conn.snapshot_answer((conn.table(table).table_id,
                                   None if part is None else part.partition_id,
                                   int(bucket), int(snapshot_id)))
    return _location_of(answer) if isinstance(answer, GetKvSnapshotMetadataResponse) else None


def located_files(conn: FlussWireConnection, table: str, bucket: int, snapshot_id: int,
                  part: PartitionMetadata | None, location: SnapshotLocation) -> KvSnapshotFiles:
    """The snapshot's files as a ``location`` (a driver's, carried by a split) gives them."""
    return KvSnapshotFiles(table=table, bucket=int(bucket), snapshot_id=int(snapshot_id),
                           log_offset=location.log_offset, files=tuple(location.files),
                           partition=None if part is None else part.name,
                           storage=conn.storage)


def _files_of(conn: FlussWireConnection, table: str, bucket: int, snapshot_id: int,
              part: PartitionMetadata | None,
              resp: GetKvSnapshotMetadataResponse) -> KvSnapshotFiles:
    return located_files(conn, table, bucket, snapshot_id, part, _location_of(resp))


def _location_of(resp: GetKvSnapshotMetadataResponse) -> SnapshotLocation:
    return SnapshotLocation(resp.log_offset, tuple((f.remote_path, f.local_file_name)
                                                   for f in resp.snapshot_files))


__all__ = ["ROW_COUNT_READERS", "known_location", "located_files", "snapshot_files",
           "snapshot_infos"]
