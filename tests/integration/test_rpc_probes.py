"""Hostile clients against the RPC port of a SASL cluster (real processes): clients that do not
read their replies, floods of sockets that never log in, oversized frames before a login, and a
request dripped one byte at a time. Each test bounds what the attack costs the servers (memory,
latency, a deadline) and fails on a server without the matching defence.

The cluster runs with small caps (server options) so that a flood needs few sockets; floods come
from other loopback addresses (127.0.0.2 ...), which Linux routes to the same host.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import termios
import time
import uuid

import pytest

from fluss_spark.errors import NetworkError
from fluss_spark.local.ports import wait_until
from fluss_spark.protocol import codec, framing
from fluss_spark.protocol.api import ApiKey
from fluss_spark.transport.client import RpcConnection
from fluss_spark.transport.frames import recv_exact
from fluss_spark.testing.blob_api import GetBlob, pattern, serve_blobs
from fluss_spark.transport.limits import RpcLimits
from fluss_spark.transport.server import RpcServer

READ_TIMEOUT_S = 3.0
AUTH_TIMEOUT_S = 2.0
UNAUTH_PER_IP = 8
UNAUTH_TOTAL = 20
PROBE_OPTIONS = (
    "rpc.max-connections=80", "rpc.max-connections-per-ip=60",
    f"rpc.unauthenticated.max-connections={UNAUTH_TOTAL}",
    f"rpc.unauthenticated.max-connections-per-ip={UNAUTH_PER_IP}",
    f"rpc.request.read-timeout={READ_TIMEOUT_S:.0f}s",
    f"rpc.authentication.timeout={AUTH_TIMEOUT_S:.0f}s",
)
#: Other loopback addresses the floods come from (the servers listen on 127.0.0.1).
FLOOD_IPS = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")


@pytest.fixture(scope="module")
def probed(zookeeper, tmp_path_factory):
    """A SASL EmbeddedProcesses (coordinator + 1 tablet) with small RPC caps and short deadlines."""
    from fluss_spark.local.embedded import EmbeddedProcesses
    local = EmbeddedProcesses(tmp_path_factory.mktemp("probes") / "c", tablets=1, sasl=True,
                              zookeeper=f"{zookeeper.address}/fluss-probes-{uuid.uuid4().hex[:12]}",
                              server_options=PROBE_OPTIONS)
    local.start()
    yield local
    local.stop()


def server(cluster, role: str):
    return next(s for s in cluster.servers.values() if s.role == role)


def frame(api_key: int, cid: int, body: dict, segments: bool = False) -> bytes:
    return framing.encode_frame(codec.encode_request(api_key, 1, cid, body, segments=segments))


def read_reply(sock: socket.socket) -> codec.ResponseEnvelope:
    header = recv_exact(sock, framing.HEADER.size)
    assert header is not None, "the server closed the connection"
    payload = recv_exact(sock, framing.decode_length(header))
    assert payload is not None, "the server closed the connection"
    return codec.decode_response(payload)


def login(sock: socket.socket, credentials: tuple[str, str]) -> None:
    user, password = credentials
    token = b"\0" + user.encode() + b"\0" + password.encode()
    sock.sendall(frame(ApiKey.AUTHENTICATE, 1, {"mechanism": "PLAIN", "token": token}))
    read_reply(sock).raise_for_error()


def connect(host: str, port: int, source_ip: str | None = None,
            rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if rcvbuf is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        if source_ip is not None:
            sock.bind((source_ip, 0))
        sock.settimeout(5)
        sock.connect((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def closed_by_server(sock: socket.socket, timeout_s: float) -> bool:
    """Whether the server closes ``sock`` within ``timeout_s`` (replies are read and dropped)."""
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            if sock.recv(65536) == b"":
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
    return False


def unread_bytes(sock: socket.socket) -> int:
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]


def status_kb(pid: int, field: str) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def api_versions_s(host: str, port: int, credentials, timeout_s: float = 5.0) -> float:
    """Seconds a new authenticated client takes to connect, log in and get API_VERSIONS
    (``timeout_s`` when it gets no answer)."""
    t0 = time.monotonic()
    rpc = RpcConnection(host, port, timeout_s=timeout_s, connect_timeout_s=timeout_s,
                        credentials=credentials)
    try:
        rpc.call_raw(ApiKey.API_VERSIONS)
    except NetworkError:
        return timeout_s
    finally:
        rpc.close()
    return time.monotonic() - t0


def test_api_versions_lists_authenticate_and_every_served_api(probed):
    for role in ("coordinator", "tablet"):
        s = server(probed, role)
        rpc = RpcConnection(probed.host, s.port, timeout_s=5)
        try:
            keys = set(rpc.call_raw(ApiKey.API_VERSIONS)["api_keys"])
        finally:
            rpc.close()
        assert {ApiKey.API_VERSIONS, ApiKey.AUTHENTICATE} <= keys, role


def test_clients_that_do_not_read_their_replies_leave_others_their_latency(probed):
    """40 logged-in clients each ask for two 4 MB log fetches (more than a socket buffers) and
    never read a reply: the tablet keeps one reply pending per client and stops reading from it,
    and its handler threads stay free for everyone else."""
    import pyarrow as pa
    with probed.connection(request_timeout_s=30) as conn:
        conn.admin().create_table("probe.unread", "k BIGINT, v STRING", num_buckets=1)
        conn.writer("probe.unread").append(pa.table({        # incompressible: 4 MB of rows
            "k": pa.array(range(4096), pa.int64()),
            "v": [os.urandom(512).hex() for _ in range(4096)]}))
        table_id = conn.table("probe.unread").table_id
    tablet = server(probed, "tablet")
    fetch = {"table_id": table_id, "bucket": 0, "offset": 0, "max_bytes": 4 << 20}
    # Segmented replies (as the client asks): the records go out as they lie in the log.
    pipeline = (frame(ApiKey.FETCH_LOG, 2, fetch, segments=True)
                + frame(ApiKey.FETCH_LOG, 3, fetch, segments=True))
    socks = []
    try:
        for _ in range(40):
            s = connect(probed.host, tablet.port, rcvbuf=4096)
            socks.append(s)
            login(s, probed.credentials)
        for s in socks:
            s.sendall(pipeline)
        # At once (the probe's requests queue behind the 40 fetches), and once the replies
        # have piled up unread in every client's receive buffer.
        latencies = [api_versions_s(probed.host, tablet.port, probed.credentials)
                     for _ in range(3)]
        wait_until(lambda: all(unread_bytes(s) >= 2048 for s in socks), 20,
                   "replies to pile up unread on every non-reading client")
        latencies += [api_versions_s(probed.host, tablet.port, probed.credentials)
                      for _ in range(3)]
        print("API_VERSIONS latencies (s):", [round(x, 3) for x in latencies])
        assert max(latencies) < 1.0, \
            f"API_VERSIONS took {max(latencies):.1f}s with 40 clients not reading"
    finally:
        for s in socks:
            s.close()


def test_unauthenticated_clients_at_the_cap_cost_the_coordinator_little_memory(probed):
    """36 sockets from 3 addresses each announce an 8 MB frame and send 2 MB of it without
    logging in: the coordinator refuses each frame from its header and buffers nothing."""
    coordinator = server(probed, "coordinator")
    pid = coordinator.pid
    rss_before = status_kb(pid, "VmRSS")
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")            # VmHWM := VmRSS, so the peak below is this test's
        peak_field = "VmHWM"
    except OSError:
        peak_field = "VmRSS"
    payload = b"x" * (2 << 20)
    socks = []
    try:
        for ip in FLOOD_IPS[:3]:
            for _ in range(12):
                try:
                    s = connect(probed.host, coordinator.port, source_ip=ip)
                except OSError:
                    continue
                socks.append(s)
                try:
                    s.sendall(struct.pack(">I", 8 << 20) + payload)
                except OSError:
                    pass            # closed by the server: the frame was refused
        assert api_versions_s(probed.host, coordinator.port, probed.credentials) < 5
        grown_mb = (status_kb(pid, peak_field) - rss_before) / 1024
        assert grown_mb < 100, f"the coordinator's {peak_field} grew by {grown_mb:.0f} MB"
    finally:
        for s in socks:
            s.close()


def test_an_authenticated_client_connects_during_a_flood_from_other_addresses(probed):
    """100 sockets from 4 other addresses that never log in would fill the cap of 80: they
    are refused past their own cap, evicted first, and a client that logs in still gets in."""
    coordinator = server(probed, "coordinator")
    flood = []
    try:
        for ip in FLOOD_IPS:
            for _ in range(25):
                try:
                    flood.append(connect(probed.host, coordinator.port, source_ip=ip))
                except OSError:
                    pass
        rpc = RpcConnection(probed.host, coordinator.port, timeout_s=5,
                            credentials=probed.credentials)
        try:
            assert rpc.call_raw(ApiKey.API_VERSIONS)["server"] == "coordinator"
            rpc.call_raw(ApiKey.LIST_TABLES, {})        # served: it logged in
        finally:
            rpc.close()
    finally:
        for s in flood:
            s.close()
    # Dozens of refusals and evictions per address, at most one log line per address (10 s).
    log = probed.log_path("coordinator", coordinator.server_id).read_text()
    for ip in FLOOD_IPS:
        lines = [line for line in log.splitlines() if f"from {ip}" in line]
        assert len(lines) <= 3, f"{len(lines)} log lines about {ip}"


def test_a_dripped_request_is_closed_at_its_deadline_from_its_first_byte(probed):
    """One byte every 0.25 s keeps bytes arriving, but the request as a whole must arrive
    within rpc.request.read-timeout of its first byte."""
    coordinator = server(probed, "coordinator")
    s = connect(probed.host, coordinator.port)
    try:
        login(s, probed.credentials)
        data = frame(ApiKey.API_VERSIONS, 2, {"pad": "x" * 40})
        assert len(data) * 0.25 > READ_TIMEOUT_S + 3     # the drip outlasts the deadline
        started = time.monotonic()
        closed = False
        for byte in data:
            try:
                s.send(bytes([byte]))
            except OSError:
                closed = True
                break
            if closed_by_server(s, 0.25):
                closed = True
                break
            if time.monotonic() - started > READ_TIMEOUT_S + 3:
                break
        held = time.monotonic() - started
        assert closed, f"the dripped request was still open after {held:.1f}s"
        assert held < READ_TIMEOUT_S + 1.5, f"closed only after {held:.1f}s"
    finally:
        s.close()


def test_a_large_frame_before_login_is_refused_from_its_header(probed):
    """A frame over rpc.unauthenticated.max-request-size (64 KiB) before a login closes the
    connection at once: nothing of it is buffered, no deadline is waited for."""
    coordinator = server(probed, "coordinator")
    s = connect(probed.host, coordinator.port)
    try:
        s.sendall(struct.pack(">I", 1 << 20) + b"x" * 1024)
        t0 = time.monotonic()
        assert closed_by_server(s, 1.0), "a 1 MB frame before login was not refused"
        assert time.monotonic() - t0 < 1.0
    finally:
        s.close()
    # A small frame is fine before login (API_VERSIONS is the handshake's first request).
    s = connect(probed.host, coordinator.port)
    try:
        s.sendall(frame(ApiKey.API_VERSIONS, 1, {}))
        assert read_reply(s).raise_for_error()["server"] == "coordinator"
    finally:
        s.close()


def test_a_connection_that_does_not_log_in_is_closed_at_the_handshake_deadline(probed):
    coordinator = server(probed, "coordinator")
    s = connect(probed.host, coordinator.port)
    try:
        t0 = time.monotonic()
        s.sendall(frame(ApiKey.API_VERSIONS, 1, {}))
        read_reply(s).raise_for_error()
        assert closed_by_server(s, AUTH_TIMEOUT_S + 3), "still open after the handshake deadline"
        assert AUTH_TIMEOUT_S - 0.5 < time.monotonic() - t0 < AUTH_TIMEOUT_S + 2
    finally:
        s.close()


# -- one RpcServer in this process: replies nobody reads ------------------------------------------
@pytest.fixture
def blob_server(request):
    limits = RpcLimits(handler_threads=2, **getattr(request, "param", {}))
    srv = RpcServer("127.0.0.1", 0, role="tablet", server_id=1, limits=limits)
    serve_blobs(srv)
    srv.start()
    yield srv
    srv.stop()


def test_large_replies_the_loop_finishes_arrive_whole_and_in_order(blob_server):
    """A 16 MB reply to a client that reads late does not fit the socket: the handler sends
    what it takes, the loop the rest; every byte arrives in order and the connection serves
    the next request."""
    s = connect(blob_server.host, blob_server.port, rcvbuf=4096)
    try:
        for cid, size in ((1, 16 << 20), (2, 5), (3, 9 << 20)):
            deferred = blob_server.stats["deferred"]
            s.sendall(frame(ApiKey.GET_METRICS, cid, {"size": size}))
            if size > 1 << 20:
                wait_until(lambda: blob_server.stats["deferred"] > deferred, 10,
                           "the loop to take over the rest of the reply")
            reply = read_reply(s)
            assert reply.correlation_id == cid
            assert reply.raise_for_error()["data"] == pattern(size)
    finally:
        s.close()
    wait_until(lambda: blob_server._unsent == 0 and not blob_server._writers, 5,
               "no reply left unsent")


def _ask_and_never_read(srv: RpcServer, size: int) -> socket.socket:
    s = connect(srv.host, srv.port, rcvbuf=4096)
    s.sendall(frame(ApiKey.GET_METRICS, 1, {"size": size}))
    return s


@pytest.mark.parametrize("blob_server", [{"write_timeout_s": 1.0}], indirect=True)
def test_replies_nobody_reads_hold_no_handler_thread_and_are_dropped_at_the_write_timeout(
        blob_server):
    socks = [_ask_and_never_read(blob_server, 16 << 20) for _ in range(4)]   # 2 handler threads
    try:
        rpc = RpcConnection(blob_server.host, blob_server.port, timeout_s=5)
        t0 = time.monotonic()
        assert len(rpc.call(GetBlob(size=10)).data) == 10
        assert time.monotonic() - t0 < 1.0
        rpc.close()
        wait_until(lambda: blob_server.stats["unread"] == 4, 5,
                   "the four unread replies to be dropped at the write timeout")
        assert not blob_server._writers and blob_server._unsent == 0
    finally:
        for s in socks:
            s.close()


@pytest.mark.parametrize("blob_server", [{"max_unsent_bytes": 40 << 20}], indirect=True)
def test_unread_replies_past_the_unsent_bytes_cap_close_the_oldest(blob_server):
    socks = []
    try:
        for _ in range(4):
            socks.append(_ask_and_never_read(blob_server, 16 << 20))
        wait_until(lambda: blob_server.stats["unread"] >= 1, 10,
                   "the oldest unread reply to be dropped")
        assert blob_server._unsent <= 40 << 20 or len(blob_server._writers) == 1
    finally:
        for s in socks:
            s.close()


@pytest.mark.parametrize("blob_server", [{"max_connections": 6}], indirect=True)
def test_plaintext_sockets_that_never_sent_a_request_are_evicted_at_the_cap(blob_server):
    """PLAINTEXT has no login: a connection not answered yet is the one evicted at the cap."""
    silent = []
    try:
        for _ in range(6):
            silent.append(connect(blob_server.host, blob_server.port, source_ip="127.0.0.2"))
        wait_until(lambda: len(blob_server._conns) == 6, 5, "the silent sockets to be accepted")
        rpc = RpcConnection(blob_server.host, blob_server.port, timeout_s=5)
        try:
            assert len(rpc.call(GetBlob(size=3)).data) == 3
        finally:
            rpc.close()
        assert blob_server.stats["evicted"] == 1 and blob_server.stats["refused"] == 0
        assert closed_by_server(silent[0], 5)           # the oldest went
    finally:
        for s in silent:
            s.close()


@pytest.mark.parametrize("blob_server", [{"max_request_bytes": 64 << 20}], indirect=True)
def test_a_request_buffer_takes_memory_as_its_bytes_arrive(blob_server):
    """A frame announcing 64 MB of which 4 MB arrived costs about 4 MB (this process's RSS),
    not the announced length nor a multiple of what arrived."""
    data = struct.pack(">I", 64 << 20) + b"x" * (4 << 20)
    rss_before = status_kb(os.getpid(), "VmRSS")
    s = connect(blob_server.host, blob_server.port)
    try:
        s.sendall(data)

        def arrived():
            conns = list(blob_server._conns.values())
            return conns and conns[0].got >= 4 << 20
        wait_until(arrived, 10, "4 MB of the request to arrive")
        grown_mb = (status_kb(os.getpid(), "VmRSS") - rss_before) / 1024
        # Before, the buffer grew to 8x what arrived: 32 MB here.
        assert grown_mb < 16, f"reading 4 MB of a request took {grown_mb:.0f} MB"
    finally:
        s.close()
