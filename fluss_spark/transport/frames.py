"""Reading whole frames from a socket (the one read loop both ends share)."""

from __future__ import annotations

import mmap
import socket
import sys
from typing import Any, cast

import numpy as np

#: What an announced frame length alone may make a reader allocate: a frame up to this size is
#: read into one buffer of its length, received in place; a larger one into a buffer that starts
#: at this size and at most doubles as its bytes arrive. Above a scan's 4 MB pages, so they take
#: the one-buffer path (the grown buffer's copies cost a 4 MB page scan about a tenth of the
#: reader's CPU), and far below what a peer could make a reader hold by announcing alone.
DIRECT_BYTES = 6 << 20


#: Frames below this size are read into a bytearray of their own even with a pool (a small
#: buffer costs nothing to make; a pooled one would be held for a reply of a few bytes).
POOLED_FROM = 64 << 10


#: A pooled buffer at least this large is backed by 2 MB pages where the system allows it
#: (Linux, ``madvise``): the socket's first write into a fresh 4 MB buffer of 4 KB pages takes
#: 1,024 page faults (2-4 ms here, a tenth of a fresh reader's 4M-row scan), of 2 MB pages two.
HUGE_PAGE_BYTES = 2 << 20


class ReceivePool:
    """Receive buffers used again once nothing refers to the frame last read into them.

    Whatever is decoded from a frame in place (a memoryview, a numpy slice, Arrow record
    batches read without a copy) holds a reference to its buffer, so a buffer is handed out
    again only when the pool's own reference is the last: never while a batch still points into
    it. A reused buffer costs neither zero-filling nor page faults, which a fresh buffer of a
    4 MB page costs on every page. When every buffer is still in use a new one is made, and kept
    only while the pool holds fewer than ``size``. Sizes are the caller's to bound
    (``recv_exact`` pools frames of at most ``DIRECT_BYTES``).
    """

    def __init__(self, size: int = 4):
        self.size = size
        self._buffers: list[np.ndarray] = []

    def take(self, n: int) -> memoryview:
        """An uninitialised buffer of ``n`` bytes (a view of a pooled one) nothing else uses."""
        too_small = None
        for i in range(len(self._buffers)):
            if not self._used(i):
                if self._buffers[i].size >= n:
                    return _view(self._buffers[i], n)
                too_small = i
        fresh = new_buffer(n)             # fresh pages are taken as the socket writes them
        if len(self._buffers) < self.size:
            self._buffers.append(fresh)
        elif too_small is not None:
            self._buffers[too_small] = fresh
        return _view(fresh, n)

    def in_use(self) -> int:
        """Pooled buffers something else still refers to."""
        return sum(1 for i in range(len(self._buffers)) if self._used(i))

    def _used(self, i: int) -> bool:
        # CPython counts references exactly: the list's and getrefcount's argument are the
        # pool's own; a view or slice of a buffer (numpy or memoryview) refers to the buffer.
        return sys.getrefcount(self._buffers[i]) > 2


def recv_frame(sock: socket.socket, n: int,
               pool: ReceivePool | None) -> bytearray | memoryview | None:
    """``recv_exact``, reading a frame of ``POOLED_FROM`` to ``DIRECT_BYTES`` bytes into one of
    ``pool``'s buffers."""
    if pool is None or not POOLED_FROM <= n <= DIRECT_BYTES:
        return recv_exact(sock, n)
    view = pool.take(n)
    return view if _fill(sock, view) else None


def recv_exact(sock: socket.socket, n: int) -> bytearray | None:
    """Read exactly ``n`` bytes from a socket into one buffer; None on EOF.

    Memory follows the bytes that actually arrived: a peer that announces 200 MB and sends 1 KB
    costs ``DIRECT_BYTES``, and a buffer never grows past twice what arrived.
    """
    buf = bytearray(min(n, DIRECT_BYTES))
    got = 0
    while True:
        with memoryview(buf) as view:
            while got < len(buf):
                read = sock.recv_into(view[got:], len(buf) - got)
                if not read:
                    return None
                got += read
        if got == n:
            return buf
        buf.extend(bytes(min(n, 2 * len(buf)) - len(buf)))


def new_buffer(n: int) -> np.ndarray:
    """An uninitialised buffer of ``n`` bytes, in 2 MB pages from ``HUGE_PAGE_BYTES`` on where
    the system offers them (its memory is returned when the last view of it goes)."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is None or n < HUGE_PAGE_BYTES:
        return np.empty(n, np.uint8)
    # A private mapping of its own (a shared one would be shmem, which madvise does not back
    # with huge pages), with room to start on a 2 MB boundary (only that is a huge page).
    area = mmap.mmap(-1, n + HUGE_PAGE_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        area.madvise(advice)
    except OSError:                    # not allowed here: 4 KB pages, as from np.empty
        pass
    start = -np.frombuffer(area, np.uint8, count=1).ctypes.data % HUGE_PAGE_BYTES
    # numpy makes a view refer to the first array up its chain whose base is no array: the
    # buffer returned here, as ReceivePool._used counts on (a slice of the whole area's array
    # would make its views refer to that array instead).
    return np.frombuffer(memoryview(area)[start:start + n], np.uint8)


def _view(buf: np.ndarray, n: int) -> memoryview:
    # The memoryview refers to a numpy view, which refers to the buffer: it counts as a use.
    return memoryview(cast(Any, buf[:n]))


def _fill(sock: socket.socket, view: memoryview) -> bool:
    """Fill ``view`` from the socket; False on EOF first."""
    got, n = 0, view.nbytes
    while got < n:
        read = sock.recv_into(view[got:], n - got)
        if not read:
            return False
        got += read
    return True
