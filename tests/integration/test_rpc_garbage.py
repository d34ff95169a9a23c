"""The RPC layer survives garbage on the wire and keeps serving other connections."""

import socket
import threading

import pytest

from fluss_spark.client.rpc import RpcConnection
from fluss_spark.errors import InvalidRequest, UnknownServerError, UnsupportedVersion
from fluss_spark.protocol import codec, framing
from fluss_spark.protocol.api import ApiKey
from fluss_spark.server.rpc import RpcServer, require


@pytest.fixture
def server():
    srv = RpcServer("127.0.0.1", 0, role="tablet", server_id=1)

    def echo(body):
        return {"n": require(body, "n", int) + 1}

    def boom(body):
        raise RuntimeError("bug")

    srv.register(ApiKey.LIST_TABLES, echo)
    srv.register(ApiKey.GET_METRICS, boom)
    srv.start()
    yield srv
    srv.stop()


def _raw(server, data: bytes) -> bytes:
    with socket.create_connection((server.host, server.port), timeout=5) as s:
        s.sendall(data)
        try:
            s.shutdown(socket.SHUT_WR)  # a peer that stops mid-frame
        except OSError:
            pass  # the server already dropped us, which is also fine
        chunks = []
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


@pytest.mark.parametrize("garbage", [
    b"\xff\xff\xff\xff" + b"x" * 100,            # absurd frame length: dropped
    framing.encode_frame(b"\xc1\xc1\xc1"),        # undecodable msgpack: error response
    framing.encode_frame(b"\x93\x01\x02\x03"),    # msgpack, but not a map
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",        # some other protocol
    b"\x00\x00",                                  # truncated header
])
def test_garbage_never_stops_the_server(server, garbage):
    reply = _raw(server, garbage)
    if reply:
        resp = codec.decode_response(reply[4:])
        assert resp.error_code == 3  # CORRUPT_MESSAGE
    conn = RpcConnection(server.host, server.port)
    assert conn.call(ApiKey.LIST_TABLES, {"n": 1}) == {"n": 2}
    conn.close()


def test_typed_errors_and_unknown_apis(server):
    conn = RpcConnection(server.host, server.port)
    with pytest.raises(InvalidRequest, match="missing field 'n'"):
        conn.call(ApiKey.LIST_TABLES, {})
    with pytest.raises(InvalidRequest, match="field 'n' has type str"):
        conn.call(ApiKey.LIST_TABLES, {"n": "one"})
    with pytest.raises(UnknownServerError, match="GET_METRICS failed: RuntimeError: bug"):
        conn.call(ApiKey.GET_METRICS)
    with pytest.raises(UnsupportedVersion, match="does not support API SCAN_KV"):
        conn.call(ApiKey.SCAN_KV, {})
    assert conn.supports(ApiKey.LIST_TABLES) and not conn.supports(ApiKey.SCAN_KV)
    assert conn.call(ApiKey.LIST_TABLES, {"n": 41}) == {"n": 42}
    conn.close()


def test_concurrent_clients(server):
    results = []

    def work(i):
        c = RpcConnection(server.host, server.port)
        results.append(all(c.call(ApiKey.LIST_TABLES, {"n": j})["n"] == j + 1 for j in range(50)))
        c.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 8
