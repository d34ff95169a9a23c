"""The RPC server: one event-loop thread accepts and reads, a pool of threads handles and answers.

Why an event loop: a thread per connection let 500 idle connections hold 500 threads, and a
frame buffer allocated from the length header let six connections that sent only a header take
1.6 GB. Here a connection costs a small object until bytes arrive, a request's buffer grows with
the bytes that actually arrived (never beyond ``rpc.max-request-size``), and the loop closes
connections that are idle (``rpc.connection.idle-timeout``), that stall inside a request
(``rpc.request.read-timeout``), or that pass the caps per server and per client address.

A connection has at most one request in flight: the loop stops reading from it while a handler
thread runs the request and sends the reply, so replies go out in request order and a client
cannot queue work without bound.
"""

from __future__ import annotations

import collections
import contextvars
import fcntl
import logging
import queue
import selectors
import socket
import struct
import termios
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, TypeVar

from fluss_spark import config
from fluss_spark.errors import (ApiError, AuthenticationFailed, CorruptMessage,
                                MetadataStoreUnavailable, UnknownServerError, UnsupportedVersion)
from fluss_spark.protocol import codec, framing
from fluss_spark.protocol.api import CURRENT_VERSION, ApiKey
from fluss_spark.protocol.messages import (ApiVersionsRequest, ApiVersionsResponse,
                                           AuthenticateRequest, AuthenticateResponse, Message,
                                           Request)

log = logging.getLogger(__name__)

Q = TypeVar("Q", bound=Request)
#: A handler takes a decoded request and returns its response message.
Handler = Callable[[Any], Message]

#: Who sent the request a handler thread is running (None: not authenticated, PLAINTEXT).
_principal: contextvars.ContextVar[str | None] = contextvars.ContextVar("principal",
                                                                         default=None)


def current_principal() -> str | None:
    """The principal of the request being handled in this thread."""
    return _principal.get()


def run_as(principal: str | None, fn: Callable, *args: Any) -> Any:
    """Run ``fn(*args)`` with ``current_principal()`` answering ``principal``."""
    token = _principal.set(principal)
    try:
        return fn(*args)
    finally:
        _principal.reset(token)


class Authenticator(Protocol):
    """What the server needs of its security settings."""

    @property
    def sasl(self) -> bool: ...

    def authenticate(self, mechanism: Any, token: Any, peer: str | None = None) -> str: ...


class _NoAuthentication:
    """PLAINTEXT: every connection is served unauthenticated."""

    sasl = False

    def authenticate(self, mechanism: Any, token: Any, peer: str | None = None) -> str:
        raise AuthenticationFailed("this server does not authenticate (PLAINTEXT)")

#: A request's first payload buffer, and how many times what arrived a full buffer grows to
#: (up to the frame's length): a buffer holds at most _GROWTH times the bytes that arrived.
_MIN_BUFFER = 64 << 10
_GROWTH = 8
#: How often the loop looks for idle and stalled connections when nothing happens.
_TICK_S = 0.5
#: Entries one msgpack array or map of a request may have: a 1,000,000-bucket lease fits; a
#: frame of one huge container cannot make the decoder allocate far beyond the frame's size.
_MAX_CONTAINER = 1 << 21


@dataclass(frozen=True)
class RpcLimits:
    """What one server accepts on its port (the ``rpc.*`` server options)."""

    max_request_bytes: int = config.RPC_MAX_REQUEST_SIZE.default
    max_connections: int = config.RPC_MAX_CONNECTIONS.default
    max_connections_per_ip: int = config.RPC_MAX_CONNECTIONS_PER_IP.default
    idle_timeout_s: float = config.RPC_IDLE_TIMEOUT.default / 1000
    read_timeout_s: float = config.RPC_READ_TIMEOUT.default / 1000
    handler_threads: int = config.RPC_HANDLER_THREADS.default
    backlog: int = 1024

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> "RpcLimits":
        def get(opt):
            return options.get(opt.key, opt.default)
        return cls(max_request_bytes=get(config.RPC_MAX_REQUEST_SIZE),
                   max_connections=get(config.RPC_MAX_CONNECTIONS),
                   max_connections_per_ip=get(config.RPC_MAX_CONNECTIONS_PER_IP),
                   idle_timeout_s=get(config.RPC_IDLE_TIMEOUT) / 1000,
                   read_timeout_s=get(config.RPC_READ_TIMEOUT) / 1000,
                   handler_threads=get(config.RPC_HANDLER_THREADS))


class _Connection:
    """One client socket and where its current request or response stands."""

    __slots__ = ("sock", "ip", "head", "buf", "got", "length", "last_active", "request_started",
                 "busy", "principal")

    def __init__(self, sock: socket.socket, ip: str, now: float):
        self.sock, self.ip = sock, ip
        self.head = bytearray(framing.HEADER.size)
        self.buf = bytearray()          # the payload received so far (``got`` bytes of it)
        self.got = 0                    # bytes of the header, then of the payload, received
        self.length: int | None = None  # payload length once the header is in
        self.last_active = now
        self.request_started: float | None = None
        self.busy = False               # a handler runs (and answers) this connection's request
        self.principal: str | None = None  # who authenticated on this connection (SASL)


class RpcServer:
    """Serves handlers registered per api key on a loopback or public address.

    A peer that sends garbage gets an error response (when a correlation id can be read) and is
    disconnected; the server keeps serving everyone else.
    """

    def __init__(self, host: str, port: int, *, role: str, server_id: int,
                 disabled: frozenset[int] = frozenset(), limits: RpcLimits | None = None,
                 security: Authenticator | None = None):
        self.role = role
        self.security: Authenticator = security or _NoAuthentication()
        self.server_id = server_id
        self.limits = limits or RpcLimits()
        self._handlers: dict[int, tuple[type[Request], Handler]] = {}
        self._disabled = disabled
        self.register(ApiVersionsRequest, self._api_versions)
        self._listener = socket.create_server((host, port), backlog=self.limits.backlog)
        self._listener.setblocking(False)
        self.host, self.port = self._listener.getsockname()[:2]
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._conns: dict[int, _Connection] = {}
        self._per_ip: collections.Counter = collections.Counter()
        self._pool: ThreadPoolExecutor | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        #: Counters for tests and operators: connections refused, closed as idle or stalled.
        self.stats: collections.Counter = collections.Counter()

    def register(self, request_type: type[Q], handler: Callable[[Q], Message]) -> None:
        """Serve ``request_type``: its requests are decoded (and checked) into that type."""
        if request_type.API_KEY not in self._disabled:
            self._handlers[int(request_type.API_KEY)] = (request_type, handler)

    def start(self) -> None:
        self._pool = ThreadPoolExecutor(self.limits.handler_threads,
                                        thread_name_prefix=f"{self.role}-handler")
        self._selector.register(self._listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(target=self._loop, name=f"{self.role}-rpc", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        for conn in list(self._conns.values()):
            self._close(conn)
        for s in (self._listener, self._wake_r, self._wake_w):
            try:
                s.close()
            except OSError:
                pass
        self._selector.close()

    def _api_versions(self, request: ApiVersionsRequest) -> ApiVersionsResponse:
        return ApiVersionsResponse(api_keys=tuple(sorted(self._handlers)), server=self.role,
                                   server_id=self.server_id)

    # -- the event loop ---------------------------------------------------------------------------
    def _loop(self) -> None:
        next_sweep = time.monotonic() + _TICK_S
        while not self._stopping.is_set():
            try:
                events = self._selector.select(_TICK_S)
            except OSError:
                if self._stopping.is_set():
                    return
                raise
            for key, _ in events:
                try:
                    if key.data == "accept":
                        self._accept()
                    elif key.data == "wake":
                        self._drain_wake()
                    else:
                        self._read(key.data)
                except Exception:  # noqa: BLE001 - one bad connection must not stop the loop
                    log.exception("RPC event loop: handling %s failed", key.data)
                    if isinstance(key.data, _Connection):
                        self._close(key.data)
            self._resume()
            now = time.monotonic()
            if now >= next_sweep:
                self._sweep(now)
                next_sweep = now + _TICK_S

    def _accept(self) -> None:
        while True:
            try:
                sock, addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:     # e.g. out of file descriptors: keep serving the others
                log.warning("accepting a connection failed: %s", e)
                return
            ip = addr[0]
            if (len(self._conns) >= self.limits.max_connections
                    or self._per_ip[ip] >= self.limits.max_connections_per_ip):
                self.stats["refused"] += 1
                if self.stats["refused"] in (1, 10, 100) or self.stats["refused"] % 1000 == 0:
                    log.warning("refused a connection from %s: %d open (at most %d), %d from that "
                                "address (at most %d); %d refused so far", ip, len(self._conns),
                                self.limits.max_connections, self._per_ip[ip],
                                self.limits.max_connections_per_ip, self.stats["refused"])
                sock.close()
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Connection(sock, ip, time.monotonic())
            self._conns[sock.fileno()] = conn
            self._per_ip[ip] += 1
            self._selector.register(sock, selectors.EVENT_READ, conn)

    def _read(self, conn: _Connection) -> None:
        # Read until the socket is drained or a request is complete: one wake-up of the loop
        # takes in what has arrived, not one buffer's worth.
        while self._read_once(conn):
            pass

    def _read_once(self, conn: _Connection) -> bool:
        """One read; True when more may be waiting for this connection."""
        header = framing.HEADER.size
        if conn.length is None:
            want = memoryview(conn.head)[conn.got:]
        else:
            if conn.got == len(conn.buf):
                # Grow to a multiple of what arrived (never to the announced length at once),
                # so a peer that announces a large frame and stalls holds little memory, while
                # a real request is copied at most a few times (each growth copies and faults
                # in fresh pages: doubling from 256 KB doubled the time to read 1 MB).
                arrived = conn.got + _available(conn.sock)
                grown = bytearray(min(conn.length, max(_MIN_BUFFER, _GROWTH * arrived)))
                grown[:conn.got] = memoryview(conn.buf)[:conn.got]
                conn.buf = grown
            want = memoryview(conn.buf)[conn.got:]
        try:
            n = conn.sock.recv_into(want)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            self._close(conn)
            return False
        if not n:
            self._close(conn)
            return False
        now = time.monotonic()
        conn.last_active = now
        if conn.request_started is None:
            conn.request_started = now
        conn.got += n
        if conn.length is None:
            if conn.got < header:
                return True
            try:
                conn.length = framing.decode_length(bytes(conn.head),
                                                    self.limits.max_request_bytes)
            except CorruptMessage as e:
                log.warning("closing the connection from %s: %s", conn.ip, e)
                self.stats["oversized"] += 1
                self._close(conn)
                return False
            conn.buf, conn.got = bytearray(), 0
        if conn.got < conn.length:
            return True
        payload = conn.buf
        conn.buf, conn.got, conn.length, conn.request_started = bytearray(), 0, None, None
        conn.busy = True
        self._selector.unregister(conn.sock)   # nothing more is read until the reply is out
        assert self._pool is not None       # started before the loop runs
        self._pool.submit(self._run, conn, payload)
        return False

    def _run(self, conn: _Connection, payload: bytearray) -> None:
        """In a handler thread: answer one request, send the reply, hand the connection back."""
        try:
            reply, keep = self._dispatch(payload, conn)
        except Exception:  # noqa: BLE001 - _dispatch answers every error; belt and braces
            log.exception("request handling failed")
            reply = [codec.encode_response(-1, error=UnknownServerError("internal error"))]
            keep = False
        del payload
        try:
            # Blocking, with a deadline: a client that reads is served at socket speed (a send
            # loop in the event loop measured slower); one that stops reading its reply for
            # rpc.request.read-timeout is disconnected and frees the thread.
            conn.sock.settimeout(self.limits.read_timeout_s)
            send_parts(conn.sock, framing.frame_parts(reply))
            conn.sock.setblocking(False)
        except OSError:
            keep = False
        self._done.put((conn, keep))
        self._wake()

    def _resume(self) -> None:
        """Read again from connections whose reply went out (or close them)."""
        while True:
            try:
                conn, keep = self._done.get_nowait()
            except queue.Empty:
                return
            if not self._open(conn):
                continue            # closed while its handler ran (server stopping)
            conn.busy = False
            conn.last_active = time.monotonic()
            if keep:
                self._selector.register(conn.sock, selectors.EVENT_READ, conn)
            else:
                self._close(conn)

    def _sweep(self, now: float) -> None:
        """Close connections idle past the idle timeout, or stalled inside a request."""
        for conn in list(self._conns.values()):
            if conn.busy:
                continue
            if conn.request_started is not None:
                if now - conn.last_active > self.limits.read_timeout_s:
                    self.stats["stalled"] += 1
                    log.info("closing the connection from %s: a request stalled for %.0fs",
                             conn.ip, now - conn.last_active)
                    self._close(conn)
            elif now - conn.last_active > self.limits.idle_timeout_s:
                self.stats["idle"] += 1
                self._close(conn)

    def _open(self, conn: _Connection) -> bool:
        return self._conns.get(conn.sock.fileno()) is conn

    def _close(self, conn: _Connection) -> None:
        if not self._open(conn):
            return
        del self._conns[conn.sock.fileno()]
        self._per_ip[conn.ip] -= 1
        if self._per_ip[conn.ip] <= 0:
            del self._per_ip[conn.ip]
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        try:
            conn.sock.close()
        except OSError:
            pass

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except (BlockingIOError, OSError):
            pass            # a wake-up is already pending, or the server is stopping

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    # -- requests ---------------------------------------------------------------------------------
    def _dispatch(self, payload: bytes | bytearray,
                  conn: _Connection | None = None) -> tuple[list, bool]:
        """The reply (as buffers to send in order) and whether to keep the connection."""
        try:
            req = codec.decode_request(payload, max_container=_MAX_CONTAINER)
        except CorruptMessage as e:
            return [codec.encode_response(-1, error=e)], False
        cid = req.correlation_id
        if req.api_key == ApiKey.AUTHENTICATE:
            return self._authenticate(req, conn)
        if self.security.sasl and conn is not None and conn.principal is None \
                and req.api_key != ApiKey.API_VERSIONS:
            denied = AuthenticationFailed(
                f"the {self.role} requires SASL authentication (security.protocol=SASL): "
                f"authenticate before {_api_name(req.api_key)} (client username and password "
                f"options)")
            return [codec.encode_response(cid, error=denied)], False
        served = self._handlers.get(req.api_key)
        principal = conn.principal if conn is not None else None
        try:
            if served is None:
                raise UnsupportedVersion(f"the {self.role} does not support API "
                                         f"{_api_name(req.api_key)}")
            if req.api_version != CURRENT_VERSION:
                raise UnsupportedVersion(
                    f"API {req.api_key} version {req.api_version} is not supported "
                    f"(supported: {CURRENT_VERSION})")
            request_type, handler = served
            request = request_type.decode(req.body)     # InvalidRequest names a bad field
            response = run_as(principal, handler, request)
            return codec.encode_response_parts(cid, response.to_wire(),
                                               segments=req.segments), True
        except ApiError as e:
            if isinstance(e, MetadataStoreUnavailable):  # an outage operators must see
                log.warning("%s failed: %s", _api_name(req.api_key), e)
            return [codec.encode_response(cid, error=e)], True
        except Exception as e:  # noqa: BLE001 - a bug of ours, not the client's: say so
            log.exception("%s failed", _api_name(req.api_key))
            err = UnknownServerError(f"{_api_name(req.api_key)} failed inside the {self.role}: "
                                     f"{type(e).__name__}: {e}")
            return [codec.encode_response(cid, error=err)], True

    def _authenticate(self, req: codec.RequestEnvelope,
                      conn: _Connection | None) -> tuple[list, bool]:
        cid = req.correlation_id
        if not self.security.sasl or conn is None:
            return [codec.encode_response(cid, AuthenticateResponse(None).to_wire())], True
        try:
            request = AuthenticateRequest.decode(req.body, error=AuthenticationFailed)
            conn.principal = self.security.authenticate(request.mechanism, request.token,
                                                        conn.ip)   # throttled per address
        except AuthenticationFailed as e:
            log.warning("authentication from %s failed", conn.ip)
            return [codec.encode_response(cid, error=e)], False
        return [codec.encode_response(cid, AuthenticateResponse(conn.principal).to_wire())], True


def send_parts(sock: socket.socket, parts: list) -> None:
    """Send buffers in order with scatter/gather calls (no joined copy of a large reply)."""
    views = [v for v in (memoryview(p).cast("B") for p in parts) if v.nbytes]
    while views:
        sent = sock.sendmsg(views[:_IOV_MAX])
        while sent:
            if sent >= views[0].nbytes:
                sent -= views[0].nbytes
                views.pop(0)
            else:
                views[0] = views[0][sent:]
                sent = 0


#: Buffers per sendmsg call (Linux's IOV_MAX is 1024).
_IOV_MAX = 1024


def _available(sock: socket.socket) -> int:
    """Bytes waiting in the socket's receive buffer (they count as arrived)."""
    try:
        return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return 0


def _api_name(key: int) -> str:
    try:
        return ApiKey(key).name
    except ValueError:
        return f"api {key}"
