"""A threaded TCP RPC server: reads frames, dispatches by api key, answers every error."""

from __future__ import annotations

import logging
import socket
import socketserver
import threading
from typing import Callable

from fluss_spark.errors import (ApiError, CorruptMessage, InvalidRequest,
                                MetadataStoreUnavailable, UnknownServerError, UnsupportedVersion)
from fluss_spark.protocol import codec, framing
from fluss_spark.protocol.api import CURRENT_VERSION, ApiKey

log = logging.getLogger(__name__)

Handler = Callable[[dict], dict]


class RpcServer:
    """Serves handlers registered per api key on a loopback or public address.

    One thread per connection; requests on a connection are answered in order. A peer that
    sends garbage gets an error response (when a correlation id can be read) and is
    disconnected; the server keeps serving everyone else.
    """

    def __init__(self, host: str, port: int, *, role: str, server_id: int,
                 disabled: frozenset[int] = frozenset()):
        self.role = role
        self.server_id = server_id
        self._handlers: dict[int, Handler] = {}
        self._disabled = disabled
        self.register(ApiKey.API_VERSIONS, self._api_versions)
        rpc = self

        class _Conn(socketserver.BaseRequestHandler):
            def handle(self):
                rpc._serve_connection(self.request)

        class _Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = _Server((host, port), _Conn)
        self.host, self.port = self._server.server_address[:2]
        self._thread: threading.Thread | None = None

    def register(self, api_key: int, handler: Handler) -> None:
        if api_key not in self._disabled:
            self._handlers[int(api_key)] = handler

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"{self.role}-rpc",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _api_versions(self, body: dict) -> dict:
        return {"api_keys": sorted(self._handlers), "server": self.role,
                "server_id": self.server_id}

    def _serve_connection(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                header = framing.recv_exact(sock, framing.HEADER.size)
                if header is None:
                    return
                try:
                    length = framing.decode_length(header)
                except CorruptMessage as e:
                    log.warning("closing connection: %s", e)
                    return
                payload = framing.recv_exact(sock, length)
                if payload is None:
                    return
                reply, keep = self._dispatch(payload)
                sock.sendall(framing.encode_frame(reply))
                if not keep:
                    return
        except (ConnectionError, OSError):
            return
        finally:
            try:
                sock.close()
            except OSError:
                pass

    def _dispatch(self, payload: bytes) -> tuple[bytes, bool]:
        try:
            req = codec.decode_request(payload)
        except CorruptMessage as e:
            return codec.encode_response(-1, error=e), False
        handler = self._handlers.get(req.api_key)
        try:
            if handler is None:
                name = ApiKey(req.api_key).name if req.api_key in ApiKey._value2member_map_ else req.api_key
                raise UnsupportedVersion(f"the {self.role} does not support API {name}")
            if req.api_version != CURRENT_VERSION:
                raise UnsupportedVersion(
                    f"API {req.api_key} version {req.api_version} is not supported "
                    f"(supported: {CURRENT_VERSION})")
            body = handler(req.body)
            return codec.encode_response(req.correlation_id, body), True
        except ApiError as e:
            if isinstance(e, MetadataStoreUnavailable):  # an outage operators must see
                log.warning("%s failed: %s", _api_name(req.api_key), e)
            return codec.encode_response(req.correlation_id, error=e), True
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            # A missing or mistyped field in a request: the client's fault, reported as such.
            err = InvalidRequest(f"invalid {_api_name(req.api_key)} request: "
                                 f"{type(e).__name__}: {e}")
            return codec.encode_response(req.correlation_id, error=err), True
        except Exception as e:  # noqa: BLE001 - any bug must become an error response
            log.exception("%s failed", _api_name(req.api_key))
            err = UnknownServerError(f"{_api_name(req.api_key)} failed: {type(e).__name__}: {e}")
            return codec.encode_response(req.correlation_id, error=err), True


def _api_name(key: int) -> str:
    try:
        return ApiKey(key).name
    except ValueError:
        return f"api {key}"



def require(body: dict, name: str, kind: type | tuple[type, ...]):
    """Read a required request field of a given type, or raise InvalidRequest naming it."""
    if name not in body or body[name] is None:
        raise InvalidRequest(f"missing field {name!r}")
    value = body[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidRequest(f"field {name!r} has type {type(value).__name__}")
    return value
