"""What one RPC server accepts on its port: the ``rpc.*`` server options, parsed once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from fluss_spark import config


@dataclass(frozen=True)
class RpcLimits:
    """What one server accepts on its port (the ``rpc.*`` server options)."""

    max_request_bytes: int = config.RPC_MAX_REQUEST_SIZE.default
    max_connections: int = config.RPC_MAX_CONNECTIONS.default
    max_connections_per_ip: int = config.RPC_MAX_CONNECTIONS_PER_IP.default
    idle_timeout_s: float = config.RPC_IDLE_TIMEOUT.default / 1000
    read_timeout_s: float = config.RPC_READ_TIMEOUT.default / 1000
    handler_threads: int = config.RPC_HANDLER_THREADS.default
    write_timeout_s: float = config.RPC_WRITE_TIMEOUT.default / 1000
    max_unsent_bytes: int = config.RPC_MAX_UNSENT_BYTES.default
    auth_timeout_s: float = config.RPC_AUTH_TIMEOUT.default / 1000
    unauth_max_request_bytes: int = config.RPC_UNAUTH_MAX_REQUEST_SIZE.default
    unauth_max_connections: int = config.RPC_UNAUTH_MAX_CONNECTIONS.default
    unauth_max_connections_per_ip: int = config.RPC_UNAUTH_MAX_CONNECTIONS_PER_IP.default
    backlog: int = 1024

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> "RpcLimits":
        def get(opt: config.Option) -> Any:
            return options.get(opt.key, opt.default)
        return cls(max_request_bytes=get(config.RPC_MAX_REQUEST_SIZE),
                   max_connections=get(config.RPC_MAX_CONNECTIONS),
                   max_connections_per_ip=get(config.RPC_MAX_CONNECTIONS_PER_IP),
                   idle_timeout_s=get(config.RPC_IDLE_TIMEOUT) / 1000,
                   read_timeout_s=get(config.RPC_READ_TIMEOUT) / 1000,
                   handler_threads=get(config.RPC_HANDLER_THREADS),
                   write_timeout_s=get(config.RPC_WRITE_TIMEOUT) / 1000,
                   max_unsent_bytes=get(config.RPC_MAX_UNSENT_BYTES),
                   auth_timeout_s=get(config.RPC_AUTH_TIMEOUT) / 1000,
                   unauth_max_request_bytes=get(config.RPC_UNAUTH_MAX_REQUEST_SIZE),
                   unauth_max_connections=get(config.RPC_UNAUTH_MAX_CONNECTIONS),
                   unauth_max_connections_per_ip=get(config.RPC_UNAUTH_MAX_CONNECTIONS_PER_IP))
