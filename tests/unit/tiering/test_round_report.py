"""A running tiering job's round lines and its per-table status on SIGUSR1 (no Spark)."""

from __future__ import annotations

import io
import os
import signal
import time

from fluss_spark.tiering.round_report import RoundReport, round_lines

NOON = time.mktime((2026, 11, 25, 12, 0, 5, 0, 0, -1))


def doc(**tables):
    return {"tables": {name: {"active": True, "lag": 0, "error": None, "restarts": 0, **t}
                       for name, t in tables.items()}}


def test_a_line_per_poll_in_which_tables_committed_a_round():
    out = io.StringIO()
    report = RoundReport(out, now=lambda: NOON)
    # Where the tables are when the job starts: rounds of an earlier run are not reported.
    report(doc(**{"db.a": {"batch_id": 3, "rows_tiered": 1_000}, "db.b": {"batch_id": None}}))
    report(doc(**{"db.a": {"batch_id": 3, "rows_tiered": 1_000}, "db.b": {"batch_id": None}}))
    assert out.getvalue() == ""
    report(doc(**{"db.a": {"batch_id": 4, "rows_tiered": 2_204, "lag": 7},
                  "db.b": {"batch_id": 0, "rows_tiered": 50_000, "active": False}}))
    assert out.getvalue() == ("12:00:05 round: db.a (batch 4), db.b (batch 0): 51,204 rows "
                              "tiered (52,204 in all), lag 7; 2 tables, 1 active\n")
    out.truncate(0)
    out.seek(0)
    report(doc(**{"db.a": {"batch_id": 5, "rows_tiered": 2_300, "lag": None},
                  "db.b": {"batch_id": 0, "rows_tiered": 50_000}}))
    assert out.getvalue() == ("12:00:05 round: db.a (batch 5): 96 rows tiered (52,300 in all), "
                              "lag unknown; 2 tables, 2 active\n")


def test_each_tables_status_once_after_a_request():
    out = io.StringIO()
    report = RoundReport(out, now=lambda: NOON)
    status = doc(**{"db.a": {"batch_id": 4, "rows_tiered": 2_204},
                    "db.b": {"batch_id": None, "active": False, "error": "table dropped",
                             "restarts": 1}})
    report.request()
    report(status)
    report(status)      # asked once, shown once
    assert out.getvalue() == (
        "12:00:05 status of 2 tables:\n"
        "  db.a: batch 4, 2,204 rows tiered, lag 0, active, 0 restarts\n"
        "  db.b: batch -, 0 rows tiered, lag 0, error: table dropped, 1 restarts\n")


def test_sigusr1_asks_for_the_status_while_the_job_runs():
    out = io.StringIO()
    before = signal.getsignal(signal.SIGUSR1)
    with round_lines(out) as report:
        assert out.getvalue() == (f"a line per round; each table's status: kill -USR1 "
                                  f"{os.getpid()}\n")
        os.kill(os.getpid(), signal.SIGUSR1)    # the handler runs before the next bytecode
        report(doc(**{"db.a": {"batch_id": 1, "rows_tiered": 5}}))
    assert "status of 1 table:\n  db.a: batch 1, 5 rows tiered" in out.getvalue()
    assert signal.getsignal(signal.SIGUSR1) == before
