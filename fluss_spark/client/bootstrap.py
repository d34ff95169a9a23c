"""``bootstrap.servers`` parsed into addresses, for either backend. It imports no transport, so
a client of Apache Fluss never loads this project's own."""

from __future__ import annotations

from typing import Iterable

from fluss_spark.errors import ConfigError


def parse_bootstrap(servers: str | Iterable[str]) -> list[tuple[str, int]]:
    """``"h1:p1,h2:p2"`` (or a list of addresses) -> [(host, port)], refusing an empty list."""
    parts = servers.split(",") if isinstance(servers, str) else list(servers)
    addrs = [parse_address(p) for p in parts if p and p.strip()]
    if not addrs:
        raise ConfigError("bootstrap.servers is empty: give at least one host:port")
    return addrs


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` -> (host, port), with a clear error."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"bad server address {address!r}: expected host:port")
    return host.strip("[]"), int(port)
