"""recv_exact: a frame of any size arrives whole, and memory follows the bytes that arrived."""

from __future__ import annotations

import os
import socket
import threading
import tracemalloc

from fluss_spark.transport.frames import DIRECT_BYTES, recv_exact


def _sent(data: bytes) -> tuple[socket.socket, threading.Thread]:
    """The reading end of a socket pair whose other end sends ``data``, then hangs up."""
    a, b = socket.socketpair()

    def send() -> None:
        with b:
            b.sendall(data)
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    return a, sender


def test_frames_below_and_above_the_direct_size_arrive_whole():
    for size in (0, 1, DIRECT_BYTES, DIRECT_BYTES + 1, 3 * DIRECT_BYTES + 12345):
        data = os.urandom(size)
        sock, sender = _sent(data)
        got = recv_exact(sock, size)
        assert got is not None and bytes(got) == data and len(got) == size
        sender.join()
        sock.close()


def test_a_frame_cut_short_is_none_and_its_buffer_at_most_twice_what_arrived():
    sock, sender = _sent(b"x" * (DIRECT_BYTES + 10))
    tracemalloc.start()
    try:
        assert recv_exact(sock, 200 * DIRECT_BYTES) is None     # announces 1.2 GB
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        sender.join()
        sock.close()
    # 12 MB of buffer for 6 MB received, and the 6 MB of zeros it grew by: never the announced
    assert peak < 4 * DIRECT_BYTES, peak
