"""SCAN_KV scan sessions (open, continue, close) and LIST_SCANNERS, served by tablets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fluss_spark.errors import ApiError, InvalidScanRequest
from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.messages.base import (Bool, Bytes, Int, ListOf, Message, Nested, Request,
                                                Str, wire)
from fluss_spark.protocol.messages.records import COLUMN, MAX_COLUMNS

SCANNER_ID = Str(max_len=128, min_len=1)
#: Fields that only an open request may carry.
OPEN_FIELDS = ("table_id", "bucket", "snapshot_id", "live", "projection", "limit", "start_row",
               "partition_id", "local_read")
#: The longest snapshot file path a response names.
MAX_PATH = 4096


@dataclass(frozen=True)
class ScanKvResponse(Message):
    """One batch of a session: rows [row_start, row_start + row_count) of the view, as an Arrow
    IPC stream. ``scanner_id`` is absent when the whole result fit (no session stays open)."""

    scanner_id: str | None = wire(SCANNER_ID, None, omit_none=True)
    #: Arrow IPC: bytes or a view into the received frame; a server may hand over a pyarrow
    #: buffer or a ``protocol.codec.Gather`` of buffers (sent without joining them).
    records: Any = wire(Bytes(in_place=True), None)
    has_more: bool = wire(Bool(), False)
    log_offset: int | None = wire(Int(), None)
    snapshot_id: int | None = wire(Int(), None)
    row_start: int | None = wire(Int(), None)
    row_count: int = wire(Int(), 0)
    #: Answer to an open with ``local_read``: the snapshot file on this host holding the rows
    #: [row_start, row_start + row_count) the client reads itself (no records, no session).
    local_file: str | None = wire(Str(max_len=MAX_PATH, min_len=1), None, omit_none=True)


class ScanKvRequest(Request[ScanKvResponse]):
    """A SCAN_KV request: decoding tells an open, a continue and a close apart."""

    API_KEY = ApiKey.SCAN_KV
    RESPONSE = ScanKvResponse
    ERROR = InvalidScanRequest

    @classmethod
    def decode(cls, body: Any, *, error: type[ApiError] | None = None,
               where: str | None = None) -> Any:
        if cls is not ScanKvRequest:
            return super().decode(body, error=error, where=where)
        if not isinstance(body, dict):
            raise InvalidScanRequest(f"SCAN_KV body must be a map, got {type(body).__name__}")
        has_scanner = body.get("scanner_id") is not None
        open_fields = [f for f in OPEN_FIELDS if body.get(f) is not None]
        close = body.get("close")
        if close is not None and not isinstance(close, bool):
            raise InvalidScanRequest(f"field 'close' must be true or false, got "
                                     f"{type(close).__name__}")
        if has_scanner and open_fields:
            raise InvalidScanRequest(
                f"a SCAN_KV request carries either open fields or a scanner_id, not both "
                f"(got scanner_id and {', '.join(open_fields)})")
        if close:
            if not has_scanner:
                raise InvalidScanRequest("close needs the scanner_id of the session to close")
            return CloseScan.decode(body)
        if has_scanner:
            return ContinueScan.decode(body)
        if not open_fields:
            raise InvalidScanRequest("a SCAN_KV request needs either open fields (table_id, "
                                     "bucket, snapshot_id or live, ...) or the scanner_id of an "
                                     "open session")
        return OpenScan.decode(body)


@dataclass(frozen=True)
class OpenScan(ScanKvRequest):
    """Open a session: which bucket, which view (a snapshot or live), which rows and columns."""

    table_id: int = wire(Int())
    bucket: int = wire(Int())
    batch_size_bytes: int = wire(Int(1))
    call_seq_id: int = wire(Int())          # 0: an open; required so a lost id is never guessed
    snapshot_id: int | None = wire(Int(), None)
    live: bool = wire(Bool(), False)
    projection: tuple[str, ...] | None = wire(
        ListOf(COLUMN, min_len=1, max_len=MAX_COLUMNS, unique=True), None)
    limit: int | None = wire(Int(), None)
    start_row: int = wire(Int(), 0)
    #: The partition of a partitioned table; absent for an unpartitioned one.
    partition_id: int | None = wire(Int(), None, omit_none=True)
    #: A client on the tablet's own host asks for the snapshot file instead of its rows (a
    #: short-circuit read); the server answers ``local_file`` only where it can.
    local_read: bool | None = wire(Bool(), None, omit_none=True)

    def check(self) -> None:
        if self.call_seq_id != 0:
            raise self.ERROR(f"an open request must have call_seq_id 0, got {self.call_seq_id}")
        if self.live and self.snapshot_id is not None:
            raise self.ERROR("give either snapshot_id or live: true, not both")
        if self.live and self.local_read:
            raise self.ERROR("local_read reads a snapshot's file: a live scan has none")
        if not self.live and self.snapshot_id is None:
            raise self.ERROR("an open request needs snapshot_id (a registered KV snapshot) or "
                             "live: true (the bucket's current state)")


@dataclass(frozen=True)
class ContinueScan(ScanKvRequest):
    """The next batch of an open session (the same ``call_seq_id`` again repeats the last)."""

    scanner_id: str = wire(SCANNER_ID)
    call_seq_id: int = wire(Int())
    batch_size_bytes: int | None = wire(Int(1), None)


@dataclass(frozen=True)
class CloseScan(ScanKvRequest):
    """Close a session; closing an unknown session succeeds."""

    scanner_id: str = wire(SCANNER_ID)
    close: bool = wire(Bool(), True)


@dataclass(frozen=True)
class ScannerInfo(Message):
    """One open session, as LIST_SCANNERS shows it."""

    scanner_id: str = wire(Str())
    table_id: int = wire(Int())
    bucket: int = wire(Int())
    snapshot_id: int | None = wire(Int(), None)
    live: bool = wire(Bool(), False)
    age_ms: int = wire(Int(None, None), 0)
    idle_ms: int = wire(Int(None, None), 0)
    rows_served: int = wire(Int(), 0)
    next_row: int = wire(Int(), 0)
    #: The partition of a partitioned table; absent for an unpartitioned one.
    partition_id: int | None = wire(Int(), None, omit_none=True)


@dataclass(frozen=True)
class ListScannersResponse(Message):
    scanners: tuple[ScannerInfo, ...] = wire(ListOf(Nested(ScannerInfo)), ())


@dataclass(frozen=True)
class ListScannersRequest(Request[ListScannersResponse]):
    API_KEY = ApiKey.LIST_SCANNERS
    RESPONSE = ListScannersResponse
