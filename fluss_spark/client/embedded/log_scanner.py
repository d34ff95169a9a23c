"""LogScanner: read a bucket's changelog as Arrow, with the changelog metadata columns."""

from __future__ import annotations

import time
from typing import Iterator

import numpy as np
import pyarrow as pa

from fluss_spark.client.embedded import partitions
from fluss_spark.client.embedded.model import LogBatch
from fluss_spark.errors import ConfigError, LogOffsetOutOfRange
from fluss_spark.protocol.arrow_ipc import bytes_to_table
from fluss_spark.protocol.changelog import CHANGE_TYPE, COMMIT_TIMESTAMP, LOG_OFFSET
from fluss_spark.protocol.ipc_limits import CLIENT_IPC_LIMITS, IpcLimits
from fluss_spark.protocol.messages import FetchLogRequest, TableInfo

_TS_TYPE = pa.timestamp("ms", tz="UTC")


class LogScanner:
    """Fetches changelog records of one table (of one partition of a partitioned table), bucket
    by bucket (stateless; thread-safe)."""

    def __init__(self, conn, table: TableInfo, projection: list[str] | None = None, *,
                 partition: str | None = None):
        self._conn = conn
        self.table = table
        part = partitions.lookup(conn, table, partition)
        self.partition_id = None if part is None else part.partition_id
        #: Names the bucket's place in messages: ``table db.t`` or ``table db.t partition p``.
        self.where = table.name if part is None else f"{table.name} partition {part.name}"
        # What a server's response may make this client decode (a test's stand-in for the
        # connection may carry no limits of its own).
        self.ipc_limits: IpcLimits = getattr(conn, "ipc_limits", CLIENT_IPC_LIMITS)
        if projection is not None:
            projection = list(projection)
            unknown = [c for c in projection if c not in table.schema.names]
            if unknown or not projection:
                raise ConfigError(f"projection {projection} of {table.name}: unknown column(s) "
                                  f"{', '.join(unknown) or '(none given)'}; the table has "
                                  f"{', '.join(table.schema.names)}")
        self.projection = projection
        self.schema = table.changelog_schema(projection)

    def fetch(self, bucket: int, offset: int, end_offset: int | None = None,
              max_bytes: int = 8 << 20, max_wait_ms: int = 0) -> LogBatch:
        """Records from ``offset`` (up to ``end_offset`` exclusive and about ``max_bytes``).

        ``max_wait_ms`` > 0 long-polls when nothing is there yet.
        """
        request = FetchLogRequest(
            table_id=self.table.table_id, bucket=int(bucket), offset=int(offset),
            end_offset=None if end_offset is None else int(end_offset),
            max_bytes=int(max_bytes), max_wait_ms=int(max_wait_ms),
            projection=tuple(self.projection) if self.projection is not None else None,
            partition_id=self.partition_id)
        resp = self._conn.call_bucket(self.table, bucket, request, self.partition_id)
        records = self._decode(resp.records, resp.base_offset, bucket)
        return LogBatch(records=records, next_offset=resp.next_offset,
                        high_watermark=resp.high_watermark,
                        log_start_offset=resp.log_start_offset)

    def read(self, bucket: int, start: int, end: int,
             max_bytes: int = 8 << 20) -> Iterator[pa.RecordBatch]:
        """Yield exactly the records of offsets ``[start, end)``.

        Raises LogOffsetOutOfRange when ``start`` is below the retained log start (the records
        were deleted) or when ``end`` stays beyond the high watermark.
        """
        offset = int(start)
        deadline = time.monotonic() + self._conn.request_timeout_s
        while offset < end:
            lb = self.fetch(bucket, offset, end_offset=end, max_bytes=max_bytes)
            if offset < lb.log_start_offset:
                raise LogOffsetOutOfRange(
                    f"offset {offset} of {self.where} bucket {bucket} is below the log start "
                    f"{lb.log_start_offset}: those records were deleted by retention")
            records = lb.records
            if records.num_rows:
                # Never hand out records past ``end``, whatever the server sent.
                last = records.column(LOG_OFFSET)[-1].as_py()
                if last >= end:
                    records = records.slice(0, records.num_rows - (last - end + 1))
                for batch in records.to_batches():
                    if batch.num_rows:
                        yield batch
                offset = max(offset + records.num_rows, min(lb.next_offset, end))
            elif lb.next_offset > offset:
                offset = min(lb.next_offset, end)
            elif lb.high_watermark < end and time.monotonic() < deadline:
                # The range is past what is committed yet (e.g. right after a restart): wait.
                self.fetch(bucket, offset, end_offset=end, max_bytes=1, max_wait_ms=200)
            else:
                raise LogOffsetOutOfRange(
                    f"cannot read offsets [{offset}, {end}) of {self.where} bucket {bucket}: "
                    f"the high watermark is {lb.high_watermark}")

    def _decode(self, data: bytes | None, base_offset: int, bucket: int) -> pa.Table:
        if not data:
            return self.schema.empty_table()
        raw = bytes_to_table(data, limits=self.ipc_limits,
                             what=f"FETCH_LOG response for table {self.where} bucket {bucket}")
        n = raw.num_rows
        names = self.projection or self.table.schema.names
        # A tablet that has not seen a column added a moment ago has no rows with it: null.
        columns = [raw.column(c) if c in raw.column_names
                   else pa.nulls(n, self.table.schema.field(c).type) for c in names]
        columns.append(raw.column(CHANGE_TYPE))
        columns.append(pa.array(np.arange(base_offset, base_offset + n, dtype=np.int64)))
        ts = raw.column(COMMIT_TIMESTAMP)
        columns.append(ts if ts.type == _TS_TYPE else ts.cast(_TS_TYPE))
        return pa.Table.from_arrays(columns, schema=self.schema)
