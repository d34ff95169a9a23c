"""The local socket beside a server's port: clients on the host use it, with the port's rules, and
only when its owner owns the port; anything else is TCP."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
from dataclasses import dataclass

import pytest

from fluss_spark.config import parse_server_options
from fluss_spark.errors import AuthenticationFailed
from fluss_spark.protocol.api import ApiKey
from fluss_spark.protocol.messages.base import Bytes, Int, Message, Request, wire
from fluss_spark.server.security import Security
from fluss_spark.transport import local_socket
from fluss_spark.transport.client import RpcConnection
from fluss_spark.transport.dispatch import current_peer_address
from fluss_spark.transport.server import RpcServer

PAGE = 1 << 20


@dataclass(frozen=True)
class EchoResponse(Message):
    peer: str = wire(Bytes(), b"")
    data: bytes = wire(Bytes(in_place=True), b"")


@dataclass(frozen=True)
class Echo(Request[EchoResponse]):
    """n pages of byte n, and the address the server saw (an API key this server has free)."""

    API_KEY = ApiKey.LIST_TABLES
    RESPONSE = EchoResponse
    n: int = wire(Int(None, None))


def serve(**kwargs) -> RpcServer:
    srv = RpcServer("127.0.0.1", 0, role="tablet", server_id=1, **kwargs)
    srv.register(Echo, lambda r: EchoResponse(str(current_peer_address()).encode(),
                                              bytes([r.n]) * (r.n * PAGE)))
    srv.start()
    return srv


@pytest.fixture
def server():
    srv = serve()
    yield srv
    srv.stop()


def family(conn: RpcConnection) -> int:
    assert conn._sock is not None
    return conn._sock.family


@pytest.mark.parametrize("local", [True, False])
def test_a_client_on_the_host_uses_the_local_socket_unless_told_not_to(server, local):
    conn = RpcConnection(server.host, server.port, timeout_s=10, local_socket=local)
    try:
        pipe = conn.pipeline(window_bytes=8 * PAGE)
        for n in (1, 2, 3):
            pipe.send(Echo(n))
        got = [pipe.receive() for _ in range(3)]
        assert [bytes(r.data) == bytes([n]) * (n * PAGE) for n, r in zip((1, 2, 3), got)] \
            == [True] * 3
        # Logs, caps and ACL hosts see the address a TCP connection from here comes from.
        assert {bytes(r.peer) for r in got} == {b"127.0.0.1"}
        assert family(pipe) == (socket.AF_UNIX if local else socket.AF_INET)
        pipe.close()
    finally:
        conn.close()


def test_a_server_without_one_and_a_tls_server_are_reached_over_tcp():
    srv = serve(local_socket=False)
    try:
        conn = RpcConnection(srv.host, srv.port, timeout_s=10)
        assert conn.call(Echo(0)).peer == b"127.0.0.1"
        assert family(conn) == socket.AF_INET
        conn.close()
    finally:
        srv.stop()
    assert not RpcConnection("127.0.0.1", 1, tls=object()).local_socket   # type: ignore[arg-type]


def test_a_local_connection_logs_in_as_a_tcp_one_does(tmp_path):
    users = tmp_path / "users"
    users.write_text("alice:secret\ninternal:other\n")
    security = Security.from_options(parse_server_options([
        "security.protocol=SASL", f"security.sasl.users-file={users}"]))
    srv = serve(security=security)
    try:
        good = RpcConnection(srv.host, srv.port, timeout_s=10, credentials=("alice", "secret"))
        assert good.call(Echo(0)).peer == b"127.0.0.1" and family(good) == socket.AF_UNIX
        good.close()
        bad = RpcConnection(srv.host, srv.port, timeout_s=10, credentials=("alice", "nope"))
        with pytest.raises(AuthenticationFailed):
            bad.call(Echo(0))
        bad.close()
    finally:
        srv.stop()


def test_a_name_held_by_a_process_that_owns_no_such_port_is_passed_over(server):
    """Anyone may bind an abstract name nobody holds: a squatter on the name a client tries
    first (the dialed address's, for a wildcard server) gets no client."""
    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    free = socket.create_server(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()                                   # nobody listens on TCP port `port` now
    squatter.bind(local_socket.name("127.0.0.1", port))
    squatter.listen(4)
    try:
        assert local_socket.connect("127.0.0.1", port, 1.0) is None
        # The real server's own name passes the check, and is trusted from then on.
        sock = local_socket.connect(server.host, server.port, 1.0)
        assert sock is not None
        sock.close()
    finally:
        squatter.close()


def test_the_owners_of_tcp_listeners_are_read_by_address(tmp_path):
    # The kernel prints an address as 32-bit words in host order.
    lo = "%08X" % struct.unpack("=I", socket.inet_aton("127.0.0.1"))[0]
    v6 = "".join("%08X" % w for w in struct.unpack("=4I", socket.inet_pton(socket.AF_INET6,
                                                                          "::1")))
    rows = [f"{lo}:1F90 00000000:0000 0A", "00000000:1F90 00000000:0000 0A",
            f"{lo}:1F90 {lo}:E5D4 01", f"{lo}:1F91 00000000:0000 0A"]
    table = tmp_path / "tcp"
    table.write_text(" sl local_address rem_address st tx_queue rx_queue tr tm->when "
                     "retrnsmt uid\n" + "".join(
                         f"{i}: {row} 00000000:00000000 00:00000000 00000000 {uid}\n"
                         for i, (row, uid) in enumerate(zip(rows, (1000, 0, 7, 9)))))
    table6 = tmp_path / "tcp6"
    table6.write_text(f"header\n0: {v6}:1F90 {'0' * 32}:0000 0A 0:0 0:0 0 5\n")
    assert local_socket.tcp_listener_owners(8080, (str(table), str(table6), "/nonexistent")) \
        == {"127.0.0.1": 1000, "0.0.0.0": 0, "::1": 5}


def test_a_name_is_free_again_once_its_server_is_killed():
    """No file is left behind by kill -9: a restarted server binds the name again."""
    code = ("import socket, sys, time\n"
            "from fluss_spark.transport import local_socket\n"
            "s = local_socket.listen('127.0.0.1', 1, 4)\n"
            "print('up' if s else 'taken', flush=True)\n"
            "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        assert local_socket.listen("127.0.0.1", 1, 4) is None      # held
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        again = local_socket.listen("127.0.0.1", 1, 4)
        assert again is not None
        again.close()
    finally:
        proc.kill()
        proc.wait(10)
