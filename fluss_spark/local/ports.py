"""Free loopback ports and waiting for a TCP service to answer."""

from __future__ import annotations

import errno
import socket
import time


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


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
