"""The RPC layer survives garbage on the wire and keeps serving other connections."""

import socket
import threading
from dataclasses import dataclass

import pytest

from fluss_spark.transport.client import RpcConnection
from fluss_spark.errors import InvalidRequest, UnknownServerError, UnsupportedVersion
from fluss_spark.protocol import codec, framing
from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.messages.base import Empty, Int, Message, Request, wire
from fluss_spark.transport.server import RpcServer


@dataclass(frozen=True)
class EchoResponse(Message):
    n: int = wire(Int(None, None))


@dataclass(frozen=True)
class Echo(Request[EchoResponse]):
    """n -> n + 1, served under an API key this test server has free."""

    API_KEY = ApiKey.LIST_TABLES
    RESPONSE = EchoResponse
    n: int = wire(Int(None, None))


@dataclass(frozen=True)
class Boom(Request[Empty]):
    API_KEY = ApiKey.GET_METRICS
    RESPONSE = Empty


@pytest.fixture
def server():
    srv = RpcServer("127.0.0.1", 0, role="tablet", server_id=1)

    def boom(request):
        # A bug in a handler (here a missing dict key) is the server's failure, not a bad
        # request: the client must not be told to fix its request.
        return {}["bug"]

    srv.register(Echo, lambda request: EchoResponse(request.n + 1))
    srv.register(Boom, boom)
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
    assert conn.call_raw(ApiKey.LIST_TABLES, {"n": 1}) == {"n": 2}
    conn.close()


def test_typed_errors_and_unknown_apis(server):
    conn = RpcConnection(server.host, server.port)
    with pytest.raises(InvalidRequest, match="missing field 'n'"):
        conn.call_raw(ApiKey.LIST_TABLES, {})
    with pytest.raises(InvalidRequest, match="field 'n' must be an integer, got str"):
        conn.call_raw(ApiKey.LIST_TABLES, {"n": "one"})
    with pytest.raises(UnknownServerError,
                       match="GET_METRICS failed inside the tablet: KeyError: 'bug'"):
        conn.call(Boom())
    assert conn.call(Echo(6)) == EchoResponse(7)
    with pytest.raises(UnsupportedVersion, match="does not support API SCAN_KV"):
        conn.call_raw(ApiKey.SCAN_KV, {})
    assert conn.supports(ApiKey.LIST_TABLES) and not conn.supports(ApiKey.SCAN_KV)
    assert conn.call_raw(ApiKey.LIST_TABLES, {"n": 41}) == {"n": 42}
    conn.close()


def test_concurrent_clients(server):
    results = []

    def work(i):
        c = RpcConnection(server.host, server.port)
        results.append(all(c.call_raw(ApiKey.LIST_TABLES, {"n": j})["n"] == j + 1
                           for j in range(50)))
        c.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 8
