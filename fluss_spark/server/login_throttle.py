"""Throttling of failed SASL logins, per client address and per username.

Before, a client could try ~5,000 passwords a second, each failure logged. Now each failed login
counts against its address and its username for ``security.login.failure-window``; after
``security.login.max-failures-per-address`` failures from one address, or
``security.login.max-failures-per-user`` as one username, logins from that address or as that
username are refused at once for ``security.login.lockout`` -- the password is not even checked,
so a lockout cannot be used to go on guessing -- with an error that says so and when to retry. A
successful login clears the failures of its address and username.

Nothing here sleeps: a refusal is immediate, so an attacker ties up neither the event loop nor a
handler thread (the transport closes the connection after any failed login). Log lines are
rate-limited: at most one per client address per ``security.login.log-interval``, counting the
failures and refusals since the last one. State is bounded (``MAX_TRACKED`` addresses and
usernames); the oldest entries are forgotten first.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from fluss_spark import config
from fluss_spark.errors import AuthenticationFailed

log = logging.getLogger(__name__)

#: Addresses and usernames tracked at most (each); past it the least recently seen are dropped.
MAX_TRACKED = 50_000


@dataclass
class _Record:
    failures: collections.deque = field(default_factory=collections.deque)  # monotonic times
    locked_until: float = 0.0
    seen: float = 0.0


@dataclass
class _LogState:
    last: float = float("-inf")
    failed: int = 0
    refused: int = 0
    users: set = field(default_factory=set)


class LoginThrottle:
    """Counts failed logins per address and per username and refuses locked-out ones."""

    def __init__(self, *, max_failures_per_address: int, max_failures_per_user: int,
                 window_s: float, lockout_s: float, log_interval_s: float,
                 clock: Callable[[], float] = time.monotonic):
        self.max_per_address = max_failures_per_address
        self.max_per_user = max_failures_per_user
        self.window_s, self.lockout_s, self.log_interval_s = window_s, lockout_s, log_interval_s
        self.clock = clock
        self._lock = threading.Lock()
        self._addresses: collections.OrderedDict[str, _Record] = collections.OrderedDict()
        self._users: collections.OrderedDict[str, _Record] = collections.OrderedDict()
        self._logs: collections.OrderedDict[str, _LogState] = collections.OrderedDict()
        #: Counters for tests and operators.
        self.stats: collections.Counter = collections.Counter()

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> "LoginThrottle":
        def get(opt):
            return options.get(opt.key, opt.default)
        return cls(max_failures_per_address=get(config.SECURITY_LOGIN_MAX_FAILURES_PER_ADDRESS),
                   max_failures_per_user=get(config.SECURITY_LOGIN_MAX_FAILURES_PER_USER),
                   window_s=get(config.SECURITY_LOGIN_FAILURE_WINDOW) / 1000,
                   lockout_s=get(config.SECURITY_LOGIN_LOCKOUT) / 1000,
                   log_interval_s=get(config.SECURITY_LOGIN_LOG_INTERVAL) / 1000)

    # -- the three calls of an authentication ---------------------------------------------------
    def check(self, address: str | None, user: str | None) -> None:
        """Raise AuthenticationFailed at once while ``address`` or ``user`` is locked out."""
        now = self.clock()
        with self._lock:
            for kind, key, table in (("client address", address, self._addresses),
                                     ("username", user, self._users)):
                rec = table.get(key) if key is not None else None
                if rec is not None and rec.locked_until > now:
                    self.stats["refused"] += 1
                    self._note(address, user, now, refused=True)
                    wait = max(1, int(rec.locked_until - now + 0.999))
                    raise AuthenticationFailed(
                        f"too many failed logins from this {kind}: logins are refused for "
                        f"{wait}s more (security.login.lockout); try again later")

    def failed(self, address: str | None, user: str | None) -> None:
        """Count a failed login; lock the address or username out when it reached its limit."""
        now = self.clock()
        with self._lock:
            self.stats["failed"] += 1
            for key, table, limit in ((address, self._addresses, self.max_per_address),
                                      (user, self._users, self.max_per_user)):
                if key is None:
                    continue
                rec = self._record(table, key, now)
                rec.failures.append(now)
                while rec.failures and rec.failures[0] <= now - self.window_s:
                    rec.failures.popleft()
                if len(rec.failures) >= limit:
                    rec.locked_until = now + self.lockout_s
                    rec.failures.clear()
                    self.stats["lockouts"] += 1
            self._note(address, user, now, refused=False)

    def succeeded(self, address: str | None, user: str | None) -> None:
        """A successful login clears the failures of its address and username."""
        with self._lock:
            if address is not None:
                self._addresses.pop(address, None)
            if user is not None:
                self._users.pop(user, None)

    # -- internals ------------------------------------------------------------------------------
    def _record(self, table: collections.OrderedDict, key: str, now: float) -> _Record:
        rec = table.get(key)
        if rec is None:
            rec = table[key] = _Record()
            while len(table) > MAX_TRACKED:
                table.popitem(last=False)
        else:
            table.move_to_end(key)
        rec.seen = now
        return rec

    def _note(self, address: str | None, user: str | None, now: float, *, refused: bool) -> None:
        """Count for the address's summary line; log it when its interval has passed."""
        key = address or "?"
        state = self._logs.get(key)
        if state is None:
            state = self._logs[key] = _LogState()
            while len(self._logs) > MAX_TRACKED:
                self._logs.popitem(last=False)
        if refused:
            state.refused += 1
        else:
            state.failed += 1
        if user is not None and len(state.users) < 5:
            state.users.add(user)
        if now - state.last < self.log_interval_s:
            return
        users = ", ".join(sorted(repr(u) for u in state.users)) or "none readable"
        locked = self._addresses.get(key)
        lock_note = (f"; locked out for {locked.locked_until - now:.0f}s more"
                     if locked is not None and locked.locked_until > now else "")
        log.warning("failed logins from %s: %d failed, %d refused while locked out (usernames "
                    "%s) since the last report%s", key, state.failed, state.refused, users,
                    lock_note)
        state.last, state.failed, state.refused, state.users = now, 0, 0, set()
