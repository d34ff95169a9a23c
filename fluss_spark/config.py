"""Options declared once: key, type, default and doc, parsed and validated into frozen values.

Three groups use this: table properties (``kv.snapshot.interval`` ...), server settings
(``kv.scanner.ttl`` ...) and, in ``fluss_spark.connector.options``, the Spark source options.
Durations accept ``500ms``, ``30s``, ``10min``, ``1h``, ``1d`` or a bare number of milliseconds.
Sizes accept ``10mb``, ``64kb`` or a bare number of bytes.
"""

from __future__ import annotations

import argparse
import math

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from fluss_spark.errors import ConfigError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|min|m|h|d|day|days)?\s*$", re.IGNORECASE)
_DURATION_MS = {None: 1, "ms": 1, "s": 1000, "sec": 1000, "min": 60_000, "m": 60_000,
                "h": 3_600_000, "d": 86_400_000, "day": 86_400_000, "days": 86_400_000}
_SIZE = re.compile(r"^\s*(\d+)\s*(b|kb|k|mb|m|gb|g)?\s*$", re.IGNORECASE)
_SIZE_BYTES = {None: 1, "b": 1, "k": 1024, "kb": 1024, "m": 1024**2, "mb": 1024**2,
               "g": 1024**3, "gb": 1024**3}


#: Most buckets a table may have: far above what one coordinator is meant to manage.
MAX_BUCKETS = 1024

DAY_MS = 86_400_000
#: Longest duration anywhere (ten years): bounds every duration option and property.
MAX_DURATION_MS = 3650 * DAY_MS
#: Longest KV snapshot lease (a year), for the coordinator and the Spark source alike.
MAX_LEASE_DURATION_MS = 365 * DAY_MS


def parse_duration_ms(value: Any, key: str = "duration") -> int:
    """'30s' -> 30000; a bare number is milliseconds; at most ``MAX_DURATION_MS``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value != value or value in (float("inf"), float("-inf")):
            raise ConfigError(f"{key}: duration {value!r} is not a number")
        ms = int(value)
    else:
        m = _DURATION.match(str(value))
        if not m:
            raise ConfigError(f"{key}: cannot parse duration {value!r}; use e.g. 500ms, 30s, "
                              "10min, 1h, 1d")
        unit = m.group(2).lower() if m.group(2) else None
        ms = int(float(m.group(1)) * _DURATION_MS[unit])
    if ms < 0:
        raise ConfigError(f"{key}: duration must not be negative, got {value!r}")
    if ms > MAX_DURATION_MS:
        raise ConfigError(f"{key}: duration {value!r} is longer than the maximum, "
                          f"{MAX_DURATION_MS // DAY_MS}d")
    return ms


def parse_size_bytes(value: Any, key: str = "size") -> int:
    """'10mb' -> 10485760; a bare number is bytes."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise ConfigError(f"{key}: cannot parse size {value!r}; use e.g. 64kb, 10mb, 1gb")
    unit = m.group(2).lower() if m.group(2) else None
    return int(m.group(1)) * _SIZE_BYTES[unit]


def parse_bool(value: Any, key: str = "flag") -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"{key}: expected true or false, got {value!r}")


def parse_int(value: Any, key: str = "value") -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{key}: expected an integer, got {value!r}") from None


@dataclass(frozen=True)
class Option:
    """One declared option: its key, parser, default and one-line doc."""

    key: str
    parse: Callable[[Any, str], Any]
    default: Any
    doc: str
    minimum: int | None = None
    maximum: int | None = None

    def get(self, values: Mapping[str, Any]) -> Any:
        raw = values.get(self.key)
        if raw is None:
            return self.default
        value = self.parse(raw, self.key)
        if self.minimum is not None and value < self.minimum:
            raise ConfigError(f"{self.key} must be at least {self.minimum}, got {raw!r}")
        if self.maximum is not None and value > self.maximum:
            raise ConfigError(f"{self.key} must be at most {self.maximum}, got {raw!r}")
        return value


def duration(key: str, default: str, doc: str, minimum: int | None = None,
             maximum: int | None = None) -> Option:
    return Option(key, parse_duration_ms, parse_duration_ms(default, key), doc, minimum, maximum)


def size(key: str, default: str, doc: str, maximum: int | None = None) -> Option:
    return Option(key, parse_size_bytes, parse_size_bytes(default, key), doc, 1, maximum)


def integer(key: str, default: int | None, doc: str, minimum: int | None = None) -> Option:
    return Option(key, parse_int, default, doc, minimum)


def choice(key: str, choices: tuple[str, ...], default: str | None, doc: str) -> Option:
    """An option taking one of ``choices`` (any case); the value is the choice as declared."""
    by_lower = {c.lower(): c for c in choices}

    def parse(value: Any, k: str) -> str:
        text = str(value).strip().lower()
        if text not in by_lower:
            raise ConfigError(f"option {k!r}: {value!r} is not one of {', '.join(choices)}")
        return by_lower[text]
    return Option(key, parse, default, doc)


def string(key: str, default: str | None, doc: str) -> Option:
    return Option(key, lambda v, k: str(v).strip(), default, doc)


def boolean(key: str, default: bool, doc: str) -> Option:
    return Option(key, parse_bool, default, doc)


def bounded(kind: type, low, high):
    """An argparse ``type=`` for ``kind`` (int or float) in ``low..high``: anything else is a
    one-line error naming the value and the range (never a traceback)."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if (isinstance(value, float) and not math.isfinite(value)) or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} is outside {low}..{high}")
        return value
    return parse


def check_known(values: Mapping[str, Any], options: list[Option], what: str) -> None:
    """Refuse keys nobody declared, naming the closest declared ones."""
    known = {o.key for o in options}
    unknown = sorted(k for k in values if k not in known)
    if unknown:
        raise ConfigError(f"unknown {what} {', '.join(map(repr, unknown))}; known: "
                          f"{', '.join(sorted(known))}")


# -- table properties -------------------------------------------------------------------------
KV_SNAPSHOT_INTERVAL = duration("kv.snapshot.interval", "10min",
                                "How often each bucket of a PK table takes a KV snapshot "
                                "(0 disables periodic snapshots).")
KV_SNAPSHOT_NUM_RETAINED = integer("kv.snapshot.num-retained", 2,
                                   "How many of a bucket's newest KV snapshots are retained.",
                                   minimum=1)
TABLE_LOG_TTL = duration("table.log.ttl", "7d",
                         "Changelog records older than this may be deleted (0 keeps everything).")
AUTO_PARTITION_ENABLED = boolean("table.auto-partition.enabled", False,
                                 "Whether the coordinator creates and expires the partitions of "
                                 "this table by time.")
AUTO_PARTITION_KEY = string("table.auto-partition.key", None,
                            "The time partition key, required when a table has several "
                            "partition keys.")
AUTO_PARTITION_TIME_UNIT = choice("table.auto-partition.time-unit",
                                  ("YEAR", "QUARTER", "MONTH", "DAY", "HOUR"), "DAY",
                                  "Time span of one auto partition; its values are yyyy, yyyyQ, "
                                  "yyyyMM, yyyyMMdd or yyyyMMddHH.")
AUTO_PARTITION_NUM_PRECREATE = integer("table.auto-partition.num-precreate", 2,
                                       "Partitions created ahead, the current one included.",
                                       minimum=0)
AUTO_PARTITION_NUM_RETENTION = integer("table.auto-partition.num-retention", 7,
                                       "Past partitions kept; older auto-partition values are "
                                       "dropped.", minimum=0)
AUTO_PARTITION_TIME_ZONE = string("table.auto-partition.time-zone", "UTC",
                                  "Time zone (IANA name) the partition values are computed in.")
AUTO_PARTITION_OPTIONS = [AUTO_PARTITION_ENABLED, AUTO_PARTITION_KEY, AUTO_PARTITION_TIME_UNIT,
                          AUTO_PARTITION_NUM_PRECREATE, AUTO_PARTITION_NUM_RETENTION,
                          AUTO_PARTITION_TIME_ZONE]
TABLE_PROPERTIES = [KV_SNAPSHOT_INTERVAL, KV_SNAPSHOT_NUM_RETAINED, TABLE_LOG_TTL,
                    *AUTO_PARTITION_OPTIONS]


def validate_table_properties(props: Mapping[str, str]) -> dict[str, str]:
    """Check table properties and return them as strings (stored as given)."""
    check_known(props, TABLE_PROPERTIES, "table property")
    for opt in TABLE_PROPERTIES:
        opt.get(props)
    return {str(k): str(v) for k, v in props.items()}


# -- server settings --------------------------------------------------------------------------
LEASE_EXPIRATION_CHECK_INTERVAL = duration(
    "kv.snapshot.lease.expiration-check-interval", "1min",
    "How often the coordinator removes expired KV snapshot leases.", minimum=1)
AUTO_PARTITION_CHECK_INTERVAL = duration(
    "auto-partition.check.interval", "10min",
    "How often the coordinator creates the coming partitions and drops the expired ones of "
    "auto-partitioned tables (also at once when a table is created).", minimum=1)
SNAPSHOT_MIGRATION_PAUSE = duration(
    "kv.snapshot.migration.pause", "0ms",
    "Pause between two steps (128 buckets each) of the coordinator's background move of layout "
    "v1 KV snapshot znodes into the snapshot index; spreads the move's ZooKeeper load.",
    minimum=0)
SCANNER_TTL = duration("kv.scanner.ttl", "10min",
                       "An idle scan session is closed after this long.", minimum=1)
SCANNER_EXPIRATION_INTERVAL = duration("kv.scanner.expiration-interval", "30s",
                                       "How often idle scan sessions are evicted.", minimum=1)
SCANNER_MAX_PER_BUCKET = integer("kv.scanner.max-per-bucket", 8,
                                 "Open scan sessions allowed per bucket.", minimum=1)
SCANNER_MAX_PER_SERVER = integer("kv.scanner.max-per-server", 200,
                                 "Open scan sessions allowed per tablet server.", minimum=1)
SCANNER_MAX_BATCH_SIZE = size("kv.scanner.max-batch-size", "10mb",
                              "Largest batch a scan session returns; larger requests are clamped.")
LOG_SEGMENT_BYTES = size("log.segment.bytes", "64mb", "Size at which a changelog segment rolls.")
LOG_RETENTION_CHECK_INTERVAL = duration("log.retention.check-interval", "1min",
                                        "How often expired changelog segments are deleted.",
                                        minimum=1)
ZOOKEEPER_SESSION_TIMEOUT = duration("zookeeper.client.session-timeout", "10s",
                                     "ZooKeeper session timeout of a server; a connection lost "
                                     "for shorter resumes the same session.", minimum=1000)
RPC_MAX_REQUEST_SIZE = size("rpc.max-request-size", "32mb",
                            "Largest request frame a server reads; a larger announced length "
                            "closes the connection before anything is allocated (at most 1gb).",
                            maximum=1 << 30)
RPC_ARROW_MAX_BATCH_BYTES = size(
    "rpc.arrow.max-decoded-batch-size", "64mb",
    "Largest decoded (uncompressed) size of one Arrow record batch in a request; a larger one "
    "is refused (RECORD_TOO_LARGE) from its header, before anything is decompressed.")
RPC_ARROW_MAX_REQUEST_BYTES = size(
    "rpc.arrow.max-decoded-request-size", "256mb",
    "Largest decoded (uncompressed) size of all Arrow record batches of one request; checked "
    "from the headers, before anything is decompressed.")
RPC_ARROW_MAX_REQUEST_ROWS = integer(
    "rpc.arrow.max-request-rows", 8_000_000,
    "Most rows the Arrow record batches of one request may hold (and most values of any one "
    "column); checked from the headers, before anything is decoded.", minimum=1)
RPC_MAX_CONNECTIONS = integer("rpc.max-connections", 1000,
                              "Open client connections a server accepts; more are closed at once.",
                              minimum=1)
RPC_MAX_CONNECTIONS_PER_IP = integer("rpc.max-connections-per-ip", 500,
                                     "Open connections a server accepts from one client address.",
                                     minimum=1)
RPC_IDLE_TIMEOUT = duration("rpc.connection.idle-timeout", "10min",
                            "A connection with no request for this long is closed (clients "
                            "reconnect).", minimum=1000)
RPC_READ_TIMEOUT = duration("rpc.request.read-timeout", "30s",
                            "A request not read in full this long after its first byte closes "
                            "its connection (a deadline for the whole request).", minimum=100)
RPC_HANDLER_THREADS = integer("rpc.handler-threads", 32,
                              "Threads that run request handlers (requests of one connection "
                              "run in order).", minimum=1)
RPC_WRITE_TIMEOUT = duration("rpc.response.write-timeout", "30s",
                             "A reply the client has not read in full this long after it was "
                             "ready closes its connection (no handler thread waits for it).",
                             minimum=100)
RPC_MAX_UNSENT_BYTES = size("rpc.response.max-unsent-bytes", "256mb",
                            "Reply bytes all connections together may leave unread; past it the "
                            "connections whose replies have waited longest are closed.")
RPC_LOCAL_SOCKET = boolean("rpc.local-socket.enabled", True,
                           "Plaintext servers on Linux also listen on an abstract Unix socket "
                           "named for their address and port; clients on the same host use it "
                           "instead of TCP (faster scans; same protocol, authentication, limits "
                           "and ACLs).")
RPC_AUTH_TIMEOUT = duration("rpc.authentication.timeout", "10s",
                            "With SASL or TLS: a connection that has not finished its TLS "
                            "handshake and authenticated this long after it opened is closed.",
                            minimum=100)
RPC_UNAUTH_MAX_REQUEST_SIZE = size("rpc.unauthenticated.max-request-size", "64kb",
                                   "With SASL: largest request frame read before a connection "
                                   "authenticated; a larger announced length closes it.",
                                   maximum=1 << 30)
RPC_UNAUTH_MAX_CONNECTIONS = integer("rpc.unauthenticated.max-connections", 256,
                                     "With SASL or TLS: connections not yet authenticated; past "
                                     "it the oldest of the address holding most of them is "
                                     "closed.",
                                     minimum=1)
RPC_UNAUTH_MAX_CONNECTIONS_PER_IP = integer("rpc.unauthenticated.max-connections-per-ip", 64,
                                            "With SASL or TLS: connections not yet "
                                            "authenticated from one client address; more are "
                                            "closed at once.",
                                            minimum=1)
ZOOKEEPER_DIGEST_FILE = string("zookeeper.auth.digest-file", None,
                               "File holding 'username:password': the servers authenticate to "
                               "ZooKeeper with it (digest) and only they may change /fluss "
                               "(everyone may read).")
SECURITY_PROTOCOL = choice("security.protocol", ("PLAINTEXT", "SASL"), "PLAINTEXT",
                           "PLAINTEXT (no authentication) or SASL (every client authenticates "
                           "with SASL PLAIN before any other request).")
SASL_MECHANISM = choice("security.sasl.mechanism", ("PLAIN",), "PLAIN",
                        "The SASL mechanism servers accept: PLAIN (username and password).")
SASL_USERS_FILE = string("security.sasl.users-file", None,
                         "File of 'username:password' lines: the principals a SASL server "
                         "accepts (keep it private: mode 600).")
SSL_ENABLED = boolean("security.ssl.enabled", False,
                      "The servers' listeners speak TLS (with SASL: the login runs inside TLS); "
                      "needs security.ssl.certificate-file and security.ssl.key-file.")
SSL_CERTIFICATE_FILE = string("security.ssl.certificate-file", None,
                              "PEM file of the server's certificate (and any intermediate CA "
                              "certificates) that TLS clients verify.")
SSL_KEY_FILE = string("security.ssl.key-file", None,
                      "PEM file of the private key of security.ssl.certificate-file (keep it "
                      "private: mode 600).")
SSL_CA_FILE = string("security.ssl.ca-file", None,
                     "PEM file of the CA certificates a server trusts when it calls another "
                     "server over TLS (default: the system's trust store).")
SSL_VERIFY_HOSTNAME = boolean("security.ssl.verify-hostname", True,
                              "A server calling another over TLS checks that the certificate "
                              "names the address it connects to.")
SUPER_USERS = string("super.users", "",
                     "Comma-separated principals allowed everything: create and drop tables, "
                     "release or drop any lease.")
INTERNAL_USERNAME = string("security.internal.username", "internal",
                           "The principal servers use to call each other (its password is in "
                           "the users file); only it may commit KV snapshots.")
SECURITY_LOGIN_MAX_FAILURES_PER_ADDRESS = integer(
    "security.login.max-failures-per-address", 10,
    "With SASL: failed logins from one client address within security.login.failure-window "
    "after which its logins are refused for security.login.lockout.", minimum=1)
SECURITY_LOGIN_MAX_FAILURES_PER_USER = integer(
    "security.login.max-failures-per-user", 20,
    "With SASL: failed logins as one username (from any address) within "
    "security.login.failure-window after which its logins are refused for "
    "security.login.lockout.", minimum=1)
SECURITY_LOGIN_FAILURE_WINDOW = duration(
    "security.login.failure-window", "1min",
    "With SASL: how long a failed login counts against its address and username.",
    minimum=1000)
SECURITY_LOGIN_LOCKOUT = duration(
    "security.login.lockout", "1min",
    "With SASL: how long logins from an address or as a username are refused (at once, "
    "without checking the password) after too many failures; a successful login before "
    "resets the count.", minimum=1000)
SECURITY_LOGIN_LOG_INTERVAL = duration(
    "security.login.log-interval", "1min",
    "With SASL: at most one log line per client address this often about its failed or "
    "refused logins (a summary with counts).", minimum=1000)
SERVER_LOG_MAX_FILE_SIZE = size(
    "server.log.max-file-size", "100mb",
    "Size at which a server's log file (fluss-spark cluster start: DIR/logs/ROLE-ID.log) is "
    "rotated.", maximum=1 << 40)
SERVER_LOG_MAX_BACKUPS = integer(
    "server.log.max-backups", 5,
    "Rotated log files a server keeps (ROLE-ID.log.1 .. .N); older ones are deleted.",
    minimum=1)
SERVER_MEMORY_RELEASE_INTERVAL = duration(
    "server.memory.release-interval", "5s",
    "How often a server hands memory it no longer uses back to the operating system (collects "
    "cyclic garbage, then purges Arrow's pool and trims the C heap), so its RSS falls back "
    "after a burst of large requests; 0 turns it off.", minimum=0)
WRITER_DYNAMIC_CREATE_PARTITION = boolean(
    "client.writer.dynamic-create-partition.enabled", False,
    "A writer creates the partition a row belongs to when it does not exist yet (off: such a "
    "write is refused with PartitionNotExist and writes nothing).")
# Fluss's writer option names (its client ConfigOptions), with its defaults.
WRITER_BATCH_SIZE = size(
    "client.writer.batch-size", "2mb",
    "Rows are sent in requests of about this size per bucket (this project's servers: the "
    "largest Arrow payload of one PRODUCE request).", maximum=1 << 30)
WRITER_BATCH_TIMEOUT = duration(
    "client.writer.batch-timeout", "100ms",
    "How long a writer waits for more rows of a bucket before sending a batch that is not full "
    "(Apache Fluss's linger; this project's writer sends every call at once).", minimum=0)
WRITER_ACKS = choice(
    "client.writer.acks", ("all", "-1", "0", "1"), "all",
    "Acknowledgements a write waits for on Apache Fluss: all (-1: every in-sync replica), 1 "
    "(the leader) or 0 (none); this project's servers always answer once the rows are durable.")
WRITER_RETRIES = integer(
    "client.writer.retries", 2_147_483_647,
    "How often a write that failed with a retriable error is sent again (Apache Fluss); this "
    "project's writer retries until client.request.timeout.", minimum=0)
WRITER_ENABLE_IDEMPOTENCE = boolean(
    "client.writer.enable-idempotence", True,
    "Apache Fluss: the writer registers a writer id and numbers its batches, so a batch resent "
    "by the same writer is written once (needs acks=all and retries > 0).")
#: Options of a client's writer (``FlussConnection.writer(table, options)``, the Spark sink).
CLIENT_WRITER_OPTIONS = [WRITER_BATCH_SIZE, WRITER_BATCH_TIMEOUT, WRITER_ACKS, WRITER_RETRIES,
                         WRITER_ENABLE_IDEMPOTENCE, WRITER_DYNAMIC_CREATE_PARTITION]
SERVER_OPTIONS = [ZOOKEEPER_SESSION_TIMEOUT, LEASE_EXPIRATION_CHECK_INTERVAL,
                  AUTO_PARTITION_CHECK_INTERVAL, SNAPSHOT_MIGRATION_PAUSE, SCANNER_TTL,
                  SCANNER_EXPIRATION_INTERVAL, SCANNER_MAX_PER_BUCKET, SCANNER_MAX_PER_SERVER,
                  SCANNER_MAX_BATCH_SIZE, LOG_SEGMENT_BYTES, LOG_RETENTION_CHECK_INTERVAL,
                  RPC_MAX_REQUEST_SIZE, RPC_ARROW_MAX_BATCH_BYTES, RPC_ARROW_MAX_REQUEST_BYTES,
                  RPC_ARROW_MAX_REQUEST_ROWS, RPC_MAX_CONNECTIONS, RPC_MAX_CONNECTIONS_PER_IP,
                  RPC_IDLE_TIMEOUT, RPC_READ_TIMEOUT, RPC_HANDLER_THREADS, RPC_WRITE_TIMEOUT,
                  RPC_MAX_UNSENT_BYTES, RPC_LOCAL_SOCKET, RPC_AUTH_TIMEOUT,
                  RPC_UNAUTH_MAX_REQUEST_SIZE, RPC_UNAUTH_MAX_CONNECTIONS,
                  RPC_UNAUTH_MAX_CONNECTIONS_PER_IP, SECURITY_PROTOCOL,
                  SASL_MECHANISM, SASL_USERS_FILE, SSL_ENABLED, SSL_CERTIFICATE_FILE,
                  SSL_KEY_FILE, SSL_CA_FILE, SSL_VERIFY_HOSTNAME, SUPER_USERS, INTERNAL_USERNAME,
                  ZOOKEEPER_DIGEST_FILE, SECURITY_LOGIN_MAX_FAILURES_PER_ADDRESS,
                  SECURITY_LOGIN_MAX_FAILURES_PER_USER, SECURITY_LOGIN_FAILURE_WINDOW,
                  SECURITY_LOGIN_LOCKOUT, SECURITY_LOGIN_LOG_INTERVAL, SERVER_LOG_MAX_FILE_SIZE,
                  SERVER_LOG_MAX_BACKUPS, SERVER_MEMORY_RELEASE_INTERVAL]


def parse_pairs(items: Iterable[str], what: str, example: str = "") -> dict[str, str]:
    """``["key=value", ...]`` -> {key: value}, both stripped; ConfigError naming ``what`` (and
    showing ``example``) for an item without ``=`` or with an empty key."""
    out = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{what} {item!r} must be key=value"
                              + (f" (e.g. {example})" if example else ""))
        out[key.strip()] = value.strip()
    return out


def parse_server_options(pairs: list[str]) -> dict[str, Any]:
    """``["kv.scanner.ttl=1s", ...]`` -> {key: parsed value} with every default filled in."""
    raw = parse_pairs(pairs, "server option")
    check_known(raw, SERVER_OPTIONS, "server option")
    return {opt.key: opt.get(raw) for opt in SERVER_OPTIONS}
