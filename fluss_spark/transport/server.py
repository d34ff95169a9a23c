"""The RPC server: one event-loop thread accepts, reads and writes; a pool of threads handles.

Why an event loop: a thread per connection let 500 idle connections hold 500 threads, and a
frame buffer allocated from the length header let six connections that sent only a header take
1.6 GB. Here a connection costs a small object until bytes arrive, a request's buffer takes
memory as its bytes arrive (an uninitialised buffer gets pages as they are written), and the loop
closes connections that are idle (``rpc.connection.idle-timeout``), that take longer than
``rpc.request.read-timeout`` from a request's first byte to its last, that leave a reply unread
for ``rpc.response.write-timeout``, or that pass the caps per server and per client address.

A connection has at most one request in flight: the loop stops reading from it while a handler
thread runs the request and until its reply is sent, so replies go out in request order and a
client cannot queue work without bound. A handler thread never waits on a socket: it sends what
the socket takes at once and leaves the rest to the loop, so clients that do not read their
replies cost memory (bounded by ``rpc.response.max-unsent-bytes``), never handler threads.

With SASL, a connection that has not authenticated may send only small frames
(``rpc.unauthenticated.max-request-size``), must authenticate within
``rpc.authentication.timeout``, and counts against caps of its own
(``rpc.unauthenticated.max-connections[-per-ip]``); it is the first evicted when a cap is
reached, so a flood of sockets that never log in cannot lock out clients that do. With TLS
(``transport.tls``) the loop runs each handshake without blocking; a connection still in its
handshake counts as one that has not authenticated (the same deadline, caps and eviction).
"""

from __future__ import annotations

import collections
import logging
import queue
import selectors
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar, Union, cast

import numpy as np

from fluss_spark.errors import CorruptMessage, UnknownServerError
from fluss_spark.protocol import codec, framing
from fluss_spark.protocol.messages import Message, Request
from fluss_spark.transport import local_socket as _local
from fluss_spark.transport import tls as _tls
from fluss_spark.transport.admission import Admission
from fluss_spark.transport.dispatch import Authenticator, Dispatcher, NoAuthentication
from fluss_spark.transport.limits import RpcLimits
from fluss_spark.transport.log_limiter import LogLimiter
from fluss_spark.transport.sending import as_views, send_some, send_within

log = logging.getLogger(__name__)

Q = TypeVar("Q", bound="Request[Any]")

#: Frames up to this size are read into a bytearray of their length. A larger frame is read
#: into an uninitialised buffer of its announced length (numpy.empty: malloc, never written
#: before the socket writes it): fresh memory takes pages only as bytes are written there, so
#: its memory follows the bytes that arrived (a peer that announces 32 MB and sends 1 KB costs
#: a page), while memory the allocator reuses costs nothing new; the request is read in place,
#: with no copy or regrowth (zero-filling a bytearray of the announced length would cost it all).
_UNINITIALISED_ABOVE = 64 << 10
#: Bytes the loop sends to one connection per wake-up before it serves the others.
_WRITE_BUDGET = 4 << 20
#: How long a handler thread keeps sending a reply that its socket did not take at once. A
#: client that reads drains a scan's 4 MB page in a few milliseconds, and handing the rest to
#: the loop cost scans 10-15% of their throughput; a client that does not read holds a
#: handler this long, once (its connection is not read again until its reply is sent).
_SEND_PATIENCE_S = 0.05
#: How often the loop looks for idle and stalled connections when nothing happens.
_TICK_S = 0.5
#: Requests a handler thread answers in a row on one connection (the first and those already
#: waiting in its socket) before the loop takes the connection back, and the largest request it
#: reads itself (a scan's continue is a hundred bytes).
_INLINE_REQUESTS = 16
_INLINE_MAX_BYTES = 4096


class _Connection:
    """One client socket and where its current request or response stands."""

    __slots__ = ("sock", "fd", "ip", "head", "buf", "got", "length", "last_active", "opened",
                 "request_started", "busy", "principal", "trusted", "out", "out_bytes",
                 "write_started", "keep", "handshaking")

    def __init__(self, sock: socket.socket, ip: str, now: float):
        self.sock, self.fd, self.ip = sock, sock.fileno(), ip
        self.head = bytearray(framing.HEADER.size)
        self.buf: _Buffer = bytearray()  # the payload received so far (``got`` bytes of it)
        self.got = 0                    # bytes of the header, then of the payload, received
        self.length: int | None = None  # payload length once the header is in
        self.last_active = self.opened = now
        self.request_started: float | None = None   # the first byte of the current request
        self.busy = False               # a handler runs this connection's request
        self.principal: str | None = None  # who authenticated on this connection (SASL)
        #: Authenticated (SASL), or answered at least once (PLAINTEXT); until then the
        #: connection is the first to be evicted when a cap is reached.
        self.trusted = False
        self.out: list[memoryview] = []  # the unsent rest of the reply
        self.out_bytes = 0
        self.write_started = 0.0
        self.keep = True                # read on once the reply is out (else close)
        self.handshaking = False        # a TLS handshake is under way


class RpcServer:
    """Serves handlers registered per api key on a loopback or public address (and, for
    clients on its host, on a local socket beside it: ``transport.local_socket``).

    A peer that sends garbage gets an error response (when a correlation id can be read) and is
    disconnected; the server keeps serving everyone else.
    """

    def __init__(self, host: str, port: int, *, role: str, server_id: int,
                 disabled: frozenset[int] = frozenset(), limits: RpcLimits | None = None,
                 security: Authenticator | None = None, tls: ssl.SSLContext | None = None,
                 local_socket: bool = True):
        """``tls``: the listener speaks TLS with this context (None: plaintext).
        ``local_socket``: a plaintext server also listens for clients on this host there."""
        self.role = role
        self.security: Authenticator = security or NoAuthentication()
        self._sasl = bool(self.security.sasl)
        self._tls = tls
        self.server_id = server_id
        self.limits = limits or RpcLimits()
        self.dispatcher = Dispatcher(role, server_id, self.security, disabled)
        self._listener = socket.create_server((host, port), backlog=self.limits.backlog)
        self._listener.setblocking(False)
        self.host, self.port = self._listener.getsockname()[:2]
        self._local = (_local.listen(self.host, self.port, self.limits.backlog)
                       if local_socket and tls is None else None)
        self._local_peer = _local.peer_address(self.host)
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._done: queue.SimpleQueue[tuple[_Connection, bool, list[memoryview]]] = \
            queue.SimpleQueue()
        self._conns: dict[int, _Connection] = {}
        #: Connections with an unsent reply, oldest reply first, and their unsent bytes.
        self._writers: collections.OrderedDict[int, _Connection] = collections.OrderedDict()
        self._unsent = 0
        self._pool: ThreadPoolExecutor | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._warn = LogLimiter()
        #: Counters for tests and operators: connections refused, evicted, closed as idle,
        #: stalled, unread or unauthenticated; replies the loop finished sending (deferred);
        #: requests a handler thread read itself after its reply (inline).
        self.stats: collections.Counter[str] = collections.Counter()
        # Connections must pass a gate (TLS handshake, SASL login) before they are trusted.
        self._admission = Admission(self.limits, self._sasl or tls is not None, self._warn,
                                    self.stats, self._close)

    def register(self, request_type: type[Q], handler: Callable[[Q], Message]) -> None:
        """Serve ``request_type``: its requests are decoded (and checked) into that type."""
        self.dispatcher.register(request_type, handler)

    def start(self) -> None:
        self._pool = ThreadPoolExecutor(self.limits.handler_threads,
                                        thread_name_prefix=f"{self.role}-handler")
        self._selector.register(self._listener, selectors.EVENT_READ, self._listener)
        if self._local is not None:
            self._selector.register(self._local, selectors.EVENT_READ, self._local)
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
        for s in filter(None, (self._listener, self._local, self._wake_r, self._wake_w)):
            try:
                s.close()
            except OSError:
                pass
        self._selector.close()

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
                    if isinstance(key.data, socket.socket):
                        self._accept(key.data)
                    elif key.data == "wake":
                        self._drain_wake()
                    elif key.data.handshaking:
                        self._handshake(key.data)
                    elif key.data.out:
                        self._write(key.data)
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

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                sock, addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:     # e.g. out of file descriptors: keep serving the others
                log.warning("accepting a connection failed: %s", e)
                return
            ip = addr[0] if listener is self._listener else self._local_peer
            refused = self._admission.refusal(ip)
            if refused is not None:
                self.stats["refused"] += 1
                self._warn.warning(ip, "refused a connection from %s: %s; %d refused so far",
                                   ip, refused, self.stats["refused"])
                sock.close()
                continue
            sock.setblocking(False)
            _local.accepted(sock)
            conn = _Connection(sock, ip, time.monotonic())
            conn.handshaking = self._tls is not None
            self._conns[conn.fd] = conn
            self._admission.admitted(conn)
            self._selector.register(sock, selectors.EVENT_READ, conn)

    def _handshake(self, conn: _Connection) -> None:
        """Advance a TLS connection's handshake without blocking; a plaintext client is told to
        use TLS, a failed handshake closes the connection."""
        assert self._tls is not None
        if not isinstance(conn.sock, ssl.SSLSocket):
            head = _tls.first_bytes(conn.sock)
            if head is None:
                return
            if not _tls.is_client_hello(head):      # EOF, or a plaintext request
                if head:
                    self.stats["plaintext"] += 1
                    self._warn.warning(conn.ip, "closing the connection from %s: it does not "
                                       "speak TLS (security.ssl.enabled)", conn.ip)
                    _tls.refuse_plaintext(conn.sock, self.role)
                self._close(conn)
                return
            self._selector.unregister(conn.sock)
            conn.sock = self._tls.wrap_socket(conn.sock, server_side=True,
                                              do_handshake_on_connect=False)
            self._selector.register(conn.sock, selectors.EVENT_READ, conn)
        try:
            wait = _tls.handshake_step(conn.sock)
        except OSError as e:            # ssl.SSLError: e.g. the client does not trust us
            self.stats["handshake"] += 1
            self._warn.warning(conn.ip, "closing the connection from %s: TLS handshake failed: "
                               "%s", conn.ip, e)
            self._close(conn)
            return
        self._selector.modify(conn.sock, wait or selectors.EVENT_READ, conn)
        if not wait:
            conn.handshaking = False
            conn.last_active = time.monotonic()
            self._read(conn)            # a request may have come with the handshake's end

    def _read(self, conn: _Connection) -> None:
        # Read until the socket is drained or a request is complete: one wake-up of the loop
        # takes in what has arrived, not one buffer's worth.
        while self._read_once(conn):
            pass

    def _read_once(self, conn: _Connection) -> bool:
        """One read; True when more may be waiting for this connection."""
        header = framing.HEADER.size
        buf = conn.head if conn.length is None else cast(bytearray, conn.buf)
        try:
            n = conn.sock.recv_into(memoryview(buf)[conn.got:])
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
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
            authenticated = conn.principal is not None or not self._sasl
            limit = (self.limits.max_request_bytes if authenticated
                     else min(self.limits.unauth_max_request_bytes, self.limits.max_request_bytes))
            try:
                conn.length = framing.decode_length(bytes(conn.head), limit)
            except CorruptMessage as e:
                self.stats["oversized"] += 1
                if self._tls is None and _tls.is_client_hello(conn.head):
                    # A TLS client: an alert makes it fail at once, not wait for a reply.
                    self._warn.warning(conn.ip, "closing the connection from %s: it speaks "
                                       "TLS, this listener does not (security.ssl.enabled)",
                                       conn.ip)
                    _tls.send_alert(conn.sock)
                elif authenticated:
                    self._warn.warning(conn.ip, "closing the connection from %s: %s", conn.ip, e)
                else:
                    self._warn.warning(conn.ip, "closing the connection from %s: it announced "
                                       "a frame of %d bytes before authenticating (at most %d: "
                                       "rpc.unauthenticated.max-request-size)", conn.ip,
                                       framing.HEADER.unpack(conn.head)[0], limit)
                self._close(conn)
                return False
            conn.buf, conn.got = _buffer(conn.length), 0
        if conn.got < conn.length:
            return True
        payload = conn.buf                  # exactly the frame: a buffer never passes its length
        conn.buf, conn.got, conn.length, conn.request_started = bytearray(), 0, None, None
        conn.busy = True
        self._selector.unregister(conn.sock)   # nothing more is read until the reply is out
        assert self._pool is not None       # started before the loop runs
        self._pool.submit(self._run, conn, payload)
        return False

    def _run(self, conn: _Connection, payload: _Buffer | bytes | None) -> None:
        """In a handler thread: answer one request, send what the socket takes at once, and
        hand the connection (with the rest of the reply, if any) back to the loop. A request
        the client sent before the reply went out is answered here too (``_waiting_request``)."""
        served = 0
        while payload is not None:
            try:
                reply, keep = self.dispatcher.handle(payload, conn)
            except Exception:  # noqa: BLE001 - the dispatcher answers every error; belt and braces
                log.exception("request handling failed")
                reply = [codec.encode_response(-1, error=UnknownServerError("internal error"))]
                keep = False
            del payload
            try:
                # Never blocks for long (the socket is non-blocking): a client that reads gets
                # its reply straight away from this thread; what its socket does not take within
                # _SEND_PATIENCE_S the loop sends when it can.
                rest = send_within(conn.sock, as_views(framing.frame_parts(reply)),
                                   _SEND_PATIENCE_S)
            except OSError:
                rest, keep = [], False
            served += 1
            payload = (self._waiting_request(conn) if keep and not rest and served <
                       _INLINE_REQUESTS and not self._stopping.is_set() else None)
        self._done.put((conn, keep, rest))
        self._wake()

    def _waiting_request(self, conn: _Connection) -> bytes | None:
        """The payload of a small request already whole in the socket (a pipelining client's
        next one), read in this thread: handing the connection back to the loop to read it
        costs a reader of 4 MB scan pages a tenth of its time. None: the loop reads on."""
        if isinstance(conn.sock, ssl.SSLSocket) or (self._sasl and conn.principal is None):
            return None                 # TLS records cannot be peeked; logins go through the loop
        payload = _whole_request(conn.sock, min(_INLINE_MAX_BYTES, self.limits.max_request_bytes))
        if payload is not None:
            self.stats["inline"] += 1   # requests answered without the loop
        return payload

    def _resume(self) -> None:
        """Take back connections whose request was handled: read on, send the rest of the
        reply, or close them."""
        while True:
            try:
                conn, keep, rest = self._done.get_nowait()
            except queue.Empty:
                return
            if not self._open(conn):
                continue            # closed while its handler ran (server stopping)
            conn.busy = False
            now = time.monotonic()
            conn.last_active = now
            if conn.principal is not None or (keep and not self._sasl):
                self._admission.trust(conn)
            if rest:
                self.stats["deferred"] += 1     # replies the loop finishes sending
                conn.out, conn.keep, conn.write_started = rest, keep, now
                conn.out_bytes = sum(v.nbytes for v in rest)
                self._unsent += conn.out_bytes
                self._writers[conn.fd] = conn
                self._selector.register(conn.sock, selectors.EVENT_WRITE, conn)
                self._limit_unsent()
            elif keep:
                self._selector.register(conn.sock, selectors.EVENT_READ, conn)
                if _tls.pending(conn.sock):   # already decrypted: the selector cannot see it
                    self._read(conn)
            else:
                self._close(conn)

    def _write(self, conn: _Connection) -> None:
        """Send more of a connection's reply (its socket became writable)."""
        try:
            # A fast reader of a large reply must not keep the loop from everyone else.
            rest = send_some(conn.sock, conn.out, _WRITE_BUDGET)
        except OSError:
            self._close(conn)
            return
        left = sum(v.nbytes for v in rest)
        self._unsent -= conn.out_bytes - left
        conn.out, conn.out_bytes = rest, left
        if rest:
            return
        del self._writers[conn.fd]
        conn.last_active = time.monotonic()
        if conn.keep:
            self._selector.modify(conn.sock, selectors.EVENT_READ, conn)
        else:
            self._close(conn)

    def _limit_unsent(self) -> None:
        """Past rpc.response.max-unsent-bytes, close the connections whose replies have waited
        longest (never the newest: one reply alone may be larger)."""
        while self._unsent > self.limits.max_unsent_bytes and len(self._writers) > 1:
            conn = next(iter(self._writers.values()))
            self.stats["unread"] += 1
            self._warn.warning(conn.ip, "closing the connection from %s: %d bytes of its reply "
                               "unread after %.1fs while replies waiting for their clients "
                               "passed rpc.response.max-unsent-bytes=%d", conn.ip,
                               conn.out_bytes, time.monotonic() - conn.write_started,
                               self.limits.max_unsent_bytes)
            self._close(conn)

    def _sweep(self, now: float) -> None:
        """Close connections past a deadline: idle, a request not read in time, a reply not
        read in time, not authenticated in time."""
        limits = self.limits
        for conn in list(self._conns.values()):
            if conn.busy:
                continue
            if ((conn.handshaking or (self._sasl and not conn.trusted))
                    and now - conn.opened > limits.auth_timeout_s):
                self.stats["unauthenticated"] += 1
                self._warn.warning(conn.ip, "closing the connection from %s: %s %.0fs after it "
                                   "opened (rpc.authentication.timeout)", conn.ip,
                                   "TLS handshake not finished" if conn.handshaking
                                   else "not authenticated", now - conn.opened)
                self._close(conn)
            elif conn.out:
                if now - conn.write_started > limits.write_timeout_s:
                    self.stats["unread"] += 1
                    self._warn.warning(conn.ip, "closing the connection from %s: it left %d "
                                       "bytes of a reply unread for %.0fs "
                                       "(rpc.response.write-timeout)", conn.ip, conn.out_bytes,
                                       now - conn.write_started)
                    self._close(conn)
            elif conn.request_started is not None:
                if now - conn.request_started > limits.read_timeout_s:
                    self.stats["stalled"] += 1
                    self._warn.warning(conn.ip, "closing the connection from %s: a request "
                                       "was not read in full %.0fs after its first byte "
                                       "(rpc.request.read-timeout)", conn.ip,
                                       now - conn.request_started)
                    self._close(conn)
            elif now - conn.last_active > limits.idle_timeout_s:
                self.stats["idle"] += 1
                self._close(conn)
        self._warn.prune()

    def _open(self, conn: _Connection) -> bool:
        return self._conns.get(conn.fd) is conn

    def _close(self, conn: _Connection) -> None:
        if not self._open(conn):
            return
        del self._conns[conn.fd]
        self._admission.closed(conn)
        if self._writers.pop(conn.fd, None) is not None:
            self._unsent -= conn.out_bytes
        conn.out, conn.out_bytes, conn.buf = [], 0, bytearray()
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


def _whole_request(sock: socket.socket, max_bytes: int) -> bytes | None:
    """The payload of a request of at most ``max_bytes`` that is whole in the non-blocking
    ``sock``, read from it; None (and nothing read) when there is none."""
    header = framing.HEADER.size
    try:
        head = sock.recv(header + max_bytes, socket.MSG_PEEK)
        if len(head) < header:
            return None
        (length,) = framing.HEADER.unpack_from(head)
        if length > max_bytes or len(head) < header + length:
            return None
        return sock.recv(header + length)[header:]     # exactly what was peeked
    except OSError:                 # nothing waiting (BlockingIOError), or a failure the loop's
        return None                 # next read reports


#: What a request's payload is read into.
_Buffer = Union[bytearray, "np.ndarray"]


def _buffer(length: int) -> _Buffer:
    """The buffer a payload of ``length`` bytes is read into (see _UNINITIALISED_ABOVE)."""
    if length > _UNINITIALISED_ABOVE:
        return np.empty(length, np.uint8)
    return bytearray(length)
