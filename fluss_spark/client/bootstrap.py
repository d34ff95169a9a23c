"""``bootstrap.servers`` parsed into addresses, for either backend."""

from __future__ import annotations

from typing import Iterable

from fluss_spark.errors import ConfigError
from fluss_spark.transport.client import parse_address


def parse_bootstrap(servers: str | Iterable[str]) -> list[tuple[str, int]]:
    """``"h1:p1,h2:p2"`` (or a list of addresses) -> [(host, port)], refusing an empty list."""
    parts = servers.split(",") if isinstance(servers, str) else list(servers)
    addrs = [parse_address(p) for p in parts if p and p.strip()]
    if not addrs:
        raise ConfigError("bootstrap.servers is empty: give at least one host:port")
    return addrs
