"""A server process's memory after a burst: Arrow on jemalloc, and a periodic release.

Measured on a tablet (12 writers of 60 MB, then 6 readers of the whole log, 3 times): resident
memory stayed at 320-800 MB after the bursts. Three causes, three remedies:

- Arrow's default pool (mimalloc) keeps freed pages for reuse: 50-65 MB above idle stayed
  after the burst of ``tests/integration/test_server_memory.py``. The servers allocate Arrow
  buffers from Arrow's jemalloc pool instead (``use_releasing_allocator``), which purges freed
  pages by itself within about a second (5-15 MB stayed) and as fast as mimalloc. The C heap
  (the fallback where pyarrow has no jemalloc) releases too, but made scans 10-20% slower.
- The fetch path leaves reference cycles behind, holding reply buffers until the cyclic
  collector's oldest generation runs, which a quiet server may never trigger: the release round
  collects them, then asks the pool to purge what is free.
- glibc returns freed memory at the top of the heap only (Python objects live there): the round
  calls ``malloc_trim``.

With all three, resident memory falls back to within ~15 MB of the idle server's within one
round (``server.memory.release-interval``, default 5 s). A round costs a full collection
(milliseconds on a server's heap), a purge and a trim.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import threading
from typing import Callable

import pyarrow as pa

log = logging.getLogger(__name__)


def use_releasing_allocator() -> str:
    """Allocate Arrow buffers from a pool that gives freed memory back: jemalloc, else the C
    heap (pyarrow builds without jemalloc, e.g. some macOS wheels). Returns its name."""
    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:
        pool = pa.system_memory_pool()
    pa.set_memory_pool(pool)
    return str(pool.backend_name)


def _malloc_trim() -> Callable[[], object] | None:
    """glibc's ``malloc_trim(0)``, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None
    if trim is None:
        return None
    return lambda: trim(0)


def release_unused() -> None:
    """One round: collect cyclic garbage, then give free Arrow and heap pages back."""
    gc.collect()
    pa.default_memory_pool().release_unused()
    trim = _TRIM
    if trim is not None:
        trim()


_TRIM = _malloc_trim()


def start_releasing(interval_s: float, stopping: threading.Event) -> threading.Thread | None:
    """Run ``release_unused`` every ``interval_s`` until ``stopping`` (None: turned off).

    Called once the server has started: what exists then (modules, the state loaded at start)
    lives as long as the process, so it is frozen out of the collector's view first. A full
    collection of a started server walked ~70,000 such objects, 30-80 ms with the GIL held in
    every round (a scan's pages waited meanwhile); after ``gc.freeze`` it walks only what came
    later.
    """
    if interval_s <= 0:
        return None
    gc.collect()
    gc.freeze()

    def loop() -> None:
        while not stopping.wait(interval_s):
            try:
                release_unused()
            except Exception:  # noqa: BLE001 - housekeeping must never take the server down
                log.exception("releasing unused memory failed")
    thread = threading.Thread(target=loop, name="memory-release", daemon=True)
    thread.start()
    return thread
