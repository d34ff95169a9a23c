"""Validation of SCAN_KV request bodies into open / continue / close requests."""

from __future__ import annotations

from dataclasses import dataclass

from fluss_spark.errors import InvalidScanRequest

#: Integers above this are refused rather than clamped: no real scan needs them, and they are
#: how hostile or corrupted requests usually look (2**53 is the largest exactly representable
#: in a double, so every client language can send it).
MAX_SANE_INT = 2**53

#: More projected columns than any table has; longer lists are refused unread.
MAX_PROJECTION = 10_000

#: Fields that only an open request may carry.
OPEN_FIELDS = ("table_id", "bucket", "snapshot_id", "live", "projection", "limit", "start_row")


@dataclass(frozen=True)
class OpenScan:
    """A request to open a session: which bucket, which view, which rows and columns."""

    table_id: int
    bucket: int
    snapshot_id: int | None
    live: bool
    projection: tuple[str, ...] | None
    limit: int | None
    start_row: int
    batch_size_bytes: int


@dataclass(frozen=True)
class ContinueScan:
    """A request for the next batch (or a repeat of the last one) of an open session."""

    scanner_id: str
    call_seq_id: int
    batch_size_bytes: int | None


@dataclass(frozen=True)
class CloseScan:
    """A request to close a session; closing an unknown session succeeds."""

    scanner_id: str


def parse_scan_request(body) -> OpenScan | ContinueScan | CloseScan:
    """Classify and validate a SCAN_KV body, raising InvalidScanRequest naming the problem."""
    if not isinstance(body, dict):
        raise InvalidScanRequest(f"SCAN_KV body must be a map, got {type(body).__name__}")
    has_scanner = body.get("scanner_id") is not None
    open_fields = [f for f in OPEN_FIELDS if body.get(f) is not None]
    close = body.get("close")
    if close is not None and not isinstance(close, bool):
        raise InvalidScanRequest(f"field 'close' must be true or false, got {type(close).__name__}")
    if has_scanner and open_fields:
        raise InvalidScanRequest(
            f"a SCAN_KV request carries either open fields or a scanner_id, not both "
            f"(got scanner_id and {', '.join(open_fields)})")
    if close:
        if not has_scanner:
            raise InvalidScanRequest("close needs the scanner_id of the session to close")
        return CloseScan(_scanner_id(body))
    if has_scanner:
        return ContinueScan(_scanner_id(body), _int(body, "call_seq_id", required=True),
                            _batch_size(body, required=False))
    if not open_fields:
        raise InvalidScanRequest("a SCAN_KV request needs either open fields (table_id, bucket, "
                                 "snapshot_id or live, ...) or the scanner_id of an open session")
    return _open(body)


def _open(body: dict) -> OpenScan:
    seq = _int(body, "call_seq_id", required=True)
    if seq != 0:
        raise InvalidScanRequest(f"an open request must have call_seq_id 0, got {seq}")
    snapshot_id = _int(body, "snapshot_id", required=False)
    live = body.get("live")
    if live is not None and not isinstance(live, bool):
        raise InvalidScanRequest(f"field 'live' must be true or false, got {type(live).__name__}")
    live = bool(live)
    if live and snapshot_id is not None:
        raise InvalidScanRequest("give either snapshot_id or live: true, not both")
    if not live and snapshot_id is None:
        raise InvalidScanRequest("an open request needs snapshot_id (a registered KV snapshot) "
                                 "or live: true (the bucket's current state)")
    projection = body.get("projection")
    if projection is not None:
        if not isinstance(projection, (list, tuple)) or not projection:
            raise InvalidScanRequest("field 'projection' must be a non-empty list of column names")
        if not all(isinstance(c, str) for c in projection):
            raise InvalidScanRequest("field 'projection' must hold column names (strings)")
        if len(projection) > MAX_PROJECTION:
            raise InvalidScanRequest(f"projection names {len(projection)} columns; at most "
                                     f"{MAX_PROJECTION} are allowed")
        seen: set[str] = set()
        dupes = sorted({c for c in projection if c in seen or seen.add(c)})
        if dupes:
            raise InvalidScanRequest(f"projection names a column twice: {', '.join(dupes)}")
        projection = tuple(projection)
    return OpenScan(table_id=_int(body, "table_id", required=True),
                    bucket=_int(body, "bucket", required=True),
                    snapshot_id=snapshot_id, live=live, projection=projection,
                    limit=_int(body, "limit", required=False),
                    start_row=_int(body, "start_row", required=False) or 0,
                    batch_size_bytes=_batch_size(body, required=True))


def _scanner_id(body: dict) -> str:
    sid = body["scanner_id"]
    if not isinstance(sid, str) or not 0 < len(sid) <= 128:
        raise InvalidScanRequest("field 'scanner_id' must be the string a previous open returned")
    return sid


def _int(body: dict, name: str, *, required: bool) -> int | None:
    value = body.get(name)
    if value is None:
        if required:
            raise InvalidScanRequest(f"missing field {name!r}")
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidScanRequest(f"field {name!r} must be an integer, got {type(value).__name__}")
    if value < 0:
        raise InvalidScanRequest(f"field {name!r} must not be negative, got {value}")
    if value > MAX_SANE_INT:
        raise InvalidScanRequest(f"field {name!r} is too large ({value} > 2**53)")
    return value


def _batch_size(body: dict, *, required: bool) -> int | None:
    size = _int(body, "batch_size_bytes", required=required)
    if size is not None and size <= 0:
        raise InvalidScanRequest(f"field 'batch_size_bytes' must be positive, got {size}")
    return size
