"""Whether an address names this machine: where a client may read a server's files itself."""

from __future__ import annotations

import functools
import ipaddress
import socket


@functools.lru_cache(maxsize=1)
def _own_addresses() -> frozenset[str]:
    names = {socket.gethostname(), socket.getfqdn()}
    found = set(names)
    for name in names:
        try:
            found.update(str(info[4][0]) for info in socket.getaddrinfo(name, None))
        except OSError:
            pass
    return frozenset(found)


@functools.lru_cache(maxsize=256)
def is_local_address(host: str | None) -> bool:
    """Whether ``host`` (an IP or a name) is loopback or one of this machine's own addresses."""
    if not host:
        return False
    try:
        if ipaddress.ip_address(host).is_loopback:
            return True
    except ValueError:
        if host == "localhost":
            return True
    return host in _own_addresses()


__all__ = ["is_local_address"]
