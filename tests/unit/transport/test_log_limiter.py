"""Refusals and evictions are logged at most once per client address and interval."""

from __future__ import annotations

import logging

from fluss_spark.transport.log_limiter import LogLimiter


def test_one_line_per_address_per_interval_then_a_count_of_what_was_left_out(caplog, monkeypatch):
    now = [100.0]
    monkeypatch.setattr("fluss_spark.transport.log_limiter.time.monotonic", lambda: now[0])
    limiter = LogLimiter(interval_s=10, max_addresses=3)
    with caplog.at_level(logging.WARNING, "fluss_spark.transport.server"):
        for _ in range(1000):
            limiter.warning("10.0.0.1", "refused %s", "10.0.0.1")
        limiter.warning("10.0.0.2", "refused %s", "10.0.0.2")
        now[0] += 10
        limiter.warning("10.0.0.1", "refused %s", "10.0.0.1")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["refused 10.0.0.1", "refused 10.0.0.2",
                     "refused 10.0.0.1 (999 similar lines about 10.0.0.1 left out in the last "
                     "10s)"]


def test_past_the_remembered_addresses_all_others_share_one_line(caplog, monkeypatch):
    monkeypatch.setattr("fluss_spark.transport.log_limiter.time.monotonic", lambda: 5.0)
    limiter = LogLimiter(interval_s=10, max_addresses=2)
    with caplog.at_level(logging.WARNING, "fluss_spark.transport.server"):
        for i in range(500):
            limiter.warning(f"10.0.{i // 256}.{i % 256}", "refused")
    assert len(caplog.records) == 3         # two addresses, then one line for all the others
    assert len(limiter._last) == 3
