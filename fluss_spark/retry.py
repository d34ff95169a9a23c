"""Retrying retriable errors with capped exponential backoff until a deadline."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, TypeVar

from fluss_spark.errors import ApiError

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """Pauses between attempts: ``first_s``, doubling, never above ``max_s``."""

    first_s: float = 0.05
    max_s: float = 1.0

    def delays(self):
        delay = self.first_s
        while True:
            yield delay
            delay = min(delay * 2, self.max_s)


def retry(op: Callable[[], T], *, timeout_s: float, backoff: Backoff = Backoff(),
          on_retry: Callable[[ApiError], object] | None = None,
          clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], None] = time.sleep) -> T:
    """Run ``op`` until it succeeds; an ``ApiError`` that is ``retriable`` is retried after a
    pause (``on_retry(error)`` runs first) while the next attempt starts within ``timeout_s``.
    Anything else, or the last retriable error once time is up, propagates. Decisions read the
    error's ``retriable`` attribute, never its message."""
    deadline = clock() + timeout_s
    for delay in backoff.delays():
        try:
            return op()
        except ApiError as e:
            if not e.retriable or clock() + delay > deadline:
                raise
            if on_retry is not None:
                on_retry(e)
        sleep(delay)
    raise AssertionError("unreachable")
