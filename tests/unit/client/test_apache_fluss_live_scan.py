"""The SCAN_KV client against a stub tablet that decodes each request from its wire bytes and
answers with Fluss's semantics (docs/apache_fluss_scan_kv.md): value record batches, sequence
ids, errors inside the response, no resume."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import pyarrow as pa
import pytest

from fluss_spark.client.apache_fluss.live_scan import FlussLiveScan, open_live_scan
from fluss_spark.errors import CorruptMessage, LiveScanLost, UnsupportedVersion
from fluss_spark.protocol.apache_fluss.compacted_row import decode_value_batch
from fluss_spark.protocol.apache_fluss.messages import ScanKvRequest, ScanKvResponse
from tests.unit.protocol.test_apache_fluss_compacted_row import kv_value

SCHEMA = pa.schema([pa.field("id", pa.int32(), nullable=False), pa.field("v", pa.string())])


def value_batch(rows: list[list]) -> bytes:
    """Fluss's value record batch: length, magic 0, count, then length-prefixed KV values."""
    body = b"".join(struct.pack("<i", len(v)) + v for v in (kv_value(1, SCHEMA, r) for r in rows))
    rest = struct.pack("<bi", 0, len(rows)) + body
    return struct.pack("<i", len(rest)) + rest


class StubTablet:
    """A bucket leader holding one bucket's rows; each session serves ``per_call`` rows."""

    def __init__(self, rows: list[list], log_offset: int = 42, per_call: int = 3):
        self.rows, self.log_offset, self.per_call = rows, log_offset, per_call
        self.sessions: dict[bytes, dict] = {}
        self.requests: list[ScanKvRequest] = []

    def call(self, request: ScanKvRequest, timeout_s: float | None = None) -> ScanKvResponse:
        req = ScanKvRequest.decode(request.encode())          # exactly what crosses the wire
        self.requests.append(req)
        if req.bucket_scan_req is not None:
            assert req.call_seq_id == 0 and req.batch_size_bytes >= 1 and not req.scanner_id
            n = 1 if req.batch_size_bytes == 1 else self.per_call
            first, rest = self.rows[:n], self.rows[n:]
            sid = f"{len(self.sessions):032x}".encode()
            if rest:
                self.sessions[sid] = {"rows": rest, "seq": 0}
            return ScanKvResponse(scanner_id=sid if rest else None, has_more_results=bool(rest),
                                  records=value_batch(first) if first else None,
                                  log_offset=self.log_offset)
        session = self.sessions.get(req.scanner_id)
        if req.close_scanner:
            self.sessions.pop(req.scanner_id, None)
            return ScanKvResponse(scanner_id=req.scanner_id, has_more_results=False)
        if session is None:
            return ScanKvResponse(error_code=67, error_message="unknown scanner id")
        if req.call_seq_id != session["seq"] + 1:
            del self.sessions[req.scanner_id]                 # any error closes the session
            return ScanKvResponse(error_code=68, error_message="out of order call_seq_id")
        session["seq"] += 1
        page, session["rows"] = session["rows"][:self.per_call], session["rows"][self.per_call:]
        if not session["rows"]:
            del self.sessions[req.scanner_id]
        return ScanKvResponse(scanner_id=req.scanner_id, has_more_results=bool(session["rows"]),
                              records=value_batch(page))


class StubConnection:
    def __init__(self, tablet: StubTablet):
        self.tablet = tablet

    def leader(self, name, bucket):
        return None, self.tablet

    def with_retries(self, op, *, table=None):
        return op()


META = SimpleNamespace(name="db.t", table_id=7)
ROWS = [[i, f"v{i}"] for i in range(10)]


def scan_all(tablet: StubTablet, output=SCHEMA):
    conn = StubConnection(tablet)
    start = open_live_scan(conn, META, 0, 1)
    return start, FlussLiveScan(conn, META, 0, start, output, lambda sid: SCHEMA, 1 << 20)


def test_a_scan_opened_with_one_byte_returns_one_row_then_pages_to_the_end():
    tablet = StubTablet(ROWS)
    start, scan = scan_all(tablet)
    assert start.log_offset == 42 and start.has_more and start.scanner_id
    assert decode_value_batch(start.records, lambda sid: SCHEMA, SCHEMA).num_rows == 1
    got = pa.Table.from_batches(list(scan)).to_pylist()
    assert got == [{"id": i, "v": f"v{i}"} for i in range(10)]
    opens = [r for r in tablet.requests if r.bucket_scan_req is not None]
    assert [(r.bucket_scan_req.table_id, r.bucket_scan_req.bucket_id) for r in opens] == [(7, 0)]
    assert [r.call_seq_id for r in tablet.requests[1:]] == [1, 2, 3]
    assert tablet.sessions == {}


def test_an_empty_bucket_has_no_session_and_a_projection_decodes_only_its_columns():
    start, scan = scan_all(StubTablet([], log_offset=5))
    assert (start.log_offset, start.scanner_id, start.has_more, start.records) == (5, None,
                                                                                  False, b"")
    assert list(scan) == []
    _, scan = scan_all(StubTablet(ROWS), pa.schema([SCHEMA.field("v")]))
    assert pa.Table.from_batches(list(scan)).column_names == ["v"]


def test_a_lost_session_is_live_scan_lost_and_never_retried():
    tablet = StubTablet(ROWS)
    _, scan = scan_all(tablet)
    next(scan)
    next(scan)
    tablet.sessions.clear()                   # evicted after kv.scanner.ttl, or a restart
    with pytest.raises(LiveScanLost, match="db.t bucket 0 lost its session at call 2.*67"):
        list(scan)
    assert [r.call_seq_id for r in tablet.requests[1:]] == [1, 2]


def test_a_second_reader_of_the_same_session_is_refused_by_its_sequence_ids():
    tablet = StubTablet(ROWS)
    start, first = scan_all(tablet)
    list(first)
    conn = StubConnection(tablet)
    # A retried task reads the split's session again: the server refuses the repeat (here the
    # session already ended; mid-way it would answer 68 and close it).
    again = FlussLiveScan(conn, META, 0, start, SCHEMA, lambda sid: SCHEMA, 1 << 20)
    with pytest.raises(LiveScanLost):
        list(again)


def test_closing_early_closes_the_session():
    tablet = StubTablet(ROWS)
    _, scan = scan_all(tablet)
    next(scan)
    scan.close()
    assert tablet.requests[-1].close_scanner is True and tablet.sessions == {}


def test_malformed_value_batches_are_refused():
    good = value_batch(ROWS[:2])
    decode = lambda b: decode_value_batch(b, lambda sid: SCHEMA, SCHEMA)  # noqa: E731
    assert decode(good).num_rows == 2
    with pytest.raises(CorruptMessage, match="after its length"):
        decode(good[:-1])
    with pytest.raises(UnsupportedVersion, match="magic 1"):
        decode(good[:4] + b"\x01" + good[5:])
    with pytest.raises(CorruptMessage, match="bad length"):
        decode(good[:9] + struct.pack("<i", 1) + good[13:])
    with pytest.raises(CorruptMessage, match="shorter than its header"):
        decode(b"\x00\x00")
