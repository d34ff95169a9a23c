"""One TCP connection to one server: send a typed request, wait for its typed response."""

from __future__ import annotations

import itertools
import socket
from typing import TYPE_CHECKING, Any, TypeVar

from fluss_spark.errors import CorruptMessage, NetworkError, TlsHandshakeFailed, UnsupportedVersion
from fluss_spark.protocol import codec, framing
from fluss_spark.protocol.api import CURRENT_VERSION, ApiKey, api_name
from fluss_spark.protocol.messages import (ApiVersionsRequest, AuthenticateRequest, Message,
                                           Request)
from fluss_spark.transport.channel import SocketChannel, recv_or_eof

if TYPE_CHECKING:
    from fluss_spark.transport.pipeline import PipelinedConnection
    from fluss_spark.transport.tls import TlsClientConfig

R = TypeVar("R", bound=Message)


class RpcConnection(SocketChannel):
    """A lazily (re)connected, thread-safe request/response channel to ``host:port``.

    Requests are serialised on the connection; any socket failure closes it and raises
    ``NetworkError`` (retriable), and the next call reconnects.
    """

    def __init__(self, host: str, port: int, *, timeout_s: float = 60.0,
                 connect_timeout_s: float = 5.0, credentials: tuple[str, str] | None = None,
                 max_response_bytes: int = framing.MAX_FRAME_BYTES,
                 tls: TlsClientConfig | None = None, local_socket: bool = True):
        """``credentials``: (username, password) for a server with SASL (PLAIN) authentication;
        every new socket authenticates before its first request. ``max_response_bytes``: a
        response frame announcing more is refused (CorruptMessage) and the socket closed; a
        smaller one is read as its bytes arrive (``transport.frames``). ``tls``: connect with
        TLS (SASL then runs inside it). ``local_socket``: a plaintext connection to a server on this
        host goes through its local socket (``transport.local_socket``) when it has one."""
        super().__init__(host, port, timeout_s=timeout_s, connect_timeout_s=connect_timeout_s,
                         tls=tls, local_socket=local_socket)
        self.max_response_bytes = max_response_bytes
        self._credentials = credentials
        self._ids = itertools.count(1)
        self._api_keys: frozenset[int] | None = None

    def call(self, request: Request[R], *, timeout_s: float | None = None) -> R:
        """Send one request and return its typed response, raising the typed error on failure."""
        body = self._exchange(request.API_KEY, request.to_wire(), timeout_s)
        return request.decode_response(body)

    def call_raw(self, api_key: ApiKey | int, body: Any = None, *,
                 timeout_s: float | None = None) -> dict[str, Any]:
        """Send any body under ``api_key`` and return the response body as decoded msgpack
        (tools and tests that speak the wire directly, malformed requests included)."""
        return self._exchange(api_key, {} if body is None else body, timeout_s)

    def _exchange(self, api_key: ApiKey | int, body: Any,
                  timeout_s: float | None) -> dict[str, Any]:
        cid, frame = self._request_frame(api_key, body)
        with self._lock:
            payload = self._round_trip(frame, self._decode_length,
                                       f"request {api_name(api_key)}", timeout_s)
        return self._answer(payload, cid)

    def _request_frame(self, api_key: ApiKey | int, body: Any) -> tuple[int, bytes]:
        """A new correlation id and the request frame carrying it."""
        cid = next(self._ids)
        return cid, framing.encode_frame(codec.encode_request(api_key, CURRENT_VERSION, cid, body,
                                                              segments=True))

    def _answer(self, payload: Any, cid: int) -> dict[str, Any]:
        """The body of the response to request ``cid``, or its typed error."""
        resp = codec.decode_response(payload)
        if resp.correlation_id != cid:
            self.close()
            self._raise_refusal(resp)
            raise NetworkError(f"{self.address} answered correlation id {resp.correlation_id}, "
                               f"expected {cid}")
        return resp.raise_for_error()

    def pipeline(self, window_bytes: int | None = None) -> "PipelinedConnection":
        """A new connection of its own to the same server, with the same settings, that sends
        requests before the responses to earlier ones are read (``transport.pipeline``);
        ``window_bytes``: what the responses in flight may add up to."""
        from fluss_spark.transport.pipeline import PipelinedConnection
        return PipelinedConnection(self.host, self.port, timeout_s=self.timeout_s,
                                   connect_timeout_s=self.connect_timeout_s,
                                   credentials=self._credentials,
                                   max_response_bytes=self.max_response_bytes, tls=self.tls,
                                   local_socket=self.local_socket, window_bytes=window_bytes)

    def supports(self, api_key: ApiKey) -> bool:
        """Whether the server offers ``api_key`` (asked once per connection object)."""
        if self._api_keys is None:
            self._api_keys = frozenset(self.call(ApiVersionsRequest()).api_keys)
        return int(api_key) in self._api_keys

    def require(self, api_key: ApiKey, what: str) -> None:
        if not self.supports(api_key):
            raise UnsupportedVersion(f"the server at {self.address} does not support {what} "
                                     f"(API {api_key.name}); upgrade the server")

    def _on_connect(self, sock: socket.socket) -> None:
        if self._credentials is not None:
            self._authenticate(sock)

    def _authenticate(self, sock: socket.socket) -> None:
        assert self._credentials is not None
        user, password = self._credentials
        token = b"\0" + user.encode() + b"\0" + password.encode()     # SASL PLAIN (RFC 4616)
        request = AuthenticateRequest(mechanism="PLAIN", token=token)
        sock.settimeout(self.timeout_s)
        sock.sendall(framing.encode_frame(codec.encode_request(
            request.API_KEY, CURRENT_VERSION, next(self._ids), request.to_wire())))
        header = recv_or_eof(sock, framing.HEADER.size)
        resp = codec.decode_response(recv_or_eof(sock, self._decode_length(header)))
        self._raise_refusal(resp)
        resp.raise_for_error()

    def _raise_refusal(self, resp: codec.ResponseEnvelope) -> None:
        """A TLS listener answers a plaintext client this way (correlation id -1): say where."""
        if resp.error_code == TlsHandshakeFailed.code:
            raise TlsHandshakeFailed(f"{self.address}: {resp.error_message}")

    def _decode_length(self, header: bytes | bytearray) -> int:
        (length,) = framing.HEADER.unpack(header)
        if length > self.max_response_bytes:
            raise CorruptMessage(
                f"{self.address} announced a response frame of {length:,} bytes, over this "
                f"client's limit of {self.max_response_bytes:,} (max_response_bytes): not a "
                "fluss_spark server, or a corrupt stream")
        return length
