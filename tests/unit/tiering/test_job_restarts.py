"""The tiering job restarts a table query after a transient failure, within a budget (no Spark)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fluss_spark.errors import KvSnapshotNotExist, NetworkError, RequestTimeout
from fluss_spark.tiering.config import TieringConfig, TieringError
from fluss_spark.tiering import job as job_module
from fluss_spark.tiering.job import DROPPED, TieringJob
from fluss_spark.tiering.restarts import restartable
from fluss_spark.testing.clock import FakeClock


class FakeQuery:
    """A stopped-or-running streaming query as the job sees it."""

    def __init__(self, error: BaseException | str | None = None, active: bool = True):
        self.isActive = error is None and active
        self._error = error
        self.lastProgress = None

    name = "fake"

    def exception(self):
        if self._error is None or isinstance(self._error, BaseException):
            return self._error
        return Exception(self._error)      # Spark's failures carry the Python error as text

    def stop(self):
        self.isActive = False

    def awaitTermination(self, timeout=None):
        self.waited = timeout
        self.isActive = False       # the query ends while the job waits for it
        return True


class JobWithoutSpark(TieringJob):
    """TieringJob whose queries are FakeQuery objects started from a script of failures."""

    def __init__(self, config, clock, outcomes):
        super().__init__(spark=None, config=config, clock=clock, jitter=lambda: 0.0)
        self.outcomes = list(outcomes)      # per start: None (runs), "done", or an error
        self.starts = 0
        self.dropped: set[str] = set()

    def _start_query(self, info):
        self.starts += 1
        outcome = self.outcomes.pop(0) if self.outcomes else None
        self.queries[info.name] = (FakeQuery(active=False) if outcome == "done"
                                   else FakeQuery(outcome))
        self.infos[info.name] = info

    def discover(self):
        return []

    def _dropped(self, name):
        return name in self.dropped

    def release_finished_snapshots(self):
        return []

    def status(self):
        return {"tables": {n: {"error": self.errors.get(n),
                               "restarts": len(self.restarts.get(n, ()))} for n in self.queries}}


def job(tmp_path, outcomes, **cfg):
    now = FakeClock(1_000_000)
    config = TieringConfig(lake=tmp_path, bootstrap_servers="x:1", table_pattern="db\\..*",
                           **{"restart_backoff_s": 2.0, **cfg})
    j = JobWithoutSpark(config, now, outcomes)
    j._start_query(SimpleNamespace(name="db.t"))
    return j, now


TRANSIENT = "fluss_spark.errors.NetworkError: cannot reach tablet 0"


def test_transient_failures_restart_the_query_after_a_doubling_backoff(tmp_path):
    j, now = job(tmp_path, [TRANSIENT, TRANSIENT, None])
    j.poll()                                   # failed: restart planned in 2 s
    assert j.restarting and j.starts == 1 and j.errors["db.t"] == TRANSIENT
    now.advance(1_900)
    j.poll()
    assert j.starts == 1
    now.advance(200)
    j.poll()                                   # restarted
    assert j.starts == 2 and not j.restarting and not j.errors
    j.poll()                                   # that run failed too: 4 s this time
    assert j.restarting and j.errors["db.t"] == TRANSIENT
    now.advance(3_900)
    j.poll()
    assert j.starts == 2
    now.advance(200)
    doc = j.poll()                             # restarted; this run keeps going
    assert j.starts == 3 and not j.restarting and not j.errors
    assert doc["tables"]["db.t"] == {"error": None, "restarts": 2}


def test_the_job_fails_once_the_restart_budget_is_spent(tmp_path):
    j, now = job(tmp_path, [TRANSIENT] * 3, max_restarts=2)
    for _ in range(2):
        j.poll()
        now.advance(60_000)
        j.poll()
    with pytest.raises(TieringError, match="db.t.*NetworkError"):
        j.poll()
    assert j.starts == 3


def test_restarts_older_than_the_window_do_not_count(tmp_path):
    j, now = job(tmp_path, [TRANSIENT] * 3, max_restarts=1, restart_window_s=100)
    j.poll()
    now.advance(5_000)
    j.poll()                                   # the one allowed restart
    now.advance(200_000)                          # ... long ago when the next failure comes
    j.poll()
    assert j.restarting and j.starts == 2


def test_permanent_failures_fail_the_job_at_once(tmp_path):
    j, _ = job(tmp_path, ["fluss_spark.errors.KvSnapshotNotExist: snapshot 3 is gone"])
    with pytest.raises(TieringError, match="KvSnapshotNotExist"):
        j.poll()
    assert j.starts == 1 and not j.restarting


@pytest.mark.parametrize("summary, expected", [
    ("fluss_spark.errors.NetworkError: connection refused", True),
    ("fluss_spark.errors.LeaderNotAvailable: no live server", True),
    ("java.io.IOException: Failed to get broadcast_7_piece0", True),
    ("fluss_spark.errors.KvSnapshotNotExist: gone", False),
    ("fluss_spark.errors.ConfigError: bad option", False),
    ("fluss_spark.errors.TableNotExist: db.t", False),
    ("fluss_spark.tiering.lake.LakeError: manifest is corrupt", False),
])
def test_restartable_errors_named_in_spark_failure_text(summary, expected):
    assert restartable(Exception(f"[STREAM_FAILED] query failed\n{summary}")) is expected


def test_restartable_reads_the_retriable_attribute_of_the_error_itself():
    assert restartable(NetworkError("connection refused"))
    assert not restartable(KvSnapshotNotExist("snapshot 3 is gone"))
    # The class decides, whatever the message says.
    assert not restartable(KvSnapshotNotExist("fluss_spark.errors.NetworkError: retry"))
    try:
        try:
            raise RequestTimeout("no answer")
        except RequestTimeout as e:
            raise RuntimeError("the round failed") from e
    except RuntimeError as wrapped:
        assert restartable(wrapped)
    assert restartable(RuntimeError("an error of Spark's own"))


def test_a_sinks_own_error_decides_over_the_text_spark_reports(tmp_path):
    j, now = job(tmp_path, [Exception("fluss_spark.errors.NetworkError: as Spark reports it")])
    j.sinks["db.t"] = SimpleNamespace(failure=KvSnapshotNotExist("snapshot 3 is gone"))
    with pytest.raises(TieringError, match="table 'db.t'"):
        j.poll()
    assert not j.restarting and j.starts == 1


def test_negative_restart_settings_are_refused(tmp_path):
    with pytest.raises(ValueError, match="max_restarts"):
        TieringConfig(lake=tmp_path, bootstrap_servers="x:1", table_pattern=".*", max_restarts=-1)


def test_a_one_shot_run_waits_for_the_restarted_query(tmp_path):
    j, _ = job(tmp_path, [TRANSIENT, "done"], available_now=True, restart_backoff_s=0.0,
               poll_interval_s=0.0)
    polls = []
    j.run(on_poll=polls.append)
    assert j.starts == 2 and not j.errors and not j.restarting
    # Every poll's status reached on_poll (the round lines): the failure, then the restart.
    assert [p["tables"]["db.t"]["error"] for p in polls][:1] == [TRANSIENT]
    assert polls[-1]["tables"]["db.t"] == {"error": None, "restarts": 1}


def test_a_one_shot_run_ends_when_its_query_does_not_at_the_next_poll(tmp_path, monkeypatch):
    def no_sleep(seconds):
        raise AssertionError(f"the job slept {seconds} s instead of waiting on its query")
    monkeypatch.setattr(job_module.time, "sleep", no_sleep)
    j, _ = job(tmp_path, [None], available_now=True, poll_interval_s=3600.0)
    j.run()
    assert j.queries["db.t"].waited == 3600.0 and not j.errors


def test_stop_during_a_backoff_starts_nothing(tmp_path):
    j, now = job(tmp_path, [TRANSIENT])
    j.poll()
    now.advance(60_000)
    j.stop()
    assert j.starts == 1 and not j.restarting


def test_a_table_dropped_during_the_backoff_is_not_restarted(tmp_path):
    j, now = job(tmp_path, [TRANSIENT])
    j.poll()
    j.dropped.add("db.t")
    now.advance(60_000)
    j.poll()                                   # no TieringError: a dropped table is tolerated
    assert j.starts == 1 and j.errors["db.t"] == DROPPED and not j.restarting
