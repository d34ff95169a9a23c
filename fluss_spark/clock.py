"""Clocks, in one unit: integer milliseconds since the epoch (wall) or since boot (monotonic).

Every component that takes a clock takes a ``Clock``; tests pass a
``fluss_spark.testing.clock.FakeClock``.
"""

from __future__ import annotations

import time
from typing import Callable

#: A clock: a call returns the current time in integer milliseconds.
Clock = Callable[[], int]


def wall_ms() -> int:
    """Milliseconds since the epoch (commit timestamps, lease expiries)."""
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    """Milliseconds of a clock that never goes back (deadlines, intervals)."""
    return time.monotonic_ns() // 1_000_000
