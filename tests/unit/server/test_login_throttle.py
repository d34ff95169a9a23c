"""Failed SASL logins are limited per address and per username, refused at once, logged sparsely."""

from __future__ import annotations

import logging
import time

import pytest

from fluss_spark.config import parse_server_options
from fluss_spark.errors import AuthenticationFailed
from fluss_spark.protocol import messages as m
from fluss_spark.server import login_throttle
from fluss_spark.server.login_throttle import LoginThrottle
from fluss_spark.server.security import Security
from fluss_spark.transport.client import RpcConnection
from fluss_spark.transport.server import RpcServer
from fluss_spark.testing.clock import FakeClock


def _token(user: str, password: str) -> bytes:
    return b"\0" + user.encode() + b"\0" + password.encode()


@pytest.fixture
def now():
    return FakeClock(100_000)


@pytest.fixture
def security(tmp_path, now):
    users = tmp_path / "users"
    users.write_text("alice:right\ninternal:secret\nbob:other\n")
    sec = Security.from_options(parse_server_options([
        "security.protocol=SASL", f"security.sasl.users-file={users}",
        "security.login.max-failures-per-address=3", "security.login.max-failures-per-user=5",
        "security.login.failure-window=10s", "security.login.lockout=30s",
        "security.login.log-interval=60s"]))
    assert sec.throttle is not None
    sec.throttle.clock = now.seconds
    return sec


def _fail(sec, peer, user="alice", password="wrong"):
    with pytest.raises(AuthenticationFailed) as e:
        sec.authenticate("PLAIN", _token(user, password), peer)
    return e.value


def _refused(error) -> bool:
    return str(error).startswith("too many failed logins")


def test_an_address_is_locked_out_after_its_failures_and_even_the_right_password_is_refused(
        security, now):
    for _ in range(3):
        assert not _refused(_fail(security, "10.0.0.1"))
    refused = _fail(security, "10.0.0.1", password="right")
    assert _refused(refused)
    assert "too many failed logins from this client address" in str(refused)
    assert "30s" in str(refused)
    # Another address is not affected, and a success there clears nothing of 10.0.0.1.
    assert security.authenticate("PLAIN", _token("bob", "other"), "10.0.0.2") == "bob"
    now.advance(29_000)
    assert _refused(_fail(security, "10.0.0.1", password="right"))
    now.advance(2_000)                            # the cool-down is over
    assert security.authenticate("PLAIN", _token("alice", "right"), "10.0.0.1") == "alice"


def test_a_username_is_locked_out_whatever_the_address(security, now):
    for i in range(5):
        _fail(security, f"10.0.1.{i}", user="bob")   # one failure per address: under its limit
    refused = _fail(security, "10.0.2.1", user="bob", password="other")
    assert _refused(refused) and "this username" in str(refused)
    assert security.authenticate("PLAIN", _token("alice", "right"), "10.0.2.1") == "alice"


def test_failures_outside_the_window_do_not_count_and_a_success_resets(security, now):
    _fail(security, "10.0.0.9")
    _fail(security, "10.0.0.9")
    now.advance(11_000)                           # past the 10s window
    _fail(security, "10.0.0.9")
    _fail(security, "10.0.0.9")
    assert security.authenticate("PLAIN", _token("alice", "right"), "10.0.0.9") == "alice"
    _fail(security, "10.0.0.9")
    _fail(security, "10.0.0.9")                     # 2 since the success: not locked
    assert security.authenticate("PLAIN", _token("alice", "right"), "10.0.0.9") == "alice"


def test_failed_logins_are_summarised_once_per_address_and_interval(security, now, caplog):
    with caplog.at_level(logging.INFO, logger=login_throttle.__name__):
        for _ in range(50):
            _fail(security, "10.0.0.7", password="guess")
        now.advance(61_000)
        _fail(security, "10.0.0.7")
    lines = [r.getMessage() for r in caplog.records if r.name == login_throttle.__name__]
    assert len(lines) == 2, lines
    assert lines[0].startswith("failed logins from 10.0.0.7: 1 failed")
    assert "3 failed, 47 refused" in lines[1] and "'alice'" in lines[1]


def test_tracking_is_bounded(monkeypatch):
    monkeypatch.setattr(login_throttle, "MAX_TRACKED", 100)
    t = LoginThrottle(max_failures_per_address=3, max_failures_per_user=3, window_s=60,
                      lockout_s=60, log_interval_s=60)
    for i in range(1000):
        t.failed(f"10.1.{i // 256}.{i % 256}", f"user{i}")
    assert len(t._addresses) <= 100 and len(t._users) <= 100 and len(t._logs) <= 100


def test_a_locked_out_client_is_refused_at_once_over_the_wire(tmp_path):
    # ~5,000 failed logins a second were allowed before, each one logged.
    users = tmp_path / "users"
    users.write_text("alice:right\ninternal:secret\n")
    sec = Security.from_options(parse_server_options([
        "security.protocol=SASL", f"security.sasl.users-file={users}",
        "security.login.max-failures-per-address=5"]))
    srv = RpcServer("127.0.0.1", 0, role="coordinator", server_id=1, security=sec)
    srv.register(m.ListTablesRequest, lambda req: m.ListTablesResponse(()))
    srv.start()
    try:
        def login(password):
            conn = RpcConnection(srv.host, srv.port, credentials=("alice", password),
                                 timeout_s=5)
            try:
                return conn.call(m.ListTablesRequest())
            finally:
                conn.close()
        for _ in range(5):
            with pytest.raises(AuthenticationFailed, match="wrong username or password"):
                login("wrong")
        started = time.monotonic()
        for _ in range(20):
            with pytest.raises(AuthenticationFailed, match="too many failed logins"):
                login("right")
        assert time.monotonic() - started < 5, "refusals must not be delayed by sleeping"
        assert sec.throttle is not None and sec.throttle.stats["refused"] == 20
    finally:
        srv.stop()
