"""Live KV scans of Apache Fluss (SCAN_KV, API 1061): open, continue, close
(docs/apache_fluss_scan_kv.md).

A session reads a RocksDB snapshot of the bucket leader's live state, taken at the open together
with the changelog offset it reflects. It is a forward-only cursor: a continuation must carry
exactly the previous ``call_seq_id`` + 1, any error closes the session, and a lost session
cannot be resumed. So a continuation is never retried here; every failure of one is
``LiveScanLost`` and the caller decides (docs/spark_source.md, "Live KV scans").
"""

from __future__ import annotations

import logging
from typing import Callable, Generator

import pyarrow as pa

from fluss_spark.client.apache_fluss.connection import FlussWireConnection, TableMetadata
from fluss_spark.client.cluster import LiveScanStart
from fluss_spark.errors import ApiError, FlussError, LiveScanLost, TooManyScanners
from fluss_spark.protocol.apache_fluss.api import FlussApiKey
from fluss_spark.protocol.apache_fluss.errors import to_exception
from fluss_spark.protocol.apache_fluss.messages import (PbScanReqForBucket, ScanKvRequest,
                                                        ScanKvResponse)

log = logging.getLogger(__name__)

#: A close is a courtesy (the server evicts idle sessions after ``kv.scanner.ttl``): never wait
#: long for it.
_CLOSE_TIMEOUT_S = 5.0


def _session_id(raw: bytes) -> str:
    # Fluss's ids are UTF-8 text, but they are opaque: latin-1 maps any bytes back unchanged.
    return raw.decode("latin-1")


def _checked(resp: ScanKvResponse) -> ScanKvResponse:
    """The response, or its error raised (SCAN_KV answers errors inside a normal response)."""
    if resp.error_code:
        raise to_exception(resp.error_code, resp.error_message)
    return resp


def supports_live_scans(conn: FlussWireConnection) -> bool:
    """Whether every tablet server offers SCAN_KV, asked through API_VERSIONS.

    Never probe by sending SCAN_KV itself: a server without it leaves the request unanswered
    until the client's timeout. All servers must offer it, since in a rolling upgrade a bucket's
    leader may move to any of them.
    """
    ids = conn.tablet_ids()
    return bool(ids) and all(conn.tablet(i).supports(int(FlussApiKey.SCAN_KV)) for i in ids)


def open_live_scan(conn: FlussWireConnection, meta: TableMetadata, bucket: int,
                   batch_size_bytes: int) -> LiveScanStart:
    """Open a session on the bucket's leader; opens are retried (stale leader, full server)."""
    request = ScanKvRequest(bucket_scan_req=PbScanReqForBucket(table_id=meta.table_id,
                                                               bucket_id=bucket),
                            call_seq_id=0, batch_size_bytes=max(1, int(batch_size_bytes)))

    def op() -> ScanKvResponse:
        _, leader = conn.leader(meta.name, bucket)
        try:
            return _checked(leader.call(request))
        except TooManyScanners as e:
            e.retriable = True         # sessions end as scans finish or go idle: wait for one
            raise

    resp = conn.with_retries(op, table=meta.name)
    if resp.log_offset is None:
        raise FlussError(f"SCAN_KV open of {meta.name} bucket {bucket} returned no log_offset")
    has_more = bool(resp.has_more_results)
    if has_more and not resp.scanner_id:
        raise FlussError(f"SCAN_KV open of {meta.name} bucket {bucket} says more rows follow "
                         "but returned no scanner id")
    return LiveScanStart(log_offset=resp.log_offset,
                         scanner_id=_session_id(resp.scanner_id) if has_more and resp.scanner_id
                         else None,
                         records=resp.records or b"", has_more=has_more)


class FlussLiveScan:
    """The rows of one live scan (``LiveScanStart`` first, then its session), as Arrow batches.

    Satisfies ``RecordBatchStream``; ``close()`` closes the session if rows remain.
    """

    def __init__(self, conn: FlussWireConnection, meta: TableMetadata, bucket: int,
                 start: LiveScanStart, output: pa.Schema,
                 schema_of: Callable[[int], pa.Schema], batch_size_bytes: int):
        self._conn, self._meta, self._bucket = conn, meta, bucket
        self._start = start
        self._output, self._schema_of = output, schema_of
        self._batch_bytes = max(1, int(batch_size_bytes))
        self._scanner: str | None = start.scanner_id if start.has_more else None
        self._batches = self._read()

    def __iter__(self) -> "FlussLiveScan":
        return self

    def __next__(self) -> pa.RecordBatch:
        return next(self._batches)

    def _decode(self, records: bytes | None) -> pa.RecordBatch | None:
        if not records:
            return None
        # Imported here: the driver opens live scans (and asks whether servers offer them) but
        # decodes no rows.
        from fluss_spark.protocol.apache_fluss.compacted_row import decode_value_batch
        batch = decode_value_batch(records, self._schema_of, self._output)
        return batch if batch.num_rows else None

    def _read(self) -> Generator[pa.RecordBatch, None, None]:
        first = self._decode(self._start.records)
        if first is not None:
            yield first
        seq = 0
        while self._scanner is not None:
            seq += 1
            resp = self._continue(self._scanner, seq)
            if not resp.has_more_results:
                self._scanner = None   # the server closed the session with its last batch
            batch = self._decode(resp.records)
            if batch is not None:
                yield batch

    def _continue(self, scanner: str, seq: int) -> ScanKvResponse:
        request = ScanKvRequest(scanner_id=scanner.encode("latin-1"), call_seq_id=seq,
                                batch_size_bytes=self._batch_bytes)
        try:
            _, leader = self._conn.leader(self._meta.name, self._bucket)
            return _checked(leader.call(request))
        except ApiError as e:
            # Not retried: a repeated call_seq_id is refused and closes the session, and a lost
            # response cannot be told from a lost request.
            self._scanner = None
            raise LiveScanLost(f"live scan of {self._meta.name} bucket {self._bucket} lost its "
                               f"session at call {seq} ({type(e).__name__}: {e})") from e

    def close(self) -> None:
        self._batches.close()
        scanner, self._scanner = self._scanner, None
        if scanner is None:
            return
        try:
            _, leader = self._conn.leader(self._meta.name, self._bucket)
            leader.call(ScanKvRequest(scanner_id=scanner.encode("latin-1"), close_scanner=True),
                        timeout_s=_CLOSE_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - the server evicts it after kv.scanner.ttl
            log.debug("closing SCAN_KV session %s failed: %s", scanner, e)


__all__ = ["FlussLiveScan", "open_live_scan", "supports_live_scans"]
