"""Shared by every ``fluss-spark`` subcommand: bootstrap servers, connections, argument parsing."""

from __future__ import annotations

import os
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from fluss_spark.config import MAX_BUCKETS, bounded  # noqa: F401 - for the command modules
from fluss_spark.errors import ConfigError, FlussError

if TYPE_CHECKING:   # the client is imported when a command runs, not to parse arguments
    from fluss_spark.client.apache_fluss import ApacheFlussWireCluster
    from fluss_spark.client.cluster import Cluster

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


#: Why a command of this CLI cannot run against an Apache Fluss cluster, by command.
_NOT_ON_APACHE_FLUSS = {
    "lease list": "Apache Fluss 0.9.1 has no call that lists leases",
    "lease describe": "Apache Fluss 0.9.1 has no call that describes a lease",
    "lease renew": "Apache Fluss renews a lease when it is acquired again: use `lease acquire`",
    "snapshot trigger": "Apache Fluss takes KV snapshots on its own schedule "
                        "(the table's kv.snapshot.interval)",
    "scanner list": "Apache Fluss 0.9.1 has no scan sessions",
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


def connect(args):
    """A FlussConnection to this project's servers, after checking that some bootstrap server
    accepts connections (a cluster that is down is reported at once instead of after the retry
    timeout). An Apache Fluss cluster is refused in one line that says what it lacks."""
    from fluss_spark.client import FlussConnection
    from fluss_spark.client.backends import APACHE_FLUSS, detect_engine
    from fluss_spark.errors import UnsupportedVersion
    servers = _reachable_servers(args)
    if detect_engine(servers, timeout_s=2.0) == APACHE_FLUSS:
        command = _command(args)
        why = _NOT_ON_APACHE_FLUSS.get(command, "this command needs fluss_spark's own servers")
        raise UnsupportedVersion(f"`fluss-spark {command}` is not available on Apache Fluss "
                                 f"(the cluster at {servers}): {why}")
    user, password = credentials(args, servers) or (None, None)
    return FlussConnection(servers, request_timeout_s=getattr(args, "timeout", DEFAULT_TIMEOUT_S),
                           username=user, password=password)


def on_apache_fluss(args) -> bool:
    """Whether the bootstrap servers are an Apache Fluss cluster (probed)."""
    from fluss_spark.client.backends import APACHE_FLUSS, detect_engine
    return detect_engine(_reachable_servers(args), timeout_s=2.0) == APACHE_FLUSS


def connect_apache_fluss(args) -> "closing[ApacheFlussWireCluster]":
    """The Apache Fluss cluster at the bootstrap servers, for what only its client offers
    (creating and dropping tables); closed at the end of a ``with`` block."""
    from fluss_spark.client.apache_fluss import ApacheFlussWireCluster
    return closing(ApacheFlussWireCluster.connect(
        _reachable_servers(args), request_timeout_s=getattr(args, "timeout", DEFAULT_TIMEOUT_S)))


def no_snapshot_yet(table: str, apache_fluss: bool) -> str:
    """What to do about a table without a KV snapshot, on either engine."""
    if apache_fluss:
        return "Apache Fluss takes one every kv.snapshot.interval after a write"
    return (f"take one with `fluss-spark snapshot trigger {table}` or scan the current state "
            "with `fluss-spark scan --snapshot live`")


def connect_cluster(args) -> "closing[Cluster]":
    """The ``Cluster`` at the bootstrap servers, this project's or Apache Fluss (probed), for
    the commands that both engines serve; closed at the end of a ``with`` block."""
    from fluss_spark.client.backends import open_cluster
    servers = _reachable_servers(args)
    user, password = credentials(args, servers) or (None, None)
    return closing(open_cluster(servers,
                                request_timeout_s=getattr(args, "timeout", DEFAULT_TIMEOUT_S),
                                username=user, password=password))


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
    from fluss_spark.client.bootstrap import parse_bootstrap
    from fluss_spark.local.embedded import EmbeddedProcesses, read_state
    d = default_cluster_dir()
    if read_state(d) is None:
        return None
    local = EmbeddedProcesses.load(d)
    if set(parse_bootstrap(local.bootstrap_servers)) & set(parse_bootstrap(servers)):
        return local.credentials
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


def _pairs(items: Iterable[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{what} {item!r} must be key=value")
        out[key.strip()] = value.strip()
    return out
