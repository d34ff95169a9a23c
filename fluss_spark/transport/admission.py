"""Who may open a connection: the caps per server and per address, and eviction of connections
that have not authenticated yet (they go first, so a flood of them cannot lock clients out)."""

from __future__ import annotations

import collections
import time
from typing import Any, Callable, Counter, Mapping, OrderedDict, Protocol

from fluss_spark.transport.limits import RpcLimits
from fluss_spark.transport.log_limiter import LogLimiter


class Admitted(Protocol):
    """What admission needs of a connection."""

    fd: int
    ip: str
    busy: bool
    opened: float
    trusted: bool


class Admission:
    """The open connections per address and the ones not trusted yet (TLS handshake or SASL
    login under way; with neither, until their first request is answered)."""

    def __init__(self, limits: RpcLimits, gated: bool, warn: LogLimiter,
                 stats: Counter[str], close: Callable[[Any], None]):
        """``gated``: connections must pass TLS or SASL first, and the unauthenticated caps
        apply; ``close``: how a victim of eviction is closed."""
        self.limits, self.gated, self._warn, self._stats = limits, gated, warn, stats
        self._close = close
        self.open = 0
        self._per_ip: Counter[str] = collections.Counter()
        #: Connections not trusted yet, per address, oldest first (evicted first).
        self._untrusted: dict[str, OrderedDict[int, Admitted]] = {}
        self._untrusted_count = 0

    def refusal(self, ip: str) -> str | None:
        """Why a new connection from ``ip`` is refused (None: admit it), after evicting an
        untrusted connection where that makes room."""
        limits = self.limits
        untrusted_here = len(self._untrusted.get(ip, ()))
        if self.gated and untrusted_here >= limits.unauth_max_connections_per_ip:
            return (f"{untrusted_here} connections from that address have not "
                    f"authenticated (rpc.unauthenticated.max-connections-per-ip="
                    f"{limits.unauth_max_connections_per_ip})")
        if self._per_ip[ip] >= limits.max_connections_per_ip and not self._evict(ip):
            return (f"{self._per_ip[ip]} connections from that address "
                    f"(rpc.max-connections-per-ip={limits.max_connections_per_ip})")
        if self.open >= limits.max_connections and not self._evict():
            return (f"{self.open} connections open "
                    f"(rpc.max-connections={limits.max_connections})")
        if (self.gated and self._untrusted_count >= limits.unauth_max_connections
                and not self._evict()):
            return (f"{self._untrusted_count} connections have not authenticated "
                    f"(rpc.unauthenticated.max-connections={limits.unauth_max_connections})")
        return None

    def admitted(self, conn: Admitted) -> None:
        self.open += 1
        self._per_ip[conn.ip] += 1
        self._untrusted.setdefault(conn.ip, collections.OrderedDict())[conn.fd] = conn
        self._untrusted_count += 1

    def trust(self, conn: Admitted) -> None:
        if not conn.trusted:
            conn.trusted = True
            self._forget_untrusted(conn)

    def closed(self, conn: Admitted) -> None:
        self.open -= 1
        self._per_ip[conn.ip] -= 1
        if self._per_ip[conn.ip] <= 0:
            del self._per_ip[conn.ip]
        if not conn.trusted:
            self._forget_untrusted(conn)

    def _evict(self, ip: str | None = None) -> bool:
        """Close the oldest connection not trusted yet (of ``ip``, else of the address holding
        the most of them) whose request no handler is running; False when there is none."""
        candidates: list[Mapping[int, Admitted]]
        if ip is not None:
            candidates = [self._untrusted.get(ip, {})]
        else:
            candidates = sorted(self._untrusted.values(), key=len, reverse=True)
        for conns in candidates:
            victim = next((c for c in conns.values() if not c.busy), None)
            if victim is not None:
                self._stats["evicted"] += 1
                self._warn.warning(victim.ip, "closed a connection from %s that had not "
                                   "authenticated after %.1fs to make room for a new one",
                                   victim.ip, time.monotonic() - victim.opened)
                self._close(victim)
                return True
        return False

    def _forget_untrusted(self, conn: Admitted) -> None:
        conns = self._untrusted.get(conn.ip)
        if conns is not None and conns.pop(conn.fd, None) is not None:
            self._untrusted_count -= 1
            if not conns:
                del self._untrusted[conn.ip]
