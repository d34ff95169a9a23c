"""Whether something accepts TCP connections at an address (before asking what it speaks)."""

from __future__ import annotations

import socket


def reachable(host: str, port: int, timeout_s: float = 2.0) -> bool:
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False
