"""Reading whole frames from a socket (the one read loop both ends share)."""

from __future__ import annotations

import socket

#: What an announced frame length alone may make a reader allocate: a frame up to this size is
#: read into one buffer of its length, received in place; a larger one into a buffer that starts
#: at this size and at most doubles as its bytes arrive. Above a scan's 4 MB pages, so they take
#: the one-buffer path (the grown buffer's copies cost a 4 MB page scan about a tenth of the
#: reader's CPU), and far below what a peer could make a reader hold by announcing alone.
DIRECT_BYTES = 6 << 20


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
