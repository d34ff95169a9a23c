"""A connection of one reader's own that sends requests before the earlier responses are read.

A server reads a connection's next request only after its reply to the previous one is out, and
answers in request order; a request already waiting in the socket is read the moment that reply
is sent. So a reader that keeps the next request on the wire while it reads and decodes a
response never leaves the server waiting for it (the request/response turn that costs a 4 MB
page of a scan session about a third of its time). The kernel's socket buffers hold what the
server sends ahead; this process holds only the responses it has read.
"""

from __future__ import annotations

import collections
import socket
from typing import Any, TypeVar

from fluss_spark.protocol.api import api_name
from fluss_spark.protocol.messages import Message, Request
from fluss_spark.transport.client import RpcConnection
from fluss_spark.transport.frames import ReceivePool

R = TypeVar("R", bound=Message)


class PipelinedConnection(RpcConnection):
    """``send`` requests ahead, ``receive`` their responses in order (one reader at a time).

    Any socket failure closes the connection and loses every request in flight: ``receive``
    raises NetworkError, and the caller sends again what it still needs. Large responses are
    read into reusable buffers (``frames.ReceivePool``) that a caller's decoded pages may keep
    in use as long as it wants. ``call`` works as on any connection when nothing is in flight.
    """

    def __init__(self, *args: Any, pool_size: int = 4, window_bytes: int | None = None,
                 **kwargs: Any):
        """``window_bytes``: the responses in flight at most (requests ahead times their size);
        the socket's receive buffer is set to hold them from the start (``receive_buffer``)."""
        super().__init__(*args, **kwargs)
        self.window_bytes = window_bytes
        #: Requests sent whose responses are not read yet, oldest first: (correlation id, request).
        self._in_flight: collections.deque[tuple[int, Request[Any]]] = collections.deque()
        self._pool = ReceivePool(pool_size)

    @property
    def in_flight(self) -> int:
        """Requests sent whose responses are not read yet."""
        return len(self._in_flight)

    def send(self, request: Request[Any], *, timeout_s: float | None = None) -> None:
        """Send ``request`` without waiting for its response (NetworkError when the socket fails:
        every request in flight is lost with it)."""
        cid, frame = self._request_frame(request.API_KEY, request.to_wire())
        with self._lock:
            # With responses in flight the socket is readable: only an idle one is checked.
            self._guarded(f"request {api_name(request.API_KEY)}",
                          lambda: self._send(self._sock if self._in_flight and self._sock
                                             else self._connect(), frame, timeout_s))
            self._in_flight.append((cid, request))

    def receive(self, *, timeout_s: float | None = None) -> Message:
        """The response to the oldest request in flight, or its typed error."""
        with self._lock:
            if not self._in_flight:
                raise RuntimeError("receive() without a request in flight")
            cid, request = self._in_flight.popleft()

            def read() -> Any:
                assert self._sock is not None      # open while requests are in flight
                self._sock.settimeout(timeout_s or self.timeout_s)
                return self._receive(self._decode_length, self._pool)
            payload = self._guarded(f"request {api_name(request.API_KEY)}", read)
        return request.decode_response(self._answer(payload, cid))

    def _on_connect(self, sock: socket.socket) -> None:
        # A local socket's sender holds what is in flight (``local_socket.SEND_BUFFER_BYTES``).
        size = (receive_buffer(self.window_bytes, _rmem_max())
                if sock.family != socket.AF_UNIX else None)
        if size is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
        super()._on_connect(sock)

    def _close_locked(self) -> None:
        self._in_flight.clear()              # their responses went with the socket
        super()._close_locked()


def receive_buffer(window_bytes: int | None, rmem_max: int | None) -> int | None:
    """The SO_RCVBUF to ask for so a new socket's window holds ``window_bytes`` at once (Linux
    doubles what is asked, up to twice ``rmem_max``), or None to leave the kernel's autotuning.

    Autotuning starts a connection at 128 KB and grows it only as the reader drains, which cost
    a fresh scan connection its first pages (a 4M-row scan over 4 MB pages ran 10-20% longer).
    A fixed buffer ends autotuning, so it is set only where it holds every response in flight
    (then nothing more could be gained: the reader never asks for more than that ahead).
    """
    if window_bytes is None or rmem_max is None or 2 * rmem_max < window_bytes:
        return None
    return (window_bytes + 1) // 2


def _rmem_max() -> int | None:
    """The largest receive buffer a process may ask for (Linux), None where unknown."""
    try:
        with open("/proc/sys/net/core/rmem_max") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None
