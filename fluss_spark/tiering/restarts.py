"""When a failed table query of the tiering job is started again, and how its failure is shown.

A restart is decided by the error's ``retriable`` attribute (``fluss_spark.errors``), never by
its message. Spark hands the job most failures only as text, though: an error raised by the
source in Spark's Python workers reaches the driver as a JVM exception whose message holds the
Python traceback (docs/spark_source.md, "How the source meets Spark"). For those, and only
those, ``fluss_error_named_in`` maps the text to the error class it names; the class's
``retriable`` then decides.
"""

from __future__ import annotations

import re
import sys
from typing import Callable

from fluss_spark.clock import Clock
from fluss_spark.errors import ApiError, FlussError

#: The line of a Spark job failure that names the task's error, e.g. "... most recent failure:
#: Lost task 0.0 in stage 3.0 (TID 5) (host executor driver): java.io.IOException: ...".
_TASK_FAILURE = re.compile(r"most recent failure: Lost task [^:]*?\): (.+)$")
_EXCEPTION_LINE = re.compile(r"^(Caused by: )?[\w.$]+(Exception|Error)\b.*$")
#: A Python traceback's last line for an error of this package: "fluss_spark.errors.X: ...".
_OUR_ERROR_LINE = re.compile(r"^fluss_spark\.([\w.]+)\.(\w+): ")


def fluss_cause(error: BaseException) -> FlussError | None:
    """The first fluss_spark error in ``error``'s chain (itself, its cause, its context)."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        if isinstance(e, FlussError):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def fluss_error_named_in(text: str) -> type[FlussError] | None:
    """The fluss_spark error class the last traceback line of ``text`` names; ``FlussError``
    for one of ours that is not loaded here (so it counts as not retriable); None for none.

    Text is all there is for a failure that crossed the JVM (see the module docstring): Spark
    keeps no Python exception object for an error raised in one of its Python workers."""
    lines = [ln.strip() for ln in text.splitlines()]
    named = [m for ln in lines if (m := _OUR_ERROR_LINE.match(ln))]
    if not named:
        return None
    module, name = named[-1].group(1), named[-1].group(2)
    cls = getattr(sys.modules.get(f"fluss_spark.{module}"), name, None)
    return cls if isinstance(cls, type) and issubclass(cls, FlussError) else FlussError


def restartable(error: BaseException) -> bool:
    """Whether a query failure may pass on a restart: a retriable Fluss error (a server down
    longer than the client's timeout) or a Spark/JVM error, but not a configuration, data-loss or
    lake error, which needs an operator. The error's class decides where Python still has it;
    otherwise the class its text names (``fluss_error_named_in``)."""
    cause = fluss_cause(error)
    cls: type[FlussError] | None = type(cause) if cause is not None else None
    if cls is None:
        cls = fluss_error_named_in(failure_text(error))
    if cls is None:
        return True
    return issubclass(cls, ApiError) and cls.retriable


def error_summary(exc: BaseException) -> str:
    """One line for a (Spark-wrapped) failure: the fluss_spark error raised inside, else the
    error the failed task raised, else the first exception line."""
    lines = [ln.strip() for ln in failure_text(exc).splitlines() if ln.strip()]
    ours = [ln for ln in lines if re.match(r"^fluss_spark\.[\w.]+: ", ln)]
    task = [m.group(1) for ln in lines if (m := _TASK_FAILURE.search(ln))]
    named = [ln for ln in lines if _EXCEPTION_LINE.match(ln)]
    best = ours[-1:] or task[-1:] or named[-1:] or lines[:1] or [type(exc).__name__]
    return best[0][:500]


def failure_text(exc: BaseException) -> str:
    """A (Spark-wrapped) failure's full message without JVM stack frames."""
    return strip_jvm_frames(str(getattr(exc, "desc", None) or exc).strip())


def strip_jvm_frames(text: str) -> str:
    """``text`` without the ``at ...`` / ``... N more`` lines of JVM stack traces, so that the
    Python traceback and the lines naming the cause stay readable."""
    return "\n".join(ln for ln in text.splitlines()
                     if not re.match(r"^\s+(at |\.\.\. \d+ more)", ln))


class RestartPolicy:
    """Per table: the restarts within the window, and when the pending one is due (clock ms).

    A failure that ``restartable`` allows is restarted after ``backoff_ms`` doubled per recent
    restart, times 1 + ``jitter()``/2, while fewer than ``max_restarts`` happened within
    ``window_ms``."""

    def __init__(self, *, max_restarts: int, backoff_ms: int, window_ms: int, clock: Clock,
                 jitter: Callable[[], float]):
        self.max_restarts, self.backoff_ms, self.window_ms = max_restarts, backoff_ms, window_ms
        self.clock, self.jitter = clock, jitter
        #: Per table: clock times (ms) of its query's restarts.
        self.restarts: dict[str, list[int]] = {}
        self._due: dict[str, int] = {}

    def schedule(self, name: str, error: BaseException) -> int | None:
        """Plan a restart of ``name`` after ``error``; its delay (ms), or None when it may not."""
        now = self.clock()
        recent = [t for t in self.restarts.get(name, []) if now - t < self.window_ms]
        self.restarts[name] = recent
        if not restartable(error) or len(recent) >= self.max_restarts:
            return None
        delay = int(self.backoff_ms * (2 ** len(recent)) * (1 + self.jitter() / 2))
        self._due[name] = now + delay
        return delay

    def due(self, name: str) -> bool:
        return name in self._due and self.clock() >= self._due[name]

    def started(self, name: str) -> None:
        """The planned restart of ``name`` happens now."""
        self._due.pop(name, None)
        self.restarts.setdefault(name, []).append(self.clock())

    def cancel(self, name: str | None = None) -> None:
        """Forget the planned restart of ``name`` (of every table: None)."""
        if name is None:
            self._due.clear()
        else:
            self._due.pop(name, None)

    @property
    def pending(self) -> bool:
        return bool(self._due)


__all__ = ["RestartPolicy", "error_summary", "failure_text", "fluss_cause",
           "fluss_error_named_in", "restartable", "strip_jvm_frames"]
