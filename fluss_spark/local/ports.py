"""Free loopback ports and waiting for a TCP service to answer."""

from __future__ import annotations

import socket
import time


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


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
