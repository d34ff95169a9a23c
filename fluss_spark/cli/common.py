"""Shared by every ``fluss-spark`` subcommand: bootstrap servers, connections, argument parsing."""

from __future__ import annotations

import os
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING

from fluss_spark.config import MAX_BUCKETS, bounded  # noqa: F401 - for the command modules
from fluss_spark.errors import ConfigError, FlussError, UnsupportedVersion

if TYPE_CHECKING:   # the client is imported when a command runs, not to parse arguments
    from fluss_spark.client import TlsClientConfig
    from fluss_spark.client.cluster import Capabilities, Cluster, TableAdmin
    from fluss_spark.client.embedded import FlussConnection
    from fluss_spark.client.writes import RowWriter
    from fluss_spark.local.either import AnyLocalCluster

DEFAULT_TIMEOUT_S = 30.0
#: Largest row or record count an argument takes.
MAX_COUNT = 10**12
#: Longest --timeout (a day): longer is a typo, and the socket layer refuses far longer ones.
MAX_TIMEOUT_S = 86_400.0


def default_cluster_dir() -> Path:
    """``$FLUSS_SPARK_HOME`` or ``~/.fluss-spark/cluster``."""
    home = os.environ.get("FLUSS_SPARK_HOME")
    return Path(home) if home else Path.home() / ".fluss-spark" / "cluster"


def _json(args) -> bool:
    return bool(getattr(args, "json", False))


def bootstrap_servers(args) -> str:
    explicit = getattr(args, "bootstrap_servers", None) or os.environ.get("FLUSS_BOOTSTRAP_SERVERS")
    if explicit:
        return explicit
    from fluss_spark.local.embedded import read_state
    d = default_cluster_dir()
    state = read_state(d)
    if state is None:
        raise ConfigError("no cluster to talk to: pass --bootstrap-servers, set "
                          f"FLUSS_BOOTSTRAP_SERVERS, or start one with `fluss-spark cluster start` "
                          f"(looked for {d / 'cluster.json'})")
    host = state.get("host", "127.0.0.1")
    return ",".join(f"{host}:{s['port']}" for s in state["servers"] if s.get("port"))


#: Why a command cannot run on a cluster that lacks a capability, by ``Capabilities`` field
#: (``lease_renewal``: a renew call of its own).
_MISSING = {
    "lease_listing": "it has no call that lists leases",
    "lease_describe": "it has no call that describes a lease",
    "lease_renewal": "it renews a lease when it is acquired again: use `lease acquire`",
    "snapshot_trigger": "it takes KV snapshots on its own schedule (the table's "
                        "kv.snapshot.interval)",
    "scan_sessions": "it has no scan sessions",
    "acls": "this client does not manage its ACLs (use Apache Fluss's own tools)",
}


def _reachable_servers(args) -> str:
    from fluss_spark.client.bootstrap import parse_bootstrap
    from fluss_spark.local.ports import port_open
    servers = bootstrap_servers(args)
    if not any(port_open(h, p, timeout_s=2.0) for h, p in parse_bootstrap(servers)):
        raise FlussError(f"no server is reachable at {servers}; is the cluster running? "
                         "(`fluss-spark cluster status`)")
    return servers


def _command(args) -> str:
    return " ".join(str(a) for a in (getattr(args, "command", None),
                                     getattr(args, "action", None)) if a)


def _engine_name(servers: str) -> str:
    from fluss_spark.client.backends import ENGINE_NAMES, detect_engine
    return ENGINE_NAMES[detect_engine(servers, timeout_s=2.0)]


def not_available(args, servers: str, why: str, command: str | None = None) -> UnsupportedVersion:
    """The one-line refusal of a command the cluster at ``servers`` cannot serve."""
    return UnsupportedVersion(f"`fluss-spark {command or _command(args)}` is not available on "
                              f"{_engine_name(servers)} (the cluster at {servers}): {why}")


def offers(caps: "Capabilities", capability: str) -> bool:
    """Whether ``caps`` has ``capability`` (a key of ``_MISSING``)."""
    if capability == "lease_renewal":
        return caps.lease_renewal == "renew"
    return bool(getattr(caps, capability))


def require(args, cluster: "Cluster", capability: str) -> None:
    """Refuse the command unless ``cluster`` has ``capability`` (a key of ``_MISSING``)."""
    if not offers(cluster.capabilities(), capability):
        raise not_available(args, bootstrap_servers(args), _MISSING[capability])


def embedded_connection(args, cluster: "Cluster") -> "FlussConnection":
    """The ``FlussConnection`` behind ``cluster``, for what only this project's client offers;
    any other cluster is refused in one line."""
    from fluss_spark.client.embedded import EmbeddedCluster
    if not isinstance(cluster, EmbeddedCluster):
        raise not_available(args, bootstrap_servers(args),
                            "this command needs fluss_spark's own servers")
    return cluster.conn


def table_admin(args, cluster: "Cluster") -> "TableAdmin":
    """``cluster`` as a ``TableAdmin`` (both backends are), or a one-line refusal."""
    from fluss_spark.client.cluster import TableAdmin
    if not isinstance(cluster, TableAdmin):
        raise not_available(args, bootstrap_servers(args), "it cannot create or drop tables")
    return cluster


def table_writer(args, cluster: "Cluster", table: str) -> "RowWriter":
    """A writer of ``table`` on ``cluster`` (both backends write), or a one-line refusal."""
    from fluss_spark.client.writes import TableWrites
    if not isinstance(cluster, TableWrites):
        raise not_available(args, bootstrap_servers(args), "it cannot write tables")
    return cluster.table_writer(table)


def connect(args, needs: str | None = None) -> "FlussConnection":
    """A FlussConnection to this project's servers, after checking that some bootstrap server
    accepts connections (a cluster that is down is reported at once instead of after the retry
    timeout). A cluster that lacks the capability ``needs`` (a key of ``_MISSING``), or that is
    not this project's servers, is refused in one line that says what it lacks."""
    from fluss_spark.client.backends import open_cluster
    servers = _reachable_servers(args)
    user, password = credentials(args, servers) or (None, None)
    cluster = open_cluster(servers, request_timeout_s=getattr(args, "timeout", DEFAULT_TIMEOUT_S),
                           username=user, password=password, tls=tls(args, servers))
    try:
        if needs is not None:
            require(args, cluster, needs)
        return embedded_connection(args, cluster)
    except BaseException:
        cluster.close()
        raise


def no_snapshot_yet(args, table: str, caps: "Capabilities") -> str:
    """What to do about a table without a KV snapshot, given what the cluster offers."""
    if not caps.snapshot_trigger:
        return (f"{_engine_name(bootstrap_servers(args))} takes one every kv.snapshot.interval "
                "after a write")
    live = (" or scan the current state with `fluss-spark scan --snapshot live`"
            if caps.scan_sessions else "")
    return f"take one with `fluss-spark snapshot trigger {table}`{live}"


def connect_cluster(args) -> "closing[Cluster]":
    """The ``Cluster`` at the bootstrap servers, this project's or Apache Fluss (probed), for
    the commands that both engines serve; closed at the end of a ``with`` block."""
    from fluss_spark.client.backends import open_cluster
    servers = _reachable_servers(args)
    user, password = credentials(args, servers) or (None, None)
    return closing(open_cluster(servers,
                                request_timeout_s=getattr(args, "timeout", DEFAULT_TIMEOUT_S),
                                username=user, password=password, tls=tls(args, servers)))


def credentials(args, servers: str) -> tuple[str, str] | None:
    """SASL PLAIN credentials: ``FLUSS_USERNAME`` (or ``--username``) and ``FLUSS_PASSWORD``;
    else, for the local cluster of this machine when it requires SASL, its super user (the
    password stays in the cluster directory). None: no authentication."""
    user = getattr(args, "username", None) or os.environ.get("FLUSS_USERNAME")
    password = os.environ.get("FLUSS_PASSWORD")
    if user or password:
        if not (user and password):
            raise ConfigError("a SASL login needs a username (--username or FLUSS_USERNAME) and "
                              "a password (FLUSS_PASSWORD)")
        return user, password
    local = _local_cluster(servers)
    return local.credentials if local is not None else None


def tls(args, servers: str) -> "TlsClientConfig | None":
    """TLS settings: ``--tls-ca-file`` / ``FLUSS_TLS_CA_FILE``, ``--tls`` / ``FLUSS_TLS``
    (``transport.tls.from_environment``); else, for the local cluster of this machine when it
    speaks TLS, its CA. None: plaintext."""
    from fluss_spark.client import tls_from_environment
    given = tls_from_environment(getattr(args, "tls", False), getattr(args, "tls_ca_file", None))
    if given is not None:
        return given
    local = _local_cluster(servers)
    return local.tls_client if local is not None else None


def _local_cluster(servers: str) -> "AnyLocalCluster | None":
    """The local cluster of this machine (either engine) when ``servers`` names one of its
    servers."""
    from fluss_spark.client.bootstrap import parse_bootstrap
    from fluss_spark.local.either import load_local_cluster
    local = load_local_cluster(default_cluster_dir())
    if local is not None and \
            set(parse_bootstrap(local.bootstrap_servers)) & set(parse_bootstrap(servers)):
        return local
    return None


def _columns_arg(text: str | None) -> list[str] | None:
    if text is None:
        return None
    cols = [c.strip() for c in text.split(",")]
    if not any(cols):
        raise ConfigError(f"the column list {text!r} is empty")
    if not all(cols):
        raise ConfigError(f"the column list {text!r} has an empty column name (a comma too "
                          f"many?)")
    return cols
