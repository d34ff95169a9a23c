"""Both clients against stub servers on real sockets that send what a hostile or broken server
could: a frame length announcing hundreds of MB, and Arrow compression bombs in FETCH_LOG
responses. Each is refused with a clear error, and memory stays bounded.

Python allocations (frame buffers) are measured with tracemalloc; Arrow's are measured on its
default pool (``total_bytes_allocated`` only grows, so its growth bounds a call's peak)."""

from __future__ import annotations

import socket
import struct
import threading
import tracemalloc
from typing import Callable

import numpy as np
import pyarrow as pa
import pytest

from fluss_spark.client.apache_fluss.cluster import ApacheFlussWireCluster
from fluss_spark.client.apache_fluss.connection import FlussWireConnection, TableMetadata
from fluss_spark.client.embedded.log_scanner import LogScanner
from fluss_spark.errors import CorruptMessage, NetworkError, RecordTooLarge
from fluss_spark.protocol import codec, framing
from fluss_spark.protocol.apache_fluss import framing as fluss_framing
from fluss_spark.protocol.apache_fluss.compacted_row import decode_value_batch
from fluss_spark.protocol.apache_fluss.messages import (FetchLogResponse as FlussFetchLogResponse,
                                                 PbFetchLogRespForBucket, PbFetchLogRespForTable,
                                                 PbTablePath)
from fluss_spark.protocol.apache_fluss.table_json import FlussTableDescriptor
from fluss_spark.protocol.messages import FetchLogRequest, TableInfo
from fluss_spark.transport.client import RpcConnection
from fluss_spark.transport.apache_fluss import FlussRpcConnection
from tests.unit.protocol.test_apache_fluss_log_batch import make_batch

MB = 1 << 20
SCHEMA = pa.schema([("x", pa.int64())])
INFO = TableInfo(table_id=3, name="db.log", schema=SCHEMA, num_buckets=1)


class StubServer:
    """Accepts connections; answers each 4-byte-length-prefixed request frame with the bytes
    ``answer(payload)`` returns, and closes the connection after ``close_after`` answers."""

    def __init__(self, answer: Callable[[bytes], bytes], close_after: int | None = None):
        self.answer, self.close_after = answer, close_after
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        answered = 0
        with conn:
            try:
                while self.close_after is None or answered < self.close_after:
                    head = _recv(conn, 4)
                    if head is None:
                        return
                    payload = _recv(conn, struct.unpack(">I", head)[0])
                    if payload is None:
                        return
                    conn.sendall(self.answer(payload))
                    answered += 1
            except OSError:
                return

    def close(self) -> None:
        self.sock.close()


def _recv(conn: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


@pytest.fixture
def stubs():
    made: list[StubServer] = []

    def make(answer, close_after=None) -> StubServer:
        made.append(StubServer(answer, close_after))
        return made[-1]
    yield make
    for s in made:
        s.close()


def zstd_stream(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema,
                           options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def python_peak_during(fn) -> tuple[int, BaseException | None]:
    """Peak bytes Python allocated while ``fn`` ran, and what it raised."""
    tracemalloc.start()
    error = None
    try:
        fn()
    except BaseException as e:      # noqa: BLE001 - handed back to the test
        error = e
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak, error


def arrow_allocated_during(fn) -> tuple[int, BaseException | None]:
    pool = pa.default_memory_pool()
    before = pool.total_bytes_allocated()
    error = None
    try:
        fn()
    except BaseException as e:      # noqa: BLE001
        error = e
    return pool.total_bytes_allocated() - before, error


# -- the embedded client ----------------------------------------------------------------------
class OneTablet:
    """The part of FlussConnection a LogScanner uses, over a real socket to one server."""

    request_timeout_s = 5.0

    def __init__(self, rpc: RpcConnection):
        self.rpc = rpc

    def call_bucket(self, table, bucket, request, partition_id=None):
        return self.rpc.call(request)


def embedded_fetch_answer(records: bytes) -> Callable[[bytes], bytes]:
    def answer(payload: bytes) -> bytes:
        cid = codec.decode_request(payload).correlation_id
        body = {"records": records, "base_offset": 0, "next_offset": 20_000_000,
                "high_watermark": 20_000_000, "log_start_offset": 0}
        return framing.encode_frame(codec.encode_response(cid, body))
    return answer


def test_embedded_client_refuses_a_compression_bomb_in_a_fetch_log_response(stubs):
    n = 20_000_000
    empty = pa.StringArray.from_buffers(n, pa.py_buffer(np.zeros(n + 1, dtype=np.int32)),
                                        pa.py_buffer(b""))
    changelog = pa.table({"x": pa.array(np.zeros(n, dtype=np.int64)), "_change_type": empty,
                          "_commit_timestamp": pa.array(np.zeros(n, dtype=np.int64))})
    bomb = zstd_stream(changelog)
    del changelog
    assert len(bomb) < 256 * 1024
    server = stubs(embedded_fetch_answer(bomb))
    rpc = RpcConnection("127.0.0.1", server.port, timeout_s=10)
    scanner = LogScanner(OneTablet(rpc), INFO)
    grown, error = arrow_allocated_during(lambda: scanner.fetch(0, 0))
    rpc.close()
    assert isinstance(error, RecordTooLarge), error
    assert "FETCH_LOG response for table db.log bucket 0: record batch 0 decodes to" in str(error)
    assert "IpcLimits.max_batch_bytes" in str(error)
    assert grown < 8 * MB, f"the refused response allocated {grown / MB:.0f} MB"


def test_embedded_client_reads_a_frame_as_its_bytes_arrive(stubs):
    # The stub announces a 200 MB response (under the 256 MB limit), sends 64 KB and hangs up.
    server = stubs(lambda payload: struct.pack(">I", 200 * MB) + b"\0" * 65536, close_after=1)
    rpc = RpcConnection("127.0.0.1", server.port, timeout_s=10)
    peak, error = python_peak_during(
        lambda: rpc.call(FetchLogRequest(table_id=3, bucket=0, offset=0)))
    rpc.close()
    assert isinstance(error, NetworkError) and "connection closed by the server" in str(error)
    assert peak < 8 * MB, f"the client allocated {peak / MB:.0f} MB for 64 KB received"


def test_embedded_client_refuses_a_frame_over_its_max_response_bytes(stubs):
    server = stubs(lambda payload: struct.pack(">I", 2 * MB) + b"\0" * 1024)
    rpc = RpcConnection("127.0.0.1", server.port, timeout_s=10, max_response_bytes=1 * MB)
    with pytest.raises(CorruptMessage, match=r"announced a response frame of 2,097,152 bytes, "
                                             r"over this client's limit of 1,048,576 "
                                             r"\(max_response_bytes\)"):
        rpc.call(FetchLogRequest(table_id=3, bucket=0, offset=0))
    rpc.close()


# -- the Apache Fluss wire client -------------------------------------------------------------
FLUSS_META = TableMetadata(
    name="db.t", path=PbTablePath(database_name="db", table_name="t"), table_id=7, schema_id=1,
    descriptor=FlussTableDescriptor(schema=SCHEMA, wire_schema=SCHEMA), created_ms=0,
    leaders={0: 0})


class OneFlussTablet(FlussWireConnection):
    """A FlussWireConnection whose one table's metadata is known, led by the stub server."""

    def __init__(self, port: int, **kwargs):
        super().__init__(f"127.0.0.1:{port}", request_timeout_s=5.0, **kwargs)
        self.port = port

    def table(self, name: str) -> TableMetadata:
        return FLUSS_META

    def schema(self, meta: TableMetadata, schema_id: int) -> tuple[pa.Schema, pa.Schema]:
        return SCHEMA, SCHEMA

    def leader(self, name: str, bucket: int, partition: str | None = None):
        return FLUSS_META, self.connection("127.0.0.1", self.port)


def fluss_fetch_answer(records: bytes, high_watermark: int) -> Callable[[bytes], bytes]:
    def answer(payload: bytes) -> bytes:
        _, _, request_id, _ = fluss_framing.decode_request(payload)
        body = FlussFetchLogResponse(tables_resp=[PbFetchLogRespForTable(
            table_id=7, buckets_resp=[PbFetchLogRespForBucket(
                bucket_id=0, high_watermark=high_watermark, log_start_offset=0,
                records=records)])]).encode()
        return fluss_framing.encode_response(fluss_framing.SUCCESS_RESPONSE, request_id, body)
    return answer


def test_fluss_client_refuses_a_compression_bomb_in_a_fetch_log_response(stubs):
    rows = pa.record_batch([pa.array(np.zeros(20_000_000, dtype=np.int64))], schema=SCHEMA)
    bomb = make_batch(0, rows, None)          # append-only, zstd: 160 MB decoded
    del rows
    assert len(bomb) < 64 * 1024
    server = stubs(fluss_fetch_answer(bomb, 20_000_000))
    conn = OneFlussTablet(server.port)
    cluster = ApacheFlussWireCluster(conn)
    grown, error = arrow_allocated_during(lambda: list(cluster.read_log("db.t", 0, 0, 10)))
    conn.close()
    assert isinstance(error, RecordTooLarge), error
    assert ("FETCH_LOG response for db.t bucket 0 at offset 0: record batch 0 decodes to "
            "160,000,000 bytes") in str(error)
    assert grown < 8 * MB, f"the refused response allocated {grown / MB:.0f} MB"


def test_fluss_client_still_reads_a_normal_compressed_batch(stubs):
    rows = pa.record_batch([pa.array(np.arange(1000, dtype=np.int64))], schema=SCHEMA)
    server = stubs(fluss_fetch_answer(make_batch(0, rows, None), 1000))
    conn = OneFlussTablet(server.port)
    got = pa.Table.from_batches(list(ApacheFlussWireCluster(conn).read_log("db.t", 0, 0, 1000)))
    conn.close()
    assert got.column("x").to_pylist() == list(range(1000))


def test_fluss_client_reads_a_frame_as_its_bytes_arrive(stubs):
    # Announces 400 MB (under Fluss's 512 MB limit), sends 64 KB, hangs up.
    server = stubs(lambda payload: struct.pack(">i", 400 * MB) + b"\0" * 65536, close_after=1)
    rpc = FlussRpcConnection("127.0.0.1", server.port, timeout_s=10)
    peak, error = python_peak_during(lambda: rpc.call_raw(1024, 0, b""))
    rpc.close()
    assert isinstance(error, NetworkError), error
    assert peak < 8 * MB, f"the client allocated {peak / MB:.0f} MB for 64 KB received"


def test_fluss_client_refuses_a_frame_over_its_max_response_bytes(stubs):
    server = stubs(lambda payload: struct.pack(">i", 2 * MB) + b"\0" * 1024)
    rpc = FlussRpcConnection("127.0.0.1", server.port, timeout_s=10, max_response_bytes=1 * MB)
    with pytest.raises(CorruptMessage, match=r"frame length 2097152 is outside 1\.\.1048576.*"
                                             r"max_response_bytes"):
        rpc.call_raw(1024, 0, b"")
    rpc.close()


def test_fluss_value_batch_announcing_more_records_than_its_bytes_hold_is_refused():
    batch = struct.pack("<ibi", 5, 0, 2**31 - 1)      # 9 bytes announcing 2 billion records
    peak, error = python_peak_during(lambda: decode_value_batch(batch, lambda i: SCHEMA, SCHEMA))
    assert isinstance(error, CorruptMessage), error
    assert "says it has 2147483647 records" in str(error)
    assert peak < 1 * MB
