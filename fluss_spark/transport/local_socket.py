"""A server's second listener for clients on its own host: a Unix socket named for its TCP port.

Why: over loopback TCP each byte of a scan's page crosses the TCP stack twice on the tablet's
CPU (send, then the loopback receive in its soft interrupt); a Unix socket hands the bytes to
the reader's socket directly. A 4M-row scan session ran 10-20% faster through one (BENCHMARKS.md,
"A local socket beside the port"); the protocol, authentication, limits and ACLs are those of
the TCP port.

The name is a Linux abstract one: no file to create, clean up or leave behind after kill -9,
scoped like the TCP port to the network namespace. Any local user may connect to it, as to the
TCP port. Unlike the port, any local user may also bind a name nobody holds: a client therefore
talks through a local socket only when its owner (SO_PEERCRED) is the user that owns the TCP
listener the name stands beside (``/proc/net/tcp``); anyone else gets TCP, so the local socket
never lets a process pass for a server it could not replace on the port. A client that finds
no such listener, or is not on a Linux host, uses TCP.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import socket
import struct
import sys
import threading

from fluss_spark.transport.locality import is_local_address

log = logging.getLogger(__name__)

#: Abstract socket names exist on Linux only.
SUPPORTED = sys.platform.startswith("linux")

#: The send buffer a server asks for on a local connection (Linux doubles it, up to twice
#: net.core.wmem_max). A Unix socket queues what its reader has not taken yet against the
#: sender's buffer: the default 208 KB made a scan stop and wait every few hundred KB, and the
#: local socket no faster than TCP; room for a 4 MB page (the reader asks two ahead) made it
#: faster. Where wmem_max is lower, the kernel gives what it allows.
SEND_BUFFER_BYTES = 4 << 20

_WILDCARDS = {socket.AF_INET: ("0.0.0.0", "::"), socket.AF_INET6: ("::",)}
_PEER_CRED = struct.Struct("3i")        # struct ucred: pid, uid, gid
#: Names whose owner was checked, with that owner's (pid, uid): the next connection to the
#: same process needs no look at the TCP listeners.
_trusted: dict[str, tuple[int, int]] = {}
_trusted_lock = threading.Lock()


def name(ip: str, port: int) -> str:
    """The abstract name of the local socket beside a TCP listener bound to ``ip``:``port``."""
    return f"\0fluss-spark/rpc/{ipaddress.ip_address(ip)}/{int(port)}"


def listen(ip: str, port: int, backlog: int) -> socket.socket | None:
    """A non-blocking local listener beside the TCP one bound to ``ip``:``port``; None where
    the platform has none or the name is taken (clients on this host then use TCP)."""
    if not SUPPORTED:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(name(ip, port))
        sock.listen(backlog)
    except OSError as e:
        sock.close()
        log.warning("no local socket beside %s:%s (%s): clients on this host use TCP", ip,
                    port, e)
        return None
    sock.setblocking(False)
    return sock


def accepted(sock: socket.socket) -> None:
    """Set up a connection a server accepted: a local one with room for its pages, a TCP one
    without Nagle's delay (a reply goes out whole, at once)."""
    if sock.family == socket.AF_UNIX:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
    else:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def peer_address(bound_ip: str) -> str:
    """The address a local connection counts as (caps per address, ACL hosts, logs): the one
    a TCP connection from this host to ``bound_ip`` would come from, loopback for a wildcard."""
    ip = ipaddress.ip_address(bound_ip)
    if ip.is_unspecified:
        return "::1" if ip.version == 6 else "127.0.0.1"
    return str(ip)


@functools.lru_cache(maxsize=256)
def _names(host: str, port: int) -> tuple[str, ...]:
    """Where a server reached at ``host``:``port`` from this host may listen locally: beside a
    TCP listener bound to that address, or to a wildcard address that serves it."""
    if not SUPPORTED or not is_local_address(host):
        return ()
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return ()
    found: list[str] = []
    for family, _, _, _, address in infos:
        for ip in (str(address[0]), *_WILDCARDS.get(family, ())):
            found.append(name(ip, port))
    return tuple(dict.fromkeys(found))


def connect(host: str, port: int, timeout_s: float) -> socket.socket | None:
    """A connection to the local socket of the server at ``host``:``port``; None when that
    server is not on this host or has none its port's owner holds (the caller uses TCP)."""
    for candidate in _names(host, int(port)):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        try:
            sock.connect(candidate)
            if _owned_by_port_owner(sock, candidate):
                return sock
        except OSError:          # nothing listens under that name
            pass
        sock.close()
    return None


def _owned_by_port_owner(sock: socket.socket, candidate: str) -> bool:
    """Whether the process behind ``sock`` runs as the user owning the TCP listener that
    ``candidate`` names."""
    pid, uid, _ = _PEER_CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                    _PEER_CRED.size))
    with _trusted_lock:
        if _trusted.get(candidate) == (pid, uid):
            return True
    ip, port = candidate.rsplit("/", 2)[1:]
    if tcp_listener_owners(int(port)).get(ip) != uid:
        log.warning("the local socket %r belongs to pid %d (uid %d), not to the owner of a "
                    "TCP listener on %s port %s: using TCP", candidate.lstrip("\0"), pid, uid,
                    ip, port)
        return False
    with _trusted_lock:
        _trusted[candidate] = (pid, uid)
    return True


def tcp_listener_owners(port: int, tables: tuple[str, ...] = ("/proc/net/tcp",
                                                            "/proc/net/tcp6")) -> dict[str, int]:
    """The uid owning each TCP listener on ``port`` in this network namespace, by address."""
    owners: dict[str, int] = {}
    for table in tables:
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 8 or fields[3] != "0A":         # 0A: LISTEN
                continue
            address, _, hex_port = fields[1].partition(":")
            if int(hex_port, 16) == port:
                owners[_address(address)] = int(fields[7])
    return owners


def _address(hex_address: str) -> str:
    """An address as /proc/net/tcp prints it (32-bit words in host order) -> its text."""
    words = [int(hex_address[i:i + 8], 16) for i in range(0, len(hex_address), 8)]
    packed = struct.pack(f"={len(words)}I", *words)
    return str(ipaddress.ip_address(packed))


__all__ = ["SEND_BUFFER_BYTES", "SUPPORTED", "accepted", "connect", "listen", "name",
           "peer_address", "tcp_listener_owners"]
