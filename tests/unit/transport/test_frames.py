"""recv_exact: a frame of any size arrives whole, and memory follows the bytes that arrived;
ReceivePool: a buffer is reused only when nothing refers to what was read into it."""

from __future__ import annotations

import mmap
import os
import socket
import threading
import tracemalloc

import numpy as np
import pyarrow as pa
import pytest

from fluss_spark.protocol.arrow_ipc import bytes_to_table, table_to_buffer
from fluss_spark.transport.frames import (DIRECT_BYTES, HUGE_PAGE_BYTES, POOLED_FROM,
                                          ReceivePool, new_buffer, recv_exact, recv_frame)


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


@pytest.mark.parametrize("size", [1 << 20, 4 << 20])     # 4 KB pages; 2 MB pages (Linux)
def test_a_pooled_buffer_is_handed_out_again_only_when_nothing_refers_to_it(size):
    pool = ReceivePool(size=2)
    first = pool.take(size)
    first[:4] = b"page"
    address = np.frombuffer(first, np.uint8).ctypes.data
    table = pa.table({"x": pa.array(np.arange(1000, dtype=np.int64))})
    batch_bytes = table_to_buffer(table)
    first[:batch_bytes.size] = batch_bytes.to_pybytes()
    # Record batches decoded in place, and a numpy slice, keep the buffer in use.
    kept = bytes_to_table(first[:batch_bytes.size]).to_batches()
    part = np.frombuffer(first, np.uint8)[8:16]
    del first
    assert pool.in_use() == 1
    second = pool.take(size)
    assert np.frombuffer(second, np.uint8).ctypes.data != address
    del part
    assert pool.in_use() == 2                        # the record batches alone keep it
    del kept
    assert pool.in_use() == 1
    third = pool.take(1000)                          # the first buffer, free again
    assert np.frombuffer(third, np.uint8).ctypes.data == address
    extra = pool.take(4096)                          # both in use: a new one, not kept
    assert pool.in_use() == 2 and len(extra) == 4096
    del second, third, extra
    assert pool.in_use() == 0


def test_a_large_buffer_starts_on_a_huge_page_where_the_system_has_them():
    buf = new_buffer(4 << 20)
    assert buf.size == 4 << 20 and buf.flags.writeable
    if hasattr(mmap, "MADV_HUGEPAGE"):
        assert buf.ctypes.data % HUGE_PAGE_BYTES == 0
    buf[-1] = 7                         # all of it is there to write
    assert new_buffer(HUGE_PAGE_BYTES - 1).flags.owndata     # smaller: from the allocator


def test_frames_are_pooled_only_between_the_pooled_and_the_direct_size():
    pool = ReceivePool()
    for size, pooled in ((POOLED_FROM - 1, False), (POOLED_FROM, True),
                         (DIRECT_BYTES, True), (DIRECT_BYTES + 1, False)):
        data = os.urandom(size)
        sock, sender = _sent(data)
        got = recv_frame(sock, size, pool)
        assert got is not None and bytes(got) == data
        assert isinstance(got, memoryview) == pooled
        del got
        sender.join()
        sock.close()
    assert pool.in_use() == 0
