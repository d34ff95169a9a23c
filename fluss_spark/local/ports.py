"""Free loopback ports and waiting for a TCP service to answer."""

from __future__ import annotations

import errno
import os
import random
import socket
import threading
import time
from pathlib import Path

#: Where Linux keeps the range it draws outgoing connections' (and port 0's) local ports from.
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: The lowest port handed out: below it sit well-known services' defaults (ZooKeeper's 2181,
#: Kafka's 9092, web servers' 8080...).
_LOWEST = 15000
#: Ports tried before the kernel is asked for one (port 0).
_WALK = 256
#: ``(pid, the next port to try)`` of this process: a forked child starts a walk of its own.
_next: tuple[int, int] | None = None
_lock = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, for a server that is told its port before it starts.

    Taken from below the kernel's ephemeral range when there is room: a port from that range
    (what binding port 0 gives) can be taken, between this call and the server's bind, by any
    process's outgoing connection or by any server that binds port 0, such as a JVM's. Each
    process walks up the range from a random start, so its own calls never repeat a port its
    servers may not have bound yet, and two processes rarely meet."""
    global _next
    low, high = _unclaimed_range()
    if high - low >= _WALK:
        with _lock:
            if _next is None or _next[0] != os.getpid() or not low <= _next[1] <= high:
                _next = (os.getpid(), random.randint(low, high))
            for _ in range(_WALK):
                port = _next[1]
                _next = (_next[0], port + 1 if port < high else low)
                if _bindable(host, port):
                    return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def _unclaimed_range() -> tuple[int, int]:
    """``(low, high)`` of the ports below the ephemeral range; empty (low > high) if unknown."""
    try:
        first = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 1, 0
    return _LOWEST, first - 1


def bind_error(host: str, port: int) -> str | None:
    """Why a server could not listen on ``host:port`` now (None: it could). Bound as the
    servers bind, with SO_REUSEADDR, so a port a stopped server left in TIME_WAIT is free."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            return ("another process listens on it" if e.errno == errno.EADDRINUSE
                    else e.strerror or str(e))
    return None


def port_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def wait_until(predicate, timeout_s: float, what: str, interval_s: float = 0.1):
    """Poll ``predicate`` until it returns a truthy value; raise TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(interval_s)
