"""await_sources: a query counts as started once its sources exist (no Spark)."""

from __future__ import annotations

from fluss_spark.connector.startup import await_sources


class StartingQuery:
    """A query whose status leaves 'Initializing sources' after ``polls`` status reads."""

    def __init__(self, polls: int, active: bool = True):
        self.polls, self.isActive = polls, active
        self.reads = 0

    @property
    def status(self) -> dict:
        self.reads += 1
        if self.reads == 1:
            return {"message": "Initializing StreamExecution"}
        return {"message": "Initializing sources" if self.reads <= self.polls
                else "Waiting for data to arrive"}


def test_returns_once_the_sources_are_initialized():
    q = StartingQuery(polls=4)
    await_sources(q, timeout_s=30)
    assert q.reads == 5


def test_a_query_that_stopped_while_starting_is_not_waited_for():
    q = StartingQuery(polls=10**9, active=False)
    await_sources(q, timeout_s=30)
    assert q.reads == 0


def test_the_wait_is_bounded():
    q = StartingQuery(polls=10**9)
    await_sources(q, timeout_s=0.2)
    assert 1 < q.reads < 100
