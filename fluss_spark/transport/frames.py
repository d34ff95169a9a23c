"""Reading whole frames from a socket (the one read loop both ends share)."""

from __future__ import annotations

import socket

#: Frames up to this size are read into one buffer of their announced length; a larger one
#: through a scratch buffer of this size, appended to a buffer that grows with what arrived.
CHUNK_BYTES = 1 << 20


def recv_exact(sock: socket.socket, n: int) -> bytearray | None:
    """Read exactly ``n`` bytes from a socket into one buffer; None on EOF.

    An announced length alone never allocates more than ``CHUNK_BYTES``: beyond that, memory
    follows the bytes that actually arrived, so a peer that announces 200 MB and sends 1 KB
    costs about 1 MB. Appending 1 MB chunks reads a 64 MB frame as fast as ``recv_into`` one
    preallocated buffer (measured); the grown buffer is returned as is, never joined.
    """
    if n <= CHUNK_BYTES:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            read = sock.recv_into(view[got:], n - got)
            if not read:
                return None
            got += read
        return buf
    out = bytearray()
    scratch = memoryview(bytearray(CHUNK_BYTES))
    while len(out) < n:
        read = sock.recv_into(scratch, min(CHUNK_BYTES, n - len(out)))
        if not read:
            return None
        out += scratch[:read]
    return out
