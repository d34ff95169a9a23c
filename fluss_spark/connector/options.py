"""The Spark source's options: declared once, parsed on the driver into a frozen ``SourceOptions``.

Spark hands a data source its options as a case-insensitive map with lower-cased keys
(``maxOffsetsPerTrigger`` arrives as ``maxoffsetspertrigger``), so keys are matched
case-insensitively here and reported back in their declared spelling.
"""

from __future__ import annotations

import calendar
import difflib
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Protocol

from fluss_spark.config import (MAX_LEASE_DURATION_MS, Option, boolean, choice, duration, integer,
                                parse_duration_ms, parse_size_bytes, size)
from fluss_spark.errors import ConfigError
from fluss_spark.protocol.names import LEASE_ID_RULE, is_valid_lease_id

if TYPE_CHECKING:  # the client is imported only where a cluster is opened (driver, executors)
    from fluss_spark.client.cluster import Cluster
    from fluss_spark.client.remote_storage import RemoteStorage


STARTUP_MODES = ("full", "earliest", "latest", "timestamp")


def _text(value: Any, key: str) -> str:
    text = str(value).strip()
    if not text:
        raise ConfigError(f"option {key!r} must not be empty")
    return text


#: 9999-12-31 23:59:59.999 UTC: the latest timestamp anything downstream can show.
MAX_TIMESTAMP_MS = 253_402_300_799_999


def parse_timestamp_ms(value: Any, key: str = "timestamp") -> int:
    """Epoch milliseconds, or ``yyyy-MM-dd HH:mm:ss`` (UTC) -> epoch milliseconds."""
    text = str(value).strip()
    if re.fullmatch(r"-?\d+", text):
        ms = int(text)
        if not 0 <= ms <= MAX_TIMESTAMP_MS:
            raise ConfigError(f"option {key!r}: {value!r} is outside 0..{MAX_TIMESTAMP_MS} "
                              "(epoch milliseconds up to the year 9999)")
        return ms
    for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"):
        try:
            return calendar.timegm(time.strptime(text, fmt)) * 1000
        except ValueError:
            continue
    raise ConfigError(f"option {key!r}: cannot parse {value!r}; use epoch milliseconds or "
                      "'yyyy-MM-dd HH:mm:ss' (UTC)")


def _interval_ms(value: Any, key: str) -> int:
    """A duration in ms where ``0`` or a negative value (``-1``, ``-1s``) turns something off
    (returned as 0)."""
    text = str(value).strip()
    if text.startswith("-"):
        parse_duration_ms(text[1:], key)    # still a duration: "-x" is refused
        return 0
    return parse_duration_ms(text, key)


def _string(key: str, doc: str, default: str | None = None) -> Option:
    return Option(key, _text, default, doc)


BOOTSTRAP_SERVERS = _string("bootstrap.servers",
                            "Coordinator address(es), host:port[,host:port] (required).")
TABLE = _string("table", "The table to read (single-table layout: the table's columns).")
TABLES = _string("tables", "Comma-separated tables to read in one query (multi-table layout).")
COLUMNS = _string("columns",
                  "Comma-separated table columns to read, in this order (single-table layout); "
                  "the others never leave the servers. Default: every column.")
TABLE_PATTERN = _string("table.pattern",
                        "Regex (full match) over table names, resolved when the query starts "
                        "(multi-table layout).")
STARTUP_MODE = choice("scan.startup.mode", STARTUP_MODES, "full",
                      "full: PK tables read their latest KV snapshot then the changelog from it "
                      "(log tables from the earliest offset); earliest / latest / timestamp: "
                      "changelog only, from that point.")
STARTUP_TIMESTAMP = Option("scan.startup.timestamp", parse_timestamp_ms, None,
                           "Start point for scan.startup.mode=timestamp: epoch ms or "
                           "'yyyy-MM-dd HH:mm:ss' (UTC).")
LEASE_ID = _string("scan.kv.snapshot.lease.id",
                   "Id of the KV snapshot lease protecting the snapshot phase "
                   "([A-Za-z0-9._-]{1,128}); default a new UUID; a query restarted on its "
                   "checkpoint uses the checkpoint's.")
LEASE_DURATION = duration("scan.kv.snapshot.lease.duration", "1d",
                          "Lease expiry after the last renewal (1s..365d); the driver renews at "
                          "a third of it.", minimum=1000, maximum=MAX_LEASE_DURATION_MS)
LEASE_GRACE = duration("scan.kv.snapshot.lease.grace", "2min",
                       "How long the lease a new query acquires for its first batch outlives a "
                       "driver killed before Spark logged that batch's offset (the lease is "
                       "renewed while the driver lives and extended to "
                       "scan.kv.snapshot.lease.duration once the checkpoint names it).",
                       minimum=1000, maximum=MAX_LEASE_DURATION_MS)
MAX_OFFSETS_PER_TRIGGER = integer("maxOffsetsPerTrigger", None,
                                  "Most snapshot rows + changelog records per micro-batch.",
                                  minimum=1)
MIN_OFFSETS_PER_TRIGGER = integer("minOffsetsPerTrigger", None,
                                  "Fewest snapshot rows + changelog records to start a "
                                  "micro-batch (waits at most maxTriggerDelay).", minimum=1)
MAX_TRIGGER_DELAY = duration("maxTriggerDelay", "15min",
                             "Longest wait for minOffsetsPerTrigger before a batch runs anyway.")
FAIL_ON_DATA_LOSS = boolean("failOnDataLoss", True,
                            "Fail when a needed snapshot or changelog range is gone, or a "
                            "partition is dropped by hand before all its records were read; "
                            "false: warn and continue from what still exists.")
PARTITION_DISCOVERY_INTERVAL = Option(
    "scan.partition.discovery.interval", _interval_ms, parse_duration_ms("1min"),
    "How often a stream looks for new partitions of its partitioned tables; 0 or a negative "
    "value turns discovery off (a partition that disappears is still noticed within a second).")
SCAN_BATCH_BYTES = size("scan.batch.bytes", "4mb",
                        "Batch size requested from a scan session per round trip.")
SPLIT_MAX_ROWS = integer("scan.split.max-rows", 0,
                         "Cut a bucket's snapshot rows of one micro-batch into splits of at most "
                         "this many rows (0: one split per bucket).", minimum=0)
KV_READ = choice("scan.kv.read", ("auto", "snapshot", "live"), "auto",
                 "How a PK table's KV state is read in full mode: snapshot (its leased KV "
                 "snapshot), live (a live scan session per bucket, opened while the batch is "
                 "planned: Apache Fluss's SCAN_KV), or auto (live where snapshots are read from "
                 "files and the servers offer live scans, else snapshot).")
SHORT_CIRCUIT = boolean("scan.kv.short-circuit", False,
                        "Read a KV snapshot's file directly, without a socket, where the embedded "
                        "tablet server holding it runs on the reader's host (like HDFS's "
                        "short-circuit reads): the server still checks the open, the lease keeps "
                        "the file; a file the reader cannot open is read over the connection.")
LIVE_MAX_BUCKETS = integer("scan.kv.live.max-buckets-per-trigger", 16,
                           "Most buckets whose live scan sessions one micro-batch opens (each is "
                           "read whole by one task).", minimum=1)
ENGINE = choice("engine", ("auto", "embedded", "apache-fluss"), "auto",
                "Which cluster bootstrap.servers names: auto (probe the first reachable server), "
                "embedded (this project's servers) or apache-fluss (an Apache Fluss cluster).")
REQUEST_TIMEOUT = duration("client.request.timeout", "60s",
                           "Timeout of one request to a Fluss server, retries included (when "
                           "every server refuses connections for 4 s, the cluster is reported "
                           "down at once: ClusterUnreachable).", minimum=1)
SECURITY_PROTOCOL = choice("client.security.protocol", ("plaintext", "sasl"), None,
                           "PLAINTEXT or SASL; default SASL when a username is given.")
SASL_MECHANISM = choice("client.security.sasl.mechanism", ("plain",), "plain",
                        "SASL mechanism; PLAIN (username and password) is the one supported.")
SASL_USERNAME = _string("client.security.sasl.username",
                        "SASL PLAIN username, for a cluster with security.protocol=SASL.")
SASL_PASSWORD = _string("client.security.sasl.password",
                        "SASL PLAIN password (never logged); give it with the username.")
SSL_ENABLED = boolean("client.security.ssl.enabled", False,
                      "Connect with TLS, to servers with security.ssl.enabled (with SASL the "
                      "login runs inside TLS).")
SSL_CA_FILE = _string("client.security.ssl.ca-file",
                      "With TLS: PEM file of the CA certificates that signed the servers' "
                      "certificates, at this path on the driver and every executor (default: "
                      "the system's trust store).")
SSL_VERIFY_HOSTNAME = boolean("client.security.ssl.verify-hostname", True,
                              "With TLS: a server's certificate must name the address connected "
                              "to; false only for servers reached by an address their "
                              "certificate does not list.")
S3_ENDPOINT = _string("s3.endpoint",
                      "Where the driver and executors read the cluster's remote.data.dir when it "
                      "is on S3: the http(s):// URL of an S3-compatible store (default: AWS, or "
                      "the AWS_ENDPOINT_URL variable). The same key as in Fluss's server.yaml.")
S3_REGION = _string("s3.region", "Region of the remote.data.dir bucket (default: the AWS_REGION "
                                 "variable or the bucket's own).")
S3_ACCESS_KEY = _string("s3.access-key",
                        "Access key for the remote.data.dir bucket; give it with s3.secret-key "
                        "(default: the AWS_* variables, ~/.aws files or the instance role).")
S3_SECRET_KEY = _string("s3.secret-key", "Secret key for the remote.data.dir bucket (never "
                                         "logged); give it with s3.access-key.")
LEASE_ACQUIRE_RETRIES = integer("scan.kv.snapshot.lease.acquire-retries", 5,
                                "How often list -> acquire is retried for snapshots that vanished "
                                "before they could be leased.", minimum=0)

SOURCE_OPTIONS: list[Option] = [
    BOOTSTRAP_SERVERS, TABLE, TABLES, TABLE_PATTERN, COLUMNS, STARTUP_MODE, STARTUP_TIMESTAMP,
    LEASE_ID, LEASE_DURATION, LEASE_GRACE, MAX_OFFSETS_PER_TRIGGER, MIN_OFFSETS_PER_TRIGGER,
    MAX_TRIGGER_DELAY,
    FAIL_ON_DATA_LOSS, PARTITION_DISCOVERY_INTERVAL, SCAN_BATCH_BYTES, SPLIT_MAX_ROWS, KV_READ,
    SHORT_CIRCUIT, LIVE_MAX_BUCKETS, ENGINE,
    REQUEST_TIMEOUT,
    LEASE_ACQUIRE_RETRIES,
    SECURITY_PROTOCOL, SASL_MECHANISM, SASL_USERNAME, SASL_PASSWORD, SSL_ENABLED, SSL_CA_FILE,
    SSL_VERIFY_HOSTNAME, S3_ENDPOINT, S3_REGION, S3_ACCESS_KEY, S3_SECRET_KEY,
]

#: ``load("name")`` puts the argument under ``path``; it is accepted as a synonym of ``table``.
_PATH = "path"


@dataclass(frozen=True)
class SourceOptions:
    """Validated source options (driver-side parse; pickled into readers and splits).

    A field that holds an option defaults to that option's declared default.
    """

    bootstrap_servers: str
    tables: tuple[str, ...] = ()
    table_pattern: str | None = None
    multi_table: bool = False
    columns: tuple[str, ...] = ()
    startup_mode: str = STARTUP_MODE.default
    startup_timestamp_ms: int | None = STARTUP_TIMESTAMP.default
    lease_id: str | None = LEASE_ID.default
    lease_duration_ms: int = LEASE_DURATION.default
    lease_grace_ms: int = LEASE_GRACE.default
    max_offsets_per_trigger: int | None = MAX_OFFSETS_PER_TRIGGER.default
    min_offsets_per_trigger: int | None = MIN_OFFSETS_PER_TRIGGER.default
    max_trigger_delay_ms: int = MAX_TRIGGER_DELAY.default
    fail_on_data_loss: bool = FAIL_ON_DATA_LOSS.default
    partition_discovery_interval_ms: int = PARTITION_DISCOVERY_INTERVAL.default
    scan_batch_bytes: int = SCAN_BATCH_BYTES.default
    split_max_rows: int = SPLIT_MAX_ROWS.default
    kv_read: str = KV_READ.default
    short_circuit: bool = SHORT_CIRCUIT.default
    live_max_buckets: int = LIVE_MAX_BUCKETS.default
    request_timeout_ms: int = REQUEST_TIMEOUT.default
    engine: str = ENGINE.default
    lease_acquire_retries: int = LEASE_ACQUIRE_RETRIES.default
    sasl_username: str | None = SASL_USERNAME.default
    # never in logs or errors
    sasl_password: str | None = field(default=SASL_PASSWORD.default, repr=False)
    ssl_enabled: bool = SSL_ENABLED.default
    ssl_ca_file: str | None = SSL_CA_FILE.default
    ssl_verify_hostname: bool = SSL_VERIFY_HOSTNAME.default
    #: How the files the cluster points to are read (its secret key is never in a repr).
    storage: "RemoteStorage | None" = None

    @property
    def request_timeout_s(self) -> float:
        return self.request_timeout_ms / 1000.0

    def connect(self) -> "Cluster":
        """The cluster at these options' servers, with their timeout, credentials and remote
        storage settings."""
        return connect_with(self, self.storage, self.short_circuit)


class ConnectionFields(Protocol):
    """The connection fields that source and sink options share (read-only: both are frozen)."""

    @property
    def bootstrap_servers(self) -> str: ...

    @property
    def engine(self) -> str: ...

    @property
    def request_timeout_ms(self) -> int: ...

    @property
    def sasl_username(self) -> str | None: ...

    @property
    def sasl_password(self) -> str | None: ...

    @property
    def ssl_enabled(self) -> bool: ...

    @property
    def ssl_ca_file(self) -> str | None: ...

    @property
    def ssl_verify_hostname(self) -> bool: ...


def connect_with(o: ConnectionFields, storage: RemoteStorage | None = None,
                 short_circuit: bool = False) -> "Cluster":
    """The cluster at ``o``'s servers, with its engine, timeout, credentials and TLS
    (``storage``: how the client reads the cluster's remote files; ``short_circuit``: snapshot
    files of local tablet servers are read directly)."""
    from fluss_spark.client.backends import open_cluster
    tls = None
    if o.ssl_enabled:
        # The TLS client (ssl, this project's framing) is imported only for a TLS connection.
        from fluss_spark.client import TlsClientConfig
        tls = TlsClientConfig(o.ssl_ca_file, o.ssl_verify_hostname)
    return open_cluster(o.bootstrap_servers, engine=o.engine,
                        request_timeout_s=o.request_timeout_ms / 1000.0,
                        username=o.sasl_username, password=o.sasl_password, tls=tls,
                        storage=storage, short_circuit_reads=short_circuit)


#: Options of Spark's Kafka source, lower-cased -> what this source takes instead.
_KAFKA_HABITS = {
    "startingoffsets": "'scan.startup.mode' (full, earliest, latest or timestamp)",
    "startingtimestamp": "'scan.startup.timestamp' (with scan.startup.mode=timestamp)",
    "subscribe": "'tables' (comma-separated db.table names) or 'table'",
    "subscribepattern": "'table.pattern' (a regex over db.table names)",
    "kafka.bootstrap.servers": "'bootstrap.servers'",
}


def parse_options(raw: Mapping[str, Any]) -> SourceOptions:
    """Check and parse the options a user passed to ``format("fluss")``.

    Raises ``ConfigError`` naming the option and what to do; unknown keys list the known ones.
    """
    values = declared_values(raw, SOURCE_OPTIONS, "format('fluss')")
    connection = connection_fields(values)
    given = [o.key for o in (TABLE, TABLES, TABLE_PATTERN) if o.key in values]
    if len(given) != 1:
        raise ConfigError("set exactly one of 'table', 'tables' or 'table.pattern'"
                          + (f" (got {', '.join(given)})" if given else ""))
    tables: tuple[str, ...] = ()
    pattern = None
    multi = False
    if TABLE.key in values:
        tables = (TABLE.get(values),)
        if "," in tables[0]:
            raise ConfigError(f"option 'table' names one table, got {tables[0]!r}; use 'tables' "
                              "for a comma-separated list")
    elif TABLES.key in values:
        tables = _name_list(values, TABLES, "table")
        multi = True
    else:
        pattern = TABLE_PATTERN.get(values)
        try:
            re.compile(pattern)
        except re.error as e:
            raise ConfigError(f"option 'table.pattern': {pattern!r} is not a valid regex: "
                              f"{e}") from None
        multi = True

    columns = _columns(values, multi)
    mode = STARTUP_MODE.get(values)
    ts = STARTUP_TIMESTAMP.get(values)
    if mode == "timestamp" and ts is None:
        raise ConfigError("scan.startup.mode=timestamp needs option 'scan.startup.timestamp' "
                          "(epoch ms or 'yyyy-MM-dd HH:mm:ss' UTC)")
    if mode != "timestamp" and ts is not None:
        raise ConfigError(f"option 'scan.startup.timestamp' is only used with "
                          f"scan.startup.mode=timestamp (mode is {mode!r})")

    lease_id = LEASE_ID.get(values)
    if lease_id is not None:
        check_lease_id(lease_id)

    max_rows = MAX_OFFSETS_PER_TRIGGER.get(values)
    min_rows = MIN_OFFSETS_PER_TRIGGER.get(values)
    if max_rows is not None and min_rows is not None and min_rows > max_rows:
        raise ConfigError(f"minOffsetsPerTrigger ({min_rows}) must not exceed "
                          f"maxOffsetsPerTrigger ({max_rows})")

    return SourceOptions(
        tables=tables,
        table_pattern=pattern,
        multi_table=multi,
        columns=columns,
        startup_mode=mode,
        startup_timestamp_ms=ts,
        lease_id=lease_id,
        lease_duration_ms=LEASE_DURATION.get(values),
        lease_grace_ms=LEASE_GRACE.get(values),
        max_offsets_per_trigger=max_rows,
        min_offsets_per_trigger=min_rows,
        max_trigger_delay_ms=MAX_TRIGGER_DELAY.get(values),
        fail_on_data_loss=FAIL_ON_DATA_LOSS.get(values),
        partition_discovery_interval_ms=PARTITION_DISCOVERY_INTERVAL.get(values),
        scan_batch_bytes=SCAN_BATCH_BYTES.get(values),
        split_max_rows=SPLIT_MAX_ROWS.get(values),
        kv_read=KV_READ.get(values),
        short_circuit=SHORT_CIRCUIT.get(values),
        live_max_buckets=LIVE_MAX_BUCKETS.get(values),
        lease_acquire_retries=LEASE_ACQUIRE_RETRIES.get(values),
        storage=_remote_storage(values),
        **connection,
    )


def declared_values(raw: Mapping[str, Any], options: list[Option],
                    what: str) -> dict[str, Any]:
    """``raw`` options (any case; ``path``, from ``load(name)``, is ``table``) by declared key;
    unknown keys are refused in one line naming close declared ones (``what`` takes them)."""
    by_lower = {o.key.lower(): o for o in options}
    values: dict[str, Any] = {}
    unknown = []
    for key, value in raw.items():
        lowered = str(key).lower()
        if lowered == _PATH:
            if value not in (None, ""):
                values.setdefault(TABLE.key, value)
            continue
        opt = by_lower.get(lowered)
        if opt is None:
            unknown.append(str(key))
        elif value is not None:
            values[opt.key] = value
    if unknown:
        hints = []
        for key in sorted(unknown):
            kafka = _KAFKA_HABITS.get(key.lower())
            close = difflib.get_close_matches(key.lower(), list(by_lower), n=1)
            if kafka is not None:
                hints.append(f"{key!r} is Kafka's; here it is {kafka}")
            elif close:
                hints.append(f"{key!r} -> did you mean {by_lower[close[0]].key!r}?")
        # The complaint and the hints first; the list of known names last (it is long).
        raise ConfigError(f"unknown option(s) for {what}: "
                          f"{', '.join(map(repr, sorted(unknown)))}"
                          + (f" ({'; '.join(hints)})" if hints else "")
                          + f". Known options: {', '.join(o.key for o in options)}")
    return values


def connection_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    """The ``ConnectionFields`` of checked option ``values`` (by declared key), by field name;
    ConfigError for a missing bootstrap address or security options that do not fit together."""
    servers = BOOTSTRAP_SERVERS.get(values)
    if servers is None:
        raise ConfigError("option 'bootstrap.servers' is required, e.g. "
                          ".option('bootstrap.servers', 'localhost:9123')")
    username, password = SASL_USERNAME.get(values), SASL_PASSWORD.get(values)
    if (username is None) != (password is None):
        raise ConfigError("options 'client.security.sasl.username' and "
                          "'client.security.sasl.password' go together: give both or neither")
    SASL_MECHANISM.get(values)
    protocol = (SECURITY_PROTOCOL.get(values) or ("sasl" if username else "plaintext")).upper()
    if protocol == "SASL" and username is None:
        raise ConfigError("client.security.protocol=SASL needs options "
                          "'client.security.sasl.username' and 'client.security.sasl.password'")
    if protocol == "PLAINTEXT" and username is not None:
        raise ConfigError("a SASL username was given with client.security.protocol=PLAINTEXT; "
                          "drop one of them")

    ssl_enabled = SSL_ENABLED.get(values)
    for opt in (SSL_CA_FILE, SSL_VERIFY_HOSTNAME):
        if opt.key in values and not ssl_enabled:
            raise ConfigError(f"option {opt.key!r} is a TLS setting: set "
                              f"'client.security.ssl.enabled' to true as well, or drop it")

    return dict(bootstrap_servers=servers, engine=ENGINE.get(values),
                request_timeout_ms=REQUEST_TIMEOUT.get(values), sasl_username=username,
                sasl_password=password, ssl_enabled=ssl_enabled,
                ssl_ca_file=SSL_CA_FILE.get(values),
                ssl_verify_hostname=SSL_VERIFY_HOSTNAME.get(values))


def _remote_storage(values: Mapping[str, Any]) -> "RemoteStorage | None":
    """The ``s3.*`` options as ``RemoteStorage`` (None when none is given)."""
    if not any(o.key in values for o in (S3_ENDPOINT, S3_REGION, S3_ACCESS_KEY, S3_SECRET_KEY)):
        return None
    from fluss_spark.client.remote_storage import RemoteStorage
    return RemoteStorage(s3_endpoint=S3_ENDPOINT.get(values), s3_region=S3_REGION.get(values),
                         s3_access_key=S3_ACCESS_KEY.get(values),
                         s3_secret_key=S3_SECRET_KEY.get(values))


def _columns(values: Mapping[str, Any], multi_table: bool) -> tuple[str, ...]:
    if COLUMNS.key not in values:
        return ()
    if multi_table:
        raise ConfigError("option 'columns' works with option 'table'; to read fewer columns of "
                          "several tables, give a schema whose table structs leave them out")
    return _name_list(values, COLUMNS, "column")


def _name_list(values: Mapping[str, Any], option: Option, noun: str) -> tuple[str, ...]:
    """A comma-separated option value as names: at least one, none twice."""
    names = tuple(n.strip() for n in option.get(values).split(",") if n.strip())
    if not names:
        raise ConfigError(f"option {option.key!r} lists no {noun}")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"option {option.key!r} lists {', '.join(dupes)} more than once")
    return names


def check_lease_id(lease_id: str) -> str:
    """Refuse a lease id the coordinator would refuse, before any I/O."""
    if not is_valid_lease_id(lease_id):
        raise ConfigError(f"lease id {lease_id!r} is not allowed: use {LEASE_ID_RULE} "
                          "(option 'scan.kv.snapshot.lease.id')")
    return lease_id


def _show(o: Option) -> str:
    """A default as a user would write it (``1d``, ``4mb``, ``true``)."""
    if isinstance(o.default, bool):
        return str(o.default).lower()
    if o.parse in (parse_duration_ms, _interval_ms):
        for unit, ms in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
            if o.default and o.default % ms == 0:
                return f"{o.default // ms}{unit}"
        return f"{o.default}ms"
    if o.parse is parse_size_bytes:
        for unit, n in (("gb", 1 << 30), ("mb", 1 << 20), ("kb", 1 << 10)):
            if o.default and o.default % n == 0:
                return f"{o.default // n}{unit}"
    return str(o.default)


def options_table_markdown(options: list[Option] | None = None) -> str:
    """The option table for docs/spark_source.md (or of ``options``: docs/spark_sink.md),
    generated from the declarations."""
    lines = ["| Option | Default | Description |", "|---|---|---|"]
    for o in SOURCE_OPTIONS if options is None else options:
        default = "—" if o.default is None else f"`{_show(o)}`"
        lines.append(f"| `{o.key}` | {default} | {o.doc} |")
    return "\n".join(lines)


__all__ = ["SourceOptions", "parse_options", "check_lease_id", "SOURCE_OPTIONS", "STARTUP_MODES",
           "parse_timestamp_ms", "options_table_markdown"]
