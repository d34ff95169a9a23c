"""Reading an exact offset range of one Apache Fluss bucket (of a table or of one partition)
with FETCH_LOG, as changelog record batches."""

from __future__ import annotations

import time
from typing import Iterator

import pyarrow as pa

from fluss_spark.client.apache_fluss.connection import FlussWireConnection, PartitionMetadata
from fluss_spark.client.apache_fluss.remote_log import remote_batches
from fluss_spark.errors import (CorruptMessage, LogOffsetOutOfRange, RecordTooLarge,
                                 UnsupportedVersion)
from fluss_spark.protocol.apache_fluss.api import CLIENT_FOLLOWER_ID
from fluss_spark.protocol.apache_fluss.errors import to_exception
from fluss_spark.protocol.apache_fluss.log_batch import LogRecordBatch, iter_batches
from fluss_spark.protocol.apache_fluss.messages import (FetchLogRequest, PbFetchLogReqForBucket,
                                                        PbFetchLogReqForTable,
                                                        PbFetchLogRespForBucket)
from fluss_spark.protocol.changelog import CHANGELOG_FIELDS, COMMIT_TIMESTAMP, LOG_OFFSET
from fluss_spark.protocol.ipc_limits import IpcBudget


def read_log(conn: FlussWireConnection, table: str, bucket: int, start: int, end: int,
             projection: list[str] | None,
             partition: PartitionMetadata | None = None) -> Iterator[pa.RecordBatch]:
    """Exactly the records of offsets ``[start, end)`` of ``bucket`` (of ``partition``).

    A projection is pushed to the server (Fluss sends only those columns); the CRC of such
    batches is not checked, because Fluss rewrites them without recomputing it. Offsets only in
    remote storage are read from their segment files there (``remote_log``)."""
    meta = conn.table(table)
    schema = meta.descriptor.schema
    cols = projection if projection is not None else list(schema.names)
    output = pa.schema([schema.field(c) for c in cols] + list(CHANGELOG_FIELDS))
    indexes = sorted(schema.get_field_index(c) for c in cols)
    if projection is not None and meta.schema_id > 1 and max(indexes) >= len(
            conn.schema(meta, 1)[0]):
        # Fluss projects every batch by the same field positions, and batches older than an
        # added column lack its position: read whole batches, pick the columns here.
        projection = None
    where = f"{table} bucket {bucket}" if partition is None else \
        f"{table} partition {partition.name} bucket {bucket}"
    offset, max_bytes = start, 8 << 20
    deadline = time.monotonic() + conn.request_timeout_s
    wait_ms = 0

    def rows_of(batch: LogRecordBatch, projected: bool, budget: IpcBudget) -> pa.RecordBatch:
        """The batch's records in ``[offset, end)`` (``projected``: its payload holds only the
        projected columns)."""
        _, wire = conn.schema(meta, batch.schema_id)
        if projected:
            wire = pa.schema([wire.field(i) for i in indexes])
        rows = batch.to_changelog(wire, output, budget)
        lo = max(0, offset - batch.base_offset)
        hi = min(rows.num_rows, end - batch.base_offset)
        return rows.slice(lo, max(0, hi - lo))

    while offset < end:
        resp = _fetch(conn, table, bucket, partition, offset, max_bytes, indexes,
                      projection is not None, wait_ms)
        if resp.error_code:
            raise to_exception(resp.error_code, resp.error_message)
        records = resp.records or b""
        if not records and resp.remote_log_fetch_info is not None:
            # Older than the tablet's local log: read the segments in remote storage (whole
            # batches, so the CRC is checked and the projection applied here), then fetch on.
            before = offset
            for batch in remote_batches(resp.remote_log_fetch_info, offset, where,
                                        storage=conn.storage):
                if batch.next_offset <= offset:
                    continue
                if batch.record_count:
                    budget = IpcBudget(conn.ipc_limits, f"remote log batch of {where} at "
                                                        f"offset {batch.base_offset}")
                    rows = rows_of(batch, False, budget)
                    if rows.num_rows:
                        yield rows
                offset = batch.next_offset
                if offset >= end:
                    return
            if offset == before:
                raise CorruptMessage(f"the remote log segments listed for offset {offset} of "
                                     f"{where} hold no record batch from it on")
            wait_ms = 0
            continue
        progressed = False
        # One budget per response: its batches together stay within the client's limits.
        budget = IpcBudget(conn.ipc_limits, f"FETCH_LOG response for {where} at offset {offset}")
        for batch in iter_batches(records, check_crc=projection is None):
            if batch.next_offset <= offset:
                continue
            progressed = True
            if batch.record_count:
                rows = rows_of(batch, projection is not None, budget)
                if rows.num_rows:
                    yield rows
            offset = batch.next_offset
            if offset >= end:
                return
        if progressed:
            wait_ms = 0
            continue
        if records:
            # Not even one whole batch fits in max_bytes: ask for more.
            if max_bytes >= 1 << 30:
                raise RecordTooLarge(f"a record batch of {where} at offset {offset} is larger "
                                     "than 1 GiB")
            max_bytes *= 2
            continue
        hw = resp.high_watermark if resp.high_watermark is not None else -1
        if hw < end and time.monotonic() < deadline:
            wait_ms = 200     # the range is not all committed yet: long-poll for it
            continue
        raise LogOffsetOutOfRange(f"cannot read offsets [{offset}, {end}) of {where}: the high "
                                  f"watermark is {hw}")


def first_offset_at(conn: FlussWireConnection, table: str, bucket: int, start: int, end: int,
                    timestamp_ms: int, partition: PartitionMetadata | None = None) -> int:
    """The offset of the first record of ``[start, end)`` committed at or after
    ``timestamp_ms`` (``end`` if none is).

    Fluss answers a timestamp that falls in remote storage with the offset of a time-index entry
    at or before it (locally: the first batch at or after it); reading on from there makes both
    answers the same. Only the first column is read."""
    import pyarrow.compute as pc     # here only: a query's driver imports this module (~25 ms)
    first = conn.table(table).descriptor.schema.names[:1]
    for rows in read_log(conn, table, bucket, start, end, first, partition):
        stamps = rows.column(COMMIT_TIMESTAMP).cast(pa.int64())
        at = pc.index(pc.greater_equal(stamps, timestamp_ms), True).as_py()
        if at >= 0:
            return int(rows.column(LOG_OFFSET)[at].as_py())
    return end


def _fetch(conn: FlussWireConnection, table: str, bucket: int,
           partition: PartitionMetadata | None, offset: int, max_bytes: int, indexes: list[int],
           project: bool, wait_ms: int) -> PbFetchLogRespForBucket:
    partition_id = None if partition is None else partition.partition_id

    def op() -> PbFetchLogRespForBucket:
        meta, leader = conn.leader(table, bucket, None if partition is None else partition.name)
        resp = leader.call(FetchLogRequest(
            follower_server_id=CLIENT_FOLLOWER_ID, max_bytes=max_bytes,
            max_wait_ms=wait_ms, min_bytes=1 if wait_ms else 0,
            tables_req=[PbFetchLogReqForTable(
                table_id=meta.table_id, projection_pushdown_enabled=project,
                projected_fields=indexes if project else [],
                buckets_req=[PbFetchLogReqForBucket(partition_id=partition_id, bucket_id=bucket,
                                                    fetch_offset=offset,
                                                    max_fetch_bytes=max_bytes)])]),
            timeout_s=conn.request_timeout_s + wait_ms / 1000)
        for t in resp.tables_resp:
            for b in t.buckets_resp:
                if b.bucket_id == bucket and b.partition_id == partition_id:
                    if b.error_code:
                        err = to_exception(b.error_code, b.error_message)
                        if err.retriable:
                            raise err
                    return b
        raise UnsupportedVersion(f"FETCH_LOG answer from {leader.address} lacks bucket {bucket} "
                                 f"of {table}")
    return conn.with_retries(op, table=table)


__all__ = ["first_offset_at", "read_log"]
