"""PipelinedConnection against a real RpcServer: requests sent ahead are answered in order, the
server answers the ones already waiting without its event loop, and a lost connection loses
every request in flight."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass

import pytest

from fluss_spark.errors import NetworkError
from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.messages.base import Bytes, Int, Message, Request, wire
from fluss_spark.transport.client import RpcConnection
from fluss_spark.transport.pipeline import receive_buffer
from fluss_spark.transport.server import RpcServer

PAGE = 256 * 1024


@dataclass(frozen=True)
class PageResponse(Message):
    n: int = wire(Int(None, None))
    data: bytes = wire(Bytes(in_place=True), b"")


@dataclass(frozen=True)
class Page(Request[PageResponse]):
    """Page n: n and PAGE bytes of n, served under an API key this test server has free."""

    API_KEY = ApiKey.LIST_TABLES
    RESPONSE = PageResponse
    n: int = wire(Int(None, None))


@pytest.fixture
def server():
    srv = RpcServer("127.0.0.1", 0, role="tablet", server_id=1)
    srv.all_sent = threading.Event()

    def page(request: Page) -> PageResponse:
        if request.n == 0:                  # the others are on the wire before this answer
            assert srv.all_sent.wait(10)
        return PageResponse(request.n, bytes([request.n]) * PAGE)
    srv.register(Page, page)
    srv.start()
    yield srv
    srv.stop()


def test_requests_sent_ahead_are_answered_in_order_without_the_event_loop(server):
    conn = RpcConnection(server.host, server.port, timeout_s=10).pipeline()
    try:
        for n in range(4):
            conn.send(Page(n))
        server.all_sent.set()
        assert conn.in_flight == 4
        got = [conn.receive() for _ in range(4)]
        assert [(r.n, bytes(r.data) == bytes([r.n]) * PAGE) for r in got] == \
            [(n, True) for n in range(4)]
        assert isinstance(got[0].data, memoryview)      # read in place from a pooled buffer
        assert server.stats["inline"] == 3             # answered by the handler of page 0
    finally:
        conn.close()


def test_a_lost_connection_loses_the_requests_in_flight(server):
    conn = RpcConnection(server.host, server.port, timeout_s=10).pipeline()
    try:
        # No answer is sent before the connection is lost (page 0 waits for all_sent): an
        # answer already in the socket's buffer would still be read.
        conn.send(Page(0))
        conn.send(Page(2))
        assert conn._sock is not None
        conn._sock.shutdown(socket.SHUT_RDWR)
        with pytest.raises(NetworkError):
            conn.receive()
        assert conn.in_flight == 0
        server.all_sent.set()
        conn.send(Page(3))                              # a new connection
        assert conn.receive().n == 3
    finally:
        conn.close()


def test_the_receive_buffer_is_fixed_only_where_it_holds_every_response_in_flight():
    mb = 1 << 20
    assert receive_buffer(8 * mb, 4 * mb) == 4 * mb        # Linux doubles it: 8 MB of window
    assert receive_buffer(9 * mb, 4 * mb) is None          # autotuning may grow past 8 MB
    assert receive_buffer(None, 4 * mb) is None
    assert receive_buffer(8 * mb, None) is None            # no /proc: leave the kernel be
