"""The RPC port under hostile or careless clients: memory, threads and connections stay bounded,
and normal clients are still served (a real coordinator process)."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from fluss_spark.transport import local_socket
from fluss_spark.transport.client import RpcConnection
from fluss_spark.errors import NetworkError
from fluss_spark.protocol import codec, framing
from fluss_spark.protocol.api import ApiKey
from fluss_spark.testing.coordinator import CoordinatorProcess
from fluss_spark.local.ports import wait_until

LIMITS = ["rpc.max-request-size=8mb", "rpc.max-connections-per-ip=40",
          "rpc.request.read-timeout=1s", "rpc.connection.idle-timeout=2s"]


@pytest.fixture
def coordinator(zk_address, tmp_path):
    proc = CoordinatorProcess(zk_address, tmp_path, options=LIMITS).start()
    yield proc
    proc.stop()


def status(pid: int, field: str) -> int:
    """A number from /proc/<pid>/status (VmRSS in kB, Threads)."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def served(proc) -> bool:
    rpc = RpcConnection(proc.host, proc.port, timeout_s=10)
    try:
        return rpc.call_raw(ApiKey.API_VERSIONS)["server"] == "coordinator"
    finally:
        rpc.close()


def closed_by_server(sock: socket.socket, timeout_s: float) -> bool:
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_headers_announcing_large_frames_allocate_nothing(coordinator):
    rss_before = status(coordinator.pid, "VmRSS")
    socks = []
    for _ in range(30):          # each announces 8 MB (the limit) and sends 1 KB of it
        s = socket.create_connection((coordinator.host, coordinator.port))
        s.sendall(struct.pack(">I", 8 << 20) + b"x" * 1024)
        socks.append(s)
    assert served(coordinator)
    grown_mb = (status(coordinator.pid, "VmRSS") - rss_before) / 1024
    # A buffer per announced length would be 240 MB; what arrived is 30 KB.
    assert grown_mb < 40, f"the coordinator grew by {grown_mb:.0f} MB"
    for s in socks:
        s.close()


def test_a_frame_over_the_limit_is_refused_before_it_is_read(coordinator):
    s = socket.create_connection((coordinator.host, coordinator.port))
    s.sendall(struct.pack(">I", (8 << 20) + 1))
    assert closed_by_server(s, 10)
    assert served(coordinator)


def test_a_request_that_stalls_is_closed_after_the_read_timeout(coordinator):
    frame = framing.encode_frame(codec.encode_request(ApiKey.API_VERSIONS, 0, 1, {}))
    s = socket.create_connection((coordinator.host, coordinator.port))
    s.sendall(frame[:len(frame) // 2])              # slowloris: half a request, then silence
    t0 = time.monotonic()
    assert closed_by_server(s, 15)
    assert 0.9 < time.monotonic() - t0 < 10
    assert served(coordinator)


def test_idle_connections_hold_no_threads_and_are_closed_after_the_idle_timeout(coordinator):
    # The baseline once the coordinator has served (its first handler thread and the threads it
    # starts when it leads exist by then); a thread per connection would add 35.
    assert served(coordinator)
    threads_before = status(coordinator.pid, "Threads")
    socks = [socket.create_connection((coordinator.host, coordinator.port)) for _ in range(35)]
    assert served(coordinator)
    assert status(coordinator.pid, "Threads") <= threads_before + 3
    assert all(closed_by_server(s, 15) for s in socks)   # idle-timeout is 2s
    for s in socks:
        s.close()


def test_connections_past_the_per_address_cap_are_closed_and_others_still_served(coordinator):
    socks = [socket.create_connection((coordinator.host, coordinator.port)) for _ in range(40)]
    extra = socket.create_connection((coordinator.host, coordinator.port))
    assert closed_by_server(extra, 10)
    for s in socks[:5]:
        s.close()
    wait_until(lambda: _try(served, coordinator), 10, "a free connection slot to be reused")
    for s in socks[5:]:
        s.close()


def test_a_local_socket_connection_counts_against_the_same_per_address_cap(coordinator):
    """Through the server process's local socket, a client on its host is the address a TCP
    connection from here comes from: it cannot pass the cap by switching transports."""
    rpc = RpcConnection(coordinator.host, coordinator.port, timeout_s=10)
    tcp = [RpcConnection(coordinator.host, coordinator.port, timeout_s=10, local_socket=False)
           for _ in range(40)]
    try:
        assert rpc.call_raw(ApiKey.API_VERSIONS)["server"] == "coordinator"
        assert rpc._sock is not None and rpc._sock.family == socket.AF_UNIX
        rpc.close()
        for conn in tcp:            # answered once: trusted, so none is evicted for a newcomer
            conn.call_raw(ApiKey.API_VERSIONS)
        local = local_socket.connect(coordinator.host, coordinator.port, 5.0)
        assert local is not None             # the owner of the port holds the name
        assert closed_by_server(local, 1.0)     # at once: the idle timeout is 2 s
        local.close()
    finally:
        for conn in tcp:
            conn.close()


def test_a_client_whose_idle_connection_was_closed_reconnects_transparently(coordinator):
    rpc = RpcConnection(coordinator.host, coordinator.port, timeout_s=10)
    try:
        assert rpc.call_raw(ApiKey.API_VERSIONS)["server"] == "coordinator"
        sock = rpc._sock
        wait_until(lambda: not _open(sock), 15, "the server to close the idle connection")
        assert rpc.call_raw(ApiKey.API_VERSIONS)["server"] == "coordinator"
    finally:
        rpc.close()


def _try(check, *args) -> bool:
    try:
        return check(*args)
    except NetworkError:
        return False


def _open(sock: socket.socket) -> bool:
    import select
    p = select.poll()
    p.register(sock, select.POLLIN)
    return not p.poll(0)
