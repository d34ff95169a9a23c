"""One lazily (re)connected socket to one server, shared by both wire protocols' clients: TCP,
or the server's local socket where it has one on this host (``transport.local_socket``)."""

from __future__ import annotations

import select
import socket
import sys
import threading
from typing import TYPE_CHECKING, Callable, TypeVar, cast

from fluss_spark.errors import ConnectionRefused, CorruptMessage, NetworkError
from fluss_spark.transport import local_socket as _local
from fluss_spark.transport.frames import ReceivePool, recv_frame

if TYPE_CHECKING:
    # The TLS client (ssl, this project's framing: ~8 ms to import) is loaded by a TLS
    # connection only.
    from fluss_spark.transport.tls import TlsClientConfig

T = TypeVar("T")

#: Both protocols prefix a frame with its length in 4 bytes.
LENGTH_PREFIX = 4


class SocketChannel:
    """The socket of a request/response connection: opened on first use, replaced when the
    server closed it between requests, closed on any failure (the caller holds ``_lock``)."""

    def __init__(self, host: str, port: int, *, timeout_s: float = 60.0,
                 connect_timeout_s: float = 5.0, tls: TlsClientConfig | None = None,
                 local_socket: bool = False):
        """``tls``: connect with TLS, checking the server's certificate so (None: plaintext).
        ``local_socket``: a plaintext connection to a server on this host goes through the
        server's local socket when it has one."""
        self.host, self.port = host, int(port)
        self.tls = tls
        self.local_socket = local_socket and tls is None
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def _connect(self) -> socket.socket:
        if self._sock is not None and not still_open(self._sock):
            # The server closed it (idle timeout, restart): a request sent on it would be lost
            # on the way, so open a fresh connection instead of failing the call.
            self._close_locked()
        if self._sock is None:
            sock = self._open_socket()
            try:
                if self.tls is not None:
                    from fluss_spark.transport.tls import wrap_client
                    sock = wrap_client(sock, self.tls, self.host, self.address)
                self._on_connect(sock)
            except BaseException:
                sock.close()
                raise
            self._sock = sock
        return self._sock

    def _open_socket(self) -> socket.socket:
        if self.local_socket:
            sock = _local.connect(self.host, self.port, self.connect_timeout_s)
            if sock is not None:
                return sock
        sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _round_trip(self, frame: bytes, decode_length: Callable[[bytearray], int], what: str,
                    timeout_s: float | None) -> bytearray:
        """Send one request frame and read the one reply frame (the caller holds ``_lock``).

        A socket failure closes the socket and is a retriable NetworkError; a reply whose length
        is refused closes it too (the stream is out of step) and propagates."""
        def exchange() -> bytearray:
            self._send(self._connect(), frame, timeout_s)
            return cast(bytearray, self._receive(decode_length))
        return self._guarded(what, exchange)

    def _send(self, sock: socket.socket, frame: bytes, timeout_s: float | None) -> None:
        sock.settimeout(timeout_s or self.timeout_s)
        sock.sendall(frame)

    def _receive(self, decode_length: Callable[[bytearray], int],
                 pool: ReceivePool | None = None) -> bytearray | memoryview:
        """The next reply frame's payload (the caller holds ``_lock``, the socket is open)."""
        assert self._sock is not None
        prefix = recv_or_eof(self._sock, LENGTH_PREFIX)
        return recv_into_pool_or_eof(self._sock, decode_length(prefix), pool)

    def _guarded(self, what: str, io: Callable[[], T]) -> T:
        """``io()``, its socket failures turned into NetworkError (or ConnectionRefused) after
        closing the socket; a refused reply (CorruptMessage) closes it too."""
        try:
            return io()
        except ConnectionRefusedError:
            self._close_locked()
            raise ConnectionRefused(f"{what} to {self.address} failed: nothing listens there "
                                    f"(connection refused)") from None
        except (OSError, EOFError) as e:
            self._close_locked()
            raise NetworkError(f"{what} to {self.address} failed: {type(e).__name__}: {e}") \
                from None
        except CorruptMessage:
            self._close_locked()
            raise

    def _on_connect(self, sock: socket.socket) -> None:
        """What a new socket does before its first request (authentication)."""

    def _close_locked(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None


def still_open(sock: socket.socket) -> bool:
    """A connection between requests has nothing to read; readable means EOF (or junk)."""
    poller = select.poll()     # poll, not select: no limit on descriptor numbers
    try:
        poller.register(sock, select.POLLIN)
        readable = bool(poller.poll(0))
    except (OSError, ValueError):
        return False
    # ssl not loaded (or another thread still loading it): no socket here is a TLS one yet.
    tls_socket = getattr(sys.modules.get("ssl"), "SSLSocket", None)
    if tls_socket is not None and isinstance(sock, tls_socket) and (readable or sock.pending()):
        from fluss_spark.transport import tls
        return tls.still_open(sock)      # a TLS message without data leaves it open
    return not readable


def recv_or_eof(sock: socket.socket, n: int) -> bytearray:
    """Exactly ``n`` bytes, or EOFError when the server closed the connection first."""
    return cast(bytearray, recv_into_pool_or_eof(sock, n, None))


def recv_into_pool_or_eof(sock: socket.socket, n: int,
                          pool: ReceivePool | None) -> bytearray | memoryview:
    """``recv_or_eof``, reading a large frame into one of ``pool``'s buffers."""
    data = recv_frame(sock, n, pool)
    if data is None:
        raise EOFError("connection closed by the server")
    return data
