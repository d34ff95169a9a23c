"""Requests to handlers: decoding, the SASL gate, the principal a handler runs as, and errors.

The event loop (``transport.server``) hands each complete request frame here, in a handler
thread; what comes back is the reply's buffers and whether the connection stays open.
"""

from __future__ import annotations

import contextvars
import logging
from typing import Any, Callable, Protocol, TypeVar, cast

from fluss_spark.errors import (ApiError, AuthenticationFailed, CorruptMessage,
                                MetadataStoreUnavailable, UnknownServerError, UnsupportedVersion)
from fluss_spark.protocol import codec
from fluss_spark.protocol.api import CURRENT_VERSION, ApiKey, api_name
from fluss_spark.protocol.messages import (ApiVersionsRequest, ApiVersionsResponse,
                                           AuthenticateRequest, AuthenticateResponse, Message,
                                           Request)

log = logging.getLogger("fluss_spark.transport.server")

Q = TypeVar("Q", bound="Request[Any]")
#: A handler takes a decoded request and returns its response message.
Handler = Callable[[Any], Message]
#: A reply: the buffers to send in order, and whether to keep the connection.
Reply = tuple[list[Any], bool]

#: Entries one msgpack array or map of a request may have: a 1,000,000-bucket lease fits; a
#: frame of one huge container cannot make the decoder allocate far beyond the frame's size.
_MAX_CONTAINER = 1 << 21

#: Who sent the request a handler thread is running (None: not authenticated, PLAINTEXT), and
#: from which client address (None: not known, e.g. a request handed in directly).
_principal: contextvars.ContextVar[str | None] = contextvars.ContextVar("principal",
                                                                         default=None)
_peer_address: contextvars.ContextVar[str | None] = contextvars.ContextVar("peer_address",
                                                                            default=None)


def current_principal() -> str | None:
    """The principal of the request being handled in this thread."""
    return _principal.get()


def current_peer_address() -> str | None:
    """The client address of the request being handled in this thread (ACL host matching)."""
    return _peer_address.get()


def run_as(principal: str | None, fn: Callable[..., Any], *args: Any,
           address: str | None = None) -> Any:
    """Run ``fn(*args)`` with ``current_principal()`` answering ``principal`` and
    ``current_peer_address()`` answering ``address``."""
    token, address_token = _principal.set(principal), _peer_address.set(address)
    try:
        return fn(*args)
    finally:
        _principal.reset(token)
        _peer_address.reset(address_token)


class Authenticator(Protocol):
    """What the server needs of its security settings."""

    @property
    def sasl(self) -> bool: ...

    def authenticate(self, mechanism: Any, token: Any, peer: str | None = None) -> str: ...


class NoAuthentication:
    """PLAINTEXT: every connection is served unauthenticated."""

    sasl = False

    def authenticate(self, mechanism: Any, token: Any, peer: str | None = None) -> str:
        raise AuthenticationFailed("this server does not authenticate (PLAINTEXT)")


class Peer(Protocol):
    """The connection a request came on: its address and who logged in on it."""

    ip: str
    principal: str | None


class Dispatcher:
    """Serves the handlers registered per api key; answers API_VERSIONS and AUTHENTICATE."""

    def __init__(self, role: str, server_id: int, security: Authenticator,
                 disabled: frozenset[int] = frozenset()):
        self.role, self.server_id, self.security = role, server_id, security
        self._handlers: dict[int, tuple[type[Request[Any]], Handler]] = {}
        self._disabled = disabled
        self.register(ApiVersionsRequest, self._api_versions)

    def register(self, request_type: type[Q], handler: Callable[[Q], Message]) -> None:
        """Serve ``request_type``: its requests are decoded (and checked) into that type."""
        if request_type.API_KEY not in self._disabled:
            self._handlers[int(request_type.API_KEY)] = (request_type, handler)

    def _api_versions(self, request: ApiVersionsRequest) -> ApiVersionsResponse:
        # AUTHENTICATE is answered by the server itself (PLAINTEXT: without a principal).
        keys = set(self._handlers) | {int(ApiKey.AUTHENTICATE)}
        return ApiVersionsResponse(api_keys=tuple(sorted(keys)), server=self.role,
                                   server_id=self.server_id)

    def handle(self, payload: Any, peer: Peer | None = None) -> Reply:
        """The reply to one request frame's payload (bytes, a bytearray or a numpy buffer)."""
        try:
            # msgpack reads any buffer (a numpy array too) and copies what it keeps.
            req = codec.decode_request(cast(bytearray, payload), max_container=_MAX_CONTAINER)
        except CorruptMessage as e:
            return [codec.encode_response(-1, error=e)], False
        cid = req.correlation_id
        if req.api_key == ApiKey.AUTHENTICATE:
            return self._authenticate(req, peer)
        if self.security.sasl and peer is not None and peer.principal is None \
                and req.api_key != ApiKey.API_VERSIONS:
            denied = AuthenticationFailed(
                f"the {self.role} requires SASL authentication (security.protocol=SASL): "
                f"authenticate before {api_name(req.api_key)} (client username and password "
                f"options)")
            return [codec.encode_response(cid, error=denied)], False
        served = self._handlers.get(req.api_key)
        principal = peer.principal if peer is not None else None
        address = peer.ip if peer is not None else None
        try:
            if served is None:
                raise UnsupportedVersion(f"the {self.role} does not support API "
                                         f"{api_name(req.api_key)}")
            if req.api_version != CURRENT_VERSION:
                raise UnsupportedVersion(
                    f"API {req.api_key} version {req.api_version} is not supported "
                    f"(supported: {CURRENT_VERSION})")
            request_type, handler = served
            request = request_type.decode(req.body)     # InvalidRequest names a bad field
            response = run_as(principal, handler, request, address=address)
            return codec.encode_response_parts(cid, response.to_wire(),
                                               segments=req.segments), True
        except ApiError as e:
            if isinstance(e, MetadataStoreUnavailable):  # an outage operators must see
                log.warning("%s failed: %s", api_name(req.api_key), e)
            return [codec.encode_response(cid, error=e)], True
        except Exception as e:  # noqa: BLE001 - a bug of ours, not the client's: say so
            log.exception("%s failed", api_name(req.api_key))
            err = UnknownServerError(f"{api_name(req.api_key)} failed inside the {self.role}: "
                                     f"{type(e).__name__}: {e}")
            return [codec.encode_response(cid, error=err)], True

    def _authenticate(self, req: codec.RequestEnvelope, peer: Peer | None) -> Reply:
        cid = req.correlation_id
        if not self.security.sasl or peer is None:
            return [codec.encode_response(cid, AuthenticateResponse(None).to_wire())], True
        try:
            request = AuthenticateRequest.decode(req.body, error=AuthenticationFailed)
            # Failures are counted, throttled and logged (a summary per address) by the
            # authenticator, so a flood of wrong passwords writes no line per attempt.
            peer.principal = self.security.authenticate(request.mechanism, request.token,
                                                        peer.ip)
        except AuthenticationFailed as e:
            return [codec.encode_response(cid, error=e)], False
        return [codec.encode_response(cid, AuthenticateResponse(peer.principal).to_wire())], True
