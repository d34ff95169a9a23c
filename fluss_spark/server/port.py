"""A server's port: its security settings, its ACL checks and the RPC server listening on it,
assembled the same way for the coordinator and the tablet servers."""

from __future__ import annotations

from dataclasses import dataclass

from fluss_spark import config
from fluss_spark.metadata.store import MetadataStore
from fluss_spark.server.authorizer import AclCache, Authorizer
from fluss_spark.server.security import Security
from fluss_spark.server.settings import ServerSettings
from fluss_spark.transport.limits import RpcLimits
from fluss_spark.transport.server import RpcServer


@dataclass(frozen=True)
class ServerPort:
    """What a server answers with: who may connect (``security``), what they may do
    (``authorizer``) and the listener (``rpc``, bound but not started)."""

    security: Security
    authorizer: Authorizer
    rpc: RpcServer

    @classmethod
    def open(cls, settings: ServerSettings, role: str, store: MetadataStore) -> "ServerPort":
        security = Security.from_options(settings.options)
        rpc = RpcServer(settings.host, settings.port, role=role, server_id=settings.server_id,
                        disabled=settings.disabled_apis,
                        limits=RpcLimits.from_options(settings.options),
                        security=security, tls=security.tls,
                        local_socket=settings.options.get(config.RPC_LOCAL_SOCKET.key,
                                                          config.RPC_LOCAL_SOCKET.default))
        return cls(security, Authorizer(security, AclCache(store)), rpc)
