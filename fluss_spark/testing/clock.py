"""FakeClock: the one clock of the tests, moved only by the test (advance) or by code under test
that sleeps on it."""

from __future__ import annotations


class FakeClock:
    """A millisecond clock (a ``fluss_spark.clock.Clock``) that moves only when advanced.

    ``seconds`` and ``sleep`` stand in for ``time.monotonic`` and ``time.sleep`` of code that
    waits in seconds: a sleep is recorded in ``sleeps`` and advances the clock instead of waiting.
    """

    def __init__(self, now_ms: int = 1_700_000_000_000):
        self.now_ms = int(now_ms)
        self.sleeps: list[float] = []

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += int(ms)

    def seconds(self) -> float:
        """The same instant in seconds."""
        return self.now_ms / 1000

    def sleep(self, seconds: float) -> None:
        """Record a sleep of ``seconds`` and move the clock by it."""
        self.sleeps.append(seconds)
        self.now_ms += round(seconds * 1000)
