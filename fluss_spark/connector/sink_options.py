"""The Spark sink's options: declared once, parsed on the driver into a frozen ``SinkOptions``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from fluss_spark.config import (WRITER_ACKS, WRITER_BATCH_SIZE, WRITER_BATCH_TIMEOUT,
                                WRITER_DYNAMIC_CREATE_PARTITION, WRITER_ENABLE_IDEMPOTENCE,
                                WRITER_RETRIES, Option)
from fluss_spark.connector.options import (BOOTSTRAP_SERVERS, ENGINE, REQUEST_TIMEOUT,
                                           SASL_MECHANISM, SASL_PASSWORD, SASL_USERNAME,
                                           SECURITY_PROTOCOL, SSL_CA_FILE, SSL_ENABLED,
                                           SSL_VERIFY_HOSTNAME, TABLE, connect_with,
                                           connection_fields, declared_values)
from fluss_spark.errors import ConfigError

if TYPE_CHECKING:  # the client is imported only where a cluster is opened (driver, executors)
    from fluss_spark.client.cluster import Cluster

SINK_TABLE = dataclasses.replace(
    TABLE, doc="The table to write (db.table): it must exist (a partitioned table's rows go to "
               "the partitions their values name); load(name)/save(name) may name it instead.")
#: Fluss's client writer options that the sink passes to the cluster's writer.
WRITER_OPTIONS: list[Option] = [WRITER_BATCH_SIZE, WRITER_BATCH_TIMEOUT, WRITER_ACKS,
                                WRITER_RETRIES, WRITER_ENABLE_IDEMPOTENCE,
                                WRITER_DYNAMIC_CREATE_PARTITION]
SINK_OPTIONS: list[Option] = [
    BOOTSTRAP_SERVERS, SINK_TABLE, *WRITER_OPTIONS, ENGINE, REQUEST_TIMEOUT, SECURITY_PROTOCOL,
    SASL_MECHANISM, SASL_USERNAME, SASL_PASSWORD, SSL_ENABLED, SSL_CA_FILE, SSL_VERIFY_HOSTNAME,
]

#: Options Spark itself hands every streaming sink (lower-cased): not the sink's to check.
SPARK_OWN = frozenset({"checkpointlocation", "queryname"})


@dataclass(frozen=True)
class SinkOptions:
    """Validated sink options (driver-side parse; pickled into the writers)."""

    bootstrap_servers: str
    table: str
    #: The client writer options given, ``(key, parsed value)``.
    writer: tuple[tuple[str, Any], ...] = ()
    engine: str = ENGINE.default
    request_timeout_ms: int = REQUEST_TIMEOUT.default
    sasl_username: str | None = SASL_USERNAME.default
    # never in logs or errors
    sasl_password: str | None = field(default=SASL_PASSWORD.default, repr=False)
    ssl_enabled: bool = SSL_ENABLED.default
    ssl_ca_file: str | None = SSL_CA_FILE.default
    ssl_verify_hostname: bool = SSL_VERIFY_HOSTNAME.default

    def writer_options(self) -> dict[str, Any]:
        return dict(self.writer)

    @property
    def creates_partitions(self) -> bool:
        """Whether writers create the partitions rows name that do not exist."""
        return bool(WRITER_DYNAMIC_CREATE_PARTITION.get(self.writer_options()))

    def connect(self) -> "Cluster":
        """The cluster at these options' servers, with their timeout and credentials."""
        return connect_with(self)


def parse_sink_options(raw: Mapping[str, Any]) -> SinkOptions:
    """Check and parse the options of ``write.format("fluss")`` / ``writeStream``.

    Raises ``ConfigError`` naming the option and what to do.
    """
    raw = {k: v for k, v in raw.items() if str(k).lower() not in SPARK_OWN}
    values = declared_values(raw, SINK_OPTIONS, "write.format('fluss')")
    connection = connection_fields(values)
    table = SINK_TABLE.get(values)
    if table is None:
        raise ConfigError("option 'table' is required: the table to write, e.g. "
                          ".option('table', 'db.orders')")
    writer = tuple((o.key, o.get(values)) for o in WRITER_OPTIONS if o.key in values)
    given = dict(writer)
    if given.get(WRITER_ENABLE_IDEMPOTENCE.key):
        # Fluss refuses the same conflict (an idempotent writer needs acks=all and retries).
        if given.get(WRITER_ACKS.key, "all") not in ("all", "-1"):
            raise ConfigError("client.writer.enable-idempotence=true needs "
                              "client.writer.acks=all; drop one of them")
        if given.get(WRITER_RETRIES.key, 1) == 0:
            raise ConfigError("client.writer.enable-idempotence=true needs "
                              "client.writer.retries > 0; drop one of them")
    return SinkOptions(table=table, writer=writer, **connection)


__all__ = ["SINK_OPTIONS", "SinkOptions", "parse_sink_options"]
