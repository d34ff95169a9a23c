"""SASL PLAIN authentication and the authorization rules of the servers.

A server with ``security.protocol=SASL`` answers nothing but API_VERSIONS and AUTHENTICATE on a
connection until it authenticated (``AUTHENTICATE {mechanism: "PLAIN", token:
b"\\0username\\0password"}``, as in RFC 4616). The principal of the connection is then known to
every handler of its requests (``current_principal()``). With PLAINTEXT (the default, like a
Fluss PLAINTEXT listener) nobody authenticates and everything is allowed.

TLS (``security.ssl.enabled``) is independent of the protocol: alone it encrypts; with SASL the
login runs inside TLS. A server calling another (``internal_tls``) then uses TLS too.

Rules (``authorize_*``): committing KV snapshots needs the internal principal
(``security.internal.username``), which the servers use among themselves; a lease may be
renewed, released or dropped by the principal that created it or a super user. Everything else
is decided by ACLs (``server/authorizer.py``), which super users bypass.
"""

from __future__ import annotations

import hmac
import os
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from fluss_spark import config
from fluss_spark.errors import AuthenticationFailed, AuthorizationFailed, ConfigError
from fluss_spark.server.login_throttle import LoginThrottle
from fluss_spark.transport.dispatch import current_principal
from fluss_spark.transport.tls import TlsClientConfig, server_context

def read_users_file(path: str | Path) -> dict[str, str]:
    """``username:password`` lines (blank lines and ``#`` comments ignored) -> {user: password}."""
    users = {}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise ConfigError(f"cannot read the SASL users file {path}: {e.strerror}") from None
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user or not password:
            raise ConfigError(f"{path} line {n}: expected username:password")
        users[user] = password
    return users


@dataclass(frozen=True)
class Security:
    """A server's authentication and authorization settings."""

    sasl: bool = False
    users: Mapping[str, str] = field(default_factory=dict, repr=False)
    super_users: frozenset[str] = frozenset()
    internal_user: str = "internal"
    #: Failed logins per address and username (None: no throttling, e.g. PLAINTEXT).
    throttle: LoginThrottle | None = field(default=None, compare=False, repr=False)
    #: The listener's TLS context (None: no TLS).
    tls: ssl.SSLContext | None = field(default=None, compare=False, repr=False)
    #: How this server checks another server's certificate when it calls it (None: no TLS).
    internal_tls: TlsClientConfig | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> "Security":
        def get(opt):
            return options.get(opt.key, opt.default)
        tls, internal_tls = _tls_from_options(get)
        if get(config.SECURITY_PROTOCOL) != "SASL":
            return cls(tls=tls, internal_tls=internal_tls)
        users_file = get(config.SASL_USERS_FILE)
        if not users_file:
            raise ConfigError("security.protocol=SASL needs security.sasl.users-file")
        users = read_users_file(users_file)
        internal = get(config.INTERNAL_USERNAME)
        if internal not in users:
            raise ConfigError(f"the internal principal {internal!r} (security.internal.username) "
                              f"has no password in {users_file}")
        supers = frozenset(u.strip() for u in get(config.SUPER_USERS).split(",") if u.strip())
        return cls(True, users, supers, internal, LoginThrottle.from_options(options), tls,
                   internal_tls)

    @property
    def internal_credentials(self) -> tuple[str, str] | None:
        """What this server presents when it calls another server (None: PLAINTEXT)."""
        return (self.internal_user, self.users[self.internal_user]) if self.sasl else None

    def authenticate(self, mechanism: Any, token: Any, peer: str | None = None) -> str:
        """The principal for a SASL PLAIN token, or AuthenticationFailed (never says which of
        username and password was wrong). ``peer``: the client address; failures count
        against it and the username, and a locked-out one is refused without a check
        (``login_throttle``)."""
        claimed = _plain_user(token)
        if self.throttle is not None:
            self.throttle.check(peer, claimed)      # a refusal is not counted as a failure
        try:
            user = self._check_plain(mechanism, token)
        except AuthenticationFailed:
            if self.throttle is not None:
                self.throttle.failed(peer, claimed)
            raise
        if self.throttle is not None:
            self.throttle.succeeded(peer, user)
        return user

    def _check_plain(self, mechanism: Any, token: Any) -> str:
        if mechanism != "PLAIN":
            raise AuthenticationFailed(f"SASL mechanism {mechanism!r} is not supported; use PLAIN")
        if not isinstance(token, bytes):
            raise AuthenticationFailed("the SASL PLAIN token must be bytes")
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("malformed SASL PLAIN token")
        try:
            user, password = parts[1].decode(), parts[2].decode()
        except UnicodeDecodeError:
            raise AuthenticationFailed("malformed SASL PLAIN token") from None
        expected = self.users.get(user)
        # Compare in constant time, and as long for an unknown user as for a wrong password.
        ok = hmac.compare_digest(password.encode(), (expected or os.urandom(16).hex()).encode())
        if expected is None or not ok:
            raise AuthenticationFailed("authentication failed: wrong username or password")
        return user

    # -- authorization ----------------------------------------------------------------------------
    def is_super(self, principal: str | None) -> bool:
        return not self.sasl or principal in self.super_users or principal == self.internal_user

    def authorize_super(self, action: str) -> None:
        who = current_principal()
        if not self.is_super(who):
            raise AuthorizationFailed(f"principal {who!r} may not {action}: that needs a super "
                                      f"user (super.users)")

    def authorize_internal(self, action: str) -> None:
        who = current_principal()
        if self.sasl and who != self.internal_user:
            raise AuthorizationFailed(f"principal {who!r} may not {action}: only the servers' "
                                      f"internal principal may")

    def authorize_owner(self, owner: str | None, action: str) -> None:
        """The principal that created something (``owner``), or a super user."""
        who = current_principal()
        if self.sasl and owner is not None and who != owner and not self.is_super(who):
            raise AuthorizationFailed(f"principal {who!r} may not {action}: it belongs to "
                                      f"{owner!r} (or ask a super user)")


def _tls_from_options(get) -> tuple[ssl.SSLContext | None, TlsClientConfig | None]:
    """The listener's TLS context and how servers check each other (None, None: no TLS)."""
    if not get(config.SSL_ENABLED):
        return None, None
    cert, key = get(config.SSL_CERTIFICATE_FILE), get(config.SSL_KEY_FILE)
    if not cert or not key:
        raise ConfigError("security.ssl.enabled=true needs security.ssl.certificate-file and "
                          "security.ssl.key-file (PEM files of the server's certificate and key)")
    internal = TlsClientConfig(get(config.SSL_CA_FILE) or None, get(config.SSL_VERIFY_HOSTNAME))
    internal.context()          # a missing or unreadable CA file stops the server at start
    return server_context(cert, key), internal


def _plain_user(token: Any) -> str | None:
    """The username of a SASL PLAIN token, if one can be read (for throttling only)."""
    if not isinstance(token, bytes):
        return None
    parts = token.split(b"\0")
    if len(parts) != 3:
        return None
    try:
        return parts[1].decode()[:256] or None
    except UnicodeDecodeError:
        return None
