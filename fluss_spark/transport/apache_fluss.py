"""One TCP connection to one Apache Fluss server, speaking Fluss's own protobuf protocol."""

from __future__ import annotations

import itertools
import socket
from typing import Sequence, TypeVar, cast

from fluss_spark import __version__
from fluss_spark.errors import ApiError, AuthenticationFailed, CorruptMessage, NetworkError
from fluss_spark.protocol.apache_fluss import framing
from fluss_spark.protocol.apache_fluss.api import API_VERSION, api_name
from fluss_spark.protocol.apache_fluss.errors import to_exception
from fluss_spark.protocol.apache_fluss.messages import (ApiVersionsRequest, ApiVersionsResponse,
                                                 AuthenticateRequest, ErrorResponse,
                                                 FlussRequest)
from fluss_spark.protocol.apache_fluss.proto import ProtoMessage
from fluss_spark.transport.channel import SocketChannel, recv_or_eof
from fluss_spark.transport.frames import recv_exact

R = TypeVar("R", bound=ProtoMessage)

#: The most requests ``call_many`` has in flight on one connection: small enough that their
#: frames and answers fit the sockets' buffers (neither side blocks writing while the other
#: writes too), large enough for a table's buckets to take a few round trips.
PIPELINE_WINDOW = 32

#: What this client calls itself in API_VERSIONS.
CLIENT_SOFTWARE_NAME = "fluss-spark-python"

#: The SASL mechanism this client logs in with (Fluss 0.9.1 has no other).
SASL_PLAIN = "PLAIN"

#: What a user sets to log in, named in the refusals of a SASL listener.
_LOGIN_SETTINGS = ("client.security.sasl.username and client.security.sasl.password (command "
                   "line: --username or FLUSS_USERNAME, and FLUSS_PASSWORD)")


def api_versions_request() -> ApiVersionsRequest:
    return ApiVersionsRequest(client_software_name=CLIENT_SOFTWARE_NAME,
                              client_software_version=__version__)


class FlussRpcConnection(SocketChannel):
    """A lazily (re)connected, thread-safe request/response channel to one Fluss server.

    One request is in flight at a time (``call_many``: a window of them); request ids count up
    per connection object. Error responses raise the ``fluss_spark.errors`` class of their
    Fluss code; any socket failure closes the socket and raises ``NetworkError`` (retriable),
    and the next call reconnects.
    With ``credentials`` (username, password) every new socket logs in with SASL PLAIN before
    its first request; a refused login raises ``AuthenticationFailed`` (not retriable).
    """

    def __init__(self, host: str, port: int, *, timeout_s: float = 60.0,
                 connect_timeout_s: float = 5.0,
                 max_response_bytes: int = framing.MAX_RESPONSE_BYTES,
                 credentials: tuple[str, str] | None = None):
        """``max_response_bytes``: a response frame announcing more is refused (CorruptMessage)
        and the socket closed; a smaller one is read as its bytes arrive."""
        super().__init__(host, port, timeout_s=timeout_s, connect_timeout_s=connect_timeout_s)
        self.max_response_bytes = max_response_bytes
        self._credentials = credentials
        self._ids = itertools.count(1)
        self._api_versions: dict[int, tuple[int, int]] | None = None
        self.server_type: int | None = None

    def call(self, request: FlussRequest[R], *, timeout_s: float | None = None) -> R:
        """Send ``request`` and return its decoded response (or raise its error)."""
        body = self.call_raw(int(request.API_KEY), API_VERSION[request.API_KEY],
                             request.encode(), timeout_s=timeout_s)
        return self._decoded(request, body)

    def call_many(self, requests: Sequence[FlussRequest[R]], *,
                  timeout_s: float | None = None) -> list[R | ApiError]:
        """Each request's decoded response, or the error it was answered with (returned, not
        raised), in the order of ``requests``.

        Up to ``PIPELINE_WINDOW`` of them are in flight at once: one round trip per window
        instead of one per request. Fluss answers a connection's requests as each completes,
        so the answers are matched to the requests by id. A socket failure, or an answer to
        no request of the window, closes the socket and raises as ``call`` does."""
        out: list[R | ApiError] = []
        for at in range(0, len(requests), PIPELINE_WINDOW):
            window = requests[at:at + PIPELINE_WINDOW]
            ids = [next(self._ids) & 0x7FFFFFFF for _ in window]
            frames = b"".join(framing.encode_request(int(r.API_KEY), API_VERSION[r.API_KEY], i,
                                                     r.encode()) for r, i in zip(window, ids))
            what = f"{len(window)} {api_name(window[0].API_KEY)} requests"
            with self._lock:
                payloads = self._pipelined(frames, ids, window[0].API_KEY, what, timeout_s)
            for request, i in zip(window, ids):
                header, payload = payloads[i]
                try:
                    out.append(self._decoded(request, self._body(payload, request.API_KEY,
                                                                 header)))
                except ApiError as e:
                    out.append(e)
        return out

    def call_raw(self, api_key: int, api_version: int, body: bytes, *,
                 timeout_s: float | None = None) -> memoryview:
        """Send an encoded request body and return the response body (tools and tests)."""
        request_id = next(self._ids) & 0x7FFFFFFF
        frame = framing.encode_request(api_key, api_version, request_id, body)
        with self._lock:
            payload = self._round_trip(frame, self._decode_length, api_name(api_key),
                                       timeout_s)
            header = self._checked_header(payload, {request_id})
        return self._body(payload, api_key, header)

    def _pipelined(self, frames: bytes, ids: list[int], api_key: int, what: str,
                   timeout_s: float | None
                   ) -> dict[int, tuple[framing.ResponseHeader, bytearray]]:
        """Send the requests ``frames`` (of ``ids``) at once and read one answer to each, by
        request id (the caller holds ``_lock``). Their answers together are bounded by
        ``max_response_bytes``, as one answer is. A failure of the connection itself fails
        them all: its answer names no request, and none comes after it."""
        left = [self.max_response_bytes]

        def decode_length(prefix: bytearray) -> int:
            try:
                length = framing.decode_length(prefix, left[0])
            except CorruptMessage as e:
                raise CorruptMessage(f"{self.address}: {e} (this client's max_response_bytes "
                                     f"bounds the answers to {what} together)") from None
            left[0] -= length
            return length

        def exchange() -> dict[int, tuple[framing.ResponseHeader, bytearray]]:
            self._send(self._connect(), frames, timeout_s)
            answers: dict[int, tuple[framing.ResponseHeader, bytearray]] = {}
            while len(answers) < len(ids):
                payload = cast(bytearray, self._receive(decode_length))
                header = self._checked_header(payload, set(ids) - set(answers))
                if header.request_id is None:
                    raise self._failure(payload, api_key, header)
                answers[header.request_id] = header, payload
            return answers
        return self._guarded(what, exchange)

    def _checked_header(self, payload: bytearray, expected: set[int]) -> framing.ResponseHeader:
        """An answer's header, the socket closed when the stream cannot go on: a header that
        does not decode, an answer to no request in flight, or a failure of the connection
        itself (the caller holds ``_lock``)."""
        try:
            header = framing.decode_response_header(payload)
        except CorruptMessage:
            self._close_locked()
            raise
        if header.response_type == framing.SERVER_FAILURE:
            # Fluss sends this when the connection itself failed; it is not reused.
            self._close_locked()
        elif header.request_id not in expected:
            self._close_locked()
            wanted = (f"expected {next(iter(expected))}" if len(expected) == 1 else
                      f"not one of the {len(expected)} requests in flight")
            raise NetworkError(f"{self.address} answered request id {header.request_id}, "
                               f"{wanted}")
        return header

    def _body(self, payload: bytearray, api_key: int,
              header: framing.ResponseHeader) -> memoryview:
        """A successful answer's body; an error answer raises its error."""
        if header.response_type == framing.SUCCESS_RESPONSE:
            return memoryview(payload)[header.body_offset:]
        raise self._failure(payload, api_key, header)

    def _failure(self, payload: bytearray, api_key: int,
                 header: framing.ResponseHeader) -> ApiError:
        """The error an error answer (or a failure of the connection) carries."""
        error = _error(memoryview(payload)[header.body_offset:], api_key, self.address)
        if isinstance(error, AuthenticationFailed) and self._credentials is None:
            # A SASL listener answers every request but API_VERSIONS so until a login.
            return AuthenticationFailed(f"{self.address} requires a SASL login: set "
                                        f"{_LOGIN_SETTINGS}")
        return error

    def _decoded(self, request: FlussRequest[R], body: memoryview) -> R:
        try:
            return request.decode_response(body)
        except CorruptMessage as e:
            raise CorruptMessage(f"{api_name(request.API_KEY)} response from {self.address} "
                                 f"does not decode: {e}") from None

    def _on_connect(self, sock: socket.socket) -> None:
        if self._credentials is not None:
            self._authenticate(sock)

    def _authenticate(self, sock: socket.socket) -> None:
        """Log in on a new socket: one AUTHENTICATE with the PLAIN token. The server answers
        it with an empty challenge once the login succeeded; PLAIN has no second step."""
        assert self._credentials is not None
        user, password = self._credentials
        token = b"\0" + user.encode() + b"\0" + password.encode()
        request = AuthenticateRequest(protocol=SASL_PLAIN, token=token)
        request_id = next(self._ids) & 0x7FFFFFFF
        sock.settimeout(self.timeout_s)
        sock.sendall(framing.encode_request(int(request.API_KEY),
                                            API_VERSION[request.API_KEY], request_id,
                                            request.encode()))
        payload = recv_or_eof(sock, self._decode_length(recv_or_eof(sock, framing.LENGTH.size)))
        header = framing.decode_response_header(payload)
        if header.response_type == framing.SUCCESS_RESPONSE and header.request_id == request_id:
            return
        body = memoryview(payload)[header.body_offset:]
        error = _error(body, request.API_KEY, self.address)
        # Fluss's refusals never quote the password; this line must not either.
        reason = str(error).replace(password, "***") if password else str(error)
        raise AuthenticationFailed(f"{self.address} refused the SASL PLAIN login of user "
                                   f"{user!r} ({reason}); check {_LOGIN_SETTINGS}")

    def _decode_length(self, prefix: bytes | bytearray) -> int:
        try:
            return framing.decode_length(prefix, self.max_response_bytes)
        except CorruptMessage as e:
            raise CorruptMessage(f"{self.address}: {e} (this client's max_response_bytes "
                                 "bounds it)") from None

    def api_versions(self) -> dict[int, tuple[int, int]]:
        """API key -> (min, max) version this server offers (asked once per object)."""
        if self._api_versions is None:
            resp = self.call(api_versions_request())
            self.server_type = resp.server_type
            self._api_versions = {v.api_key: (v.min_version, v.max_version)
                                  for v in resp.api_versions}
        return self._api_versions

    def supports(self, api_key: int, version: int = 0) -> bool:
        versions = self.api_versions().get(int(api_key))
        return versions is not None and versions[0] <= version <= versions[1]


def _error(body: memoryview, api_key: int, address: str) -> ApiError:
    try:
        err = ErrorResponse.decode(body)
    except CorruptMessage as e:
        return CorruptMessage(f"error response to {api_name(api_key)} from {address} does not "
                              f"decode: {e}")
    return to_exception(err.error_code, err.error_message)


def speaks_fluss(host: str, port: int, timeout: float = 5.0) -> bool:
    """Whether ``host:port`` is an Apache Fluss server: it answers an API_VERSIONS request
    with a well-formed Fluss response (this project's servers answer in msgpack instead)."""
    request_id = 1
    frame = framing.encode_request(int(api_versions_request().API_KEY), 0, request_id,
                                   api_versions_request().encode())
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(frame)
            prefix = recv_exact(sock, framing.LENGTH.size)
            if prefix is None:
                return False
            # A Fluss API_VERSIONS answer is small; anything long is not one.
            length = framing.decode_length(bytes(prefix), limit=1 << 20)
            payload = recv_exact(sock, length)
    except (OSError, CorruptMessage):
        return False
    if payload is None:
        return False
    try:
        header = framing.decode_response_header(payload)
        body = memoryview(payload)[header.body_offset:]
        if header.response_type == framing.SUCCESS_RESPONSE:
            return header.request_id == request_id and bool(
                ApiVersionsResponse.decode(body).api_versions)
        ErrorResponse.decode(body)
        return header.request_id in (request_id, None)
    except CorruptMessage:
        return False


__all__ = ["CLIENT_SOFTWARE_NAME", "FlussRpcConnection", "SASL_PLAIN", "api_versions_request",
           "speaks_fluss"]
