"""Sending a reply's buffers on a non-blocking socket, plaintext or TLS, without blocking."""

from __future__ import annotations

import select
import socket
import ssl
import time
from typing import Any, cast

from fluss_spark.transport import tls as _tls


def send_some(sock: socket.socket, views: list[memoryview],
              budget: int | None = None) -> list[memoryview]:
    """Send what a non-blocking socket takes now (at least ``budget`` bytes, when given, then
    stop); the views still to send (empty: all sent)."""
    tls = isinstance(sock, ssl.SSLSocket)
    while views:
        try:
            sent = (_tls.send_views(cast(ssl.SSLSocket, sock), views) if tls
                    else sock.sendmsg(views[:_IOV_MAX]))
        except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            return views
        views = advance(views, sent)
        if budget is not None:
            budget -= sent
            if budget <= 0:
                break
    return views


def send_within(sock: socket.socket, views: list[memoryview],
                patience_s: float) -> list[memoryview]:
    """``send_some``, then, while views remain, wait up to ``patience_s`` in all for the socket
    to take more; the views still to send."""
    views = send_some(sock, views)
    if not views:
        return views
    deadline = time.monotonic() + patience_s
    poller = select.poll()        # not select.select: a busy server's fds pass FD_SETSIZE
    poller.register(sock, select.POLLOUT)
    while views:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            break
        views = send_some(sock, views)
    return views


def as_views(parts: list[Any]) -> list[memoryview]:
    return [v for v in (memoryview(p).cast("B") for p in parts) if v.nbytes]


def advance(views: list[memoryview], sent: int) -> list[memoryview]:
    """``views`` without their first ``sent`` bytes."""
    i = 0
    while sent and sent >= views[i].nbytes:
        sent -= views[i].nbytes
        i += 1
    views = views[i:]
    if sent:
        views[0] = views[0][sent:]
    return views


#: Buffers per sendmsg call (Linux's IOV_MAX is 1024).
_IOV_MAX = 1024
