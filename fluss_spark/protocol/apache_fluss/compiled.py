"""The compiled decode of KV snapshots (``_native``, built from native/), where the install has it.

Decoding an Apache Fluss KV snapshot -- its RocksDB SST files, then its compacted rows -- in
numpy passes costs about 220 ns a row; the compiled walk does the same work in one pass per
block and per row (BENCHMARKS.md, "Compiled decode in Rust"). It is built with the package
when a Rust toolchain is there (``pip install`` runs cargo) and is optional: an install built
without it, or a call it refuses, decodes with the numpy code of ``rocksdb_sst`` and
``compacted_row``, which stays the reference and gives every error's message.
"""

from __future__ import annotations

import os
from types import ModuleType

_UNSET = object()
_module: object = _UNSET
#: False makes every decode take the numpy path (benchmarks and tests compare the two).
enabled = True


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:          # platforms without CPU affinity
        return os.cpu_count() or 1


#: The most threads one compiled call may use (it uses two at most, for large reads). A Spark
#: task sets the CPUs it was given (``use_threads``): two tasks on two cores that each decode on
#: two threads spend 10-20% more CPU for the same rows.
threads = _usable_cpus()


def use_threads(n: int | None) -> None:
    """Let compiled calls use ``n`` threads (None: every CPU this process may run on)."""
    global threads
    threads = _usable_cpus() if n is None else max(1, int(n))


def native() -> ModuleType | None:
    """The compiled module, or None when it is off or this install was built without it."""
    global _module
    if not enabled:
        return None
    if _module is _UNSET:
        try:
            from fluss_spark.protocol.apache_fluss import _native
            _module = _native
        except ImportError:
            _module = None
    return _module  # type: ignore[return-value]


__all__ = ["enabled", "native", "threads", "use_threads"]
