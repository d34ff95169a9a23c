"""``fluss-spark cluster``: start, inspect and stop a local cluster."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from fluss_spark.cli.common import _json, bounded, default_cluster_dir
from fluss_spark.cli.output import _print_metrics, emit_json, print_table
from fluss_spark.errors import ConfigError, FlussError
from fluss_spark.local.apache_fluss_jars import DEFAULT_VERSION as DEFAULT_FLUSS_VERSION

if TYPE_CHECKING:
    from fluss_spark.local.either import AnyLocalCluster

ENGINES = ("embedded", "apache-fluss")


def add_commands(sub, cmd) -> None:
    """Register `cluster start|status|stop`."""
    cluster = sub.add_parser("cluster", help="start, inspect and stop a local cluster")
    csub = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")
    c = cmd(csub, "start", "start a local cluster in the background (idempotent); with --tls it "
            "listens with TLS (with --sasl the login runs inside TLS): a CA made for the cluster "
            "signs a certificate for localhost and its host (DIR/security/tls/, mode 600), which "
            "the commands of this machine trust", cmd_cluster_start)
    _dir_arg(c)
    c.add_argument("--engine", choices=ENGINES, default=None,
                   help="embedded: this project's servers; apache-fluss: a real Apache Fluss "
                        "release from Maven Central (needs Java; its jars are fetched once). "
                        "Default: the engine of the cluster already in --dir, else embedded")
    c.add_argument("--fluss-version", default=None, metavar="VERSION",
                   help="Apache Fluss release for --engine apache-fluss (default "
                        f"{DEFAULT_FLUSS_VERSION})")
    c.add_argument("--tablets", type=bounded(int, 1, 64),
                   help="number of tablet servers (default 1)")
    c.add_argument("--port", type=bounded(int, 1, 65535),
                   help="the coordinator's port, the first address clients are given (default: "
                        "the port it had in --dir, else a free one); tablets take free ports")
    c.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                   help="use this ZooKeeper instead of starting one")
    c.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="server option, e.g. kv.scanner.ttl=1min (repeatable)")
    c.add_argument("--sasl", action="store_true",
                   help="require SASL PLAIN authentication; the super user 'admin' (and, on the "
                        "embedded engine, the servers' 'internal' principal) get random "
                        "passwords in DIR/security/users")
    c.add_argument("--remote-storage", choices=("s3",), default=None,
                   help="put remote.data.dir (KV snapshots, tiered log) in an object store "
                        "started beside the cluster: s3 is a local SeaweedFS S3 store (built "
                        "once with Go); its endpoint and credentials file are in `cluster "
                        "status --json`. Default: a directory of the cluster")
    c.add_argument("--disable-api", action="append", default=[], metavar="GROUP",
                   help="leave out an API group (kv_snapshot_lease, scan_kv) to emulate an old "
                        "server")
    _dir_arg(cmd(csub, "status", "every process of the local cluster, and metrics",
                 cmd_cluster_status))
    _dir_arg(cmd(csub, "stop", "stop the local cluster", cmd_cluster_stop))


def _tls(args) -> bool:
    """``cluster start --tls`` (the flag every command has: here the cluster listens with TLS)."""
    return bool(getattr(args, "tls", False))


def _dir_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", type=Path, default=None,
                   help="cluster directory (default: $FLUSS_SPARK_HOME or ~/.fluss-spark/cluster)")


def _cluster_dir(args) -> Path:
    return args.dir or default_cluster_dir()


def engine_of(d: Path) -> str | None:
    """The engine of the cluster whose state is in ``d`` (None when there is none)."""
    from fluss_spark.local import apache_fluss
    from fluss_spark.local.embedded import STATE_FILE
    if (d / apache_fluss.STATE_FILE).exists():
        return apache_fluss.ENGINE
    if (d / STATE_FILE).exists():
        return "embedded"
    return None


def start_engine(args) -> str:
    """The engine ``cluster start`` runs: --engine, else the one already in --dir, else
    embedded; a ConfigError when --engine names another engine than the cluster in --dir."""
    existing = engine_of(_cluster_dir(args))
    engine = args.engine or existing or "embedded"
    if existing is not None and engine != existing:
        raise ConfigError(f"{_cluster_dir(args)} holds a cluster of engine {existing}; stop it "
                          f"and use another --dir for engine {engine}")
    if engine != "apache-fluss":
        if args.fluss_version:
            raise ConfigError("--fluss-version needs --engine apache-fluss")
    elif args.disable_api or _tls(args):
        raise ConfigError("--tls and --disable-api are options of the embedded engine (Apache "
                          "Fluss has no TLS listeners)")
    return engine


def cmd_cluster_start(args) -> int:
    if start_engine(args) == "apache-fluss":
        return _start_apache_fluss(args)
    from fluss_spark.config import parse_server_options
    from fluss_spark.protocol.api import API_GROUPS
    from fluss_spark.local.embedded import EmbeddedProcesses, read_state
    d = _cluster_dir(args)
    parse_server_options(args.option)   # refuse a bad option before starting anything
    for g in args.disable_api:
        if g not in API_GROUPS:
            raise ConfigError(f"unknown API group {g!r}; known: {', '.join(sorted(API_GROUPS))}")
    state = read_state(d)
    if state is not None and args.tablets is None and not args.zookeeper:
        cluster = EmbeddedProcesses.load(d)
        cluster.server_options = args.option or cluster.server_options
        cluster.disabled_apis = args.disable_api or cluster.disabled_apis
    else:
        cluster = EmbeddedProcesses(d, tablets=args.tablets or 1,
                                    zookeeper=args.zookeeper or _saved_zookeeper(state),
                                    server_options=args.option, disabled_apis=args.disable_api,
                                    sasl=args.sasl, tls=_tls(args),
                                    remote_storage=args.remote_storage)
    return _started(args, cluster, {"dir": str(d)})


def _saved_zookeeper(state: dict | None) -> str | None:
    """The external ZooKeeper a cluster directory's saved state names (None: its own): a restart
    with another --tablets keeps using it."""
    zk = (state or {}).get("zookeeper") or {}
    return zk.get("address") if zk.get("external") else None


def _start_apache_fluss(args) -> int:
    from fluss_spark.local.apache_fluss import ApacheFlussProcesses, parse_options, read_state
    d = _cluster_dir(args)
    options = parse_options(args.option)   # refuse a bad option before starting anything
    state = read_state(d)
    version = args.fluss_version or (state or {}).get("fluss_version") or DEFAULT_FLUSS_VERSION
    if state is not None and args.tablets is None and not args.zookeeper:
        cluster = ApacheFlussProcesses.load(d)
        if args.fluss_version and args.fluss_version != cluster.version:
            raise ConfigError(f"{d} holds Apache Fluss {cluster.version}; stop it and use another "
                              f"--dir for {args.fluss_version}")
        if args.sasl and not cluster.sasl:
            raise ConfigError(f"{d} holds an Apache Fluss cluster without SASL; stop it and use "
                              "another --dir for --sasl")
        cluster.options.update(options)
    else:
        cluster = ApacheFlussProcesses(d, tablets=args.tablets or 1, version=version,
                                       zookeeper=args.zookeeper or _saved_zookeeper(state),
                                       options=options, sasl=args.sasl,
                                       remote_storage=args.remote_storage)
    return _started(args, cluster, {"dir": str(d), "engine": "apache-fluss",
                                    "fluss_version": cluster.version})


def _started(args, cluster: "AnyLocalCluster", doc: dict) -> int:
    """Start ``cluster`` on ``--port``, a line on stderr as each process comes up; then print
    its address on stdout (what ``$(fluss-spark cluster start)`` captures) and the ``export``
    line that points the CLI, the examples and Spark jobs at it on stderr (``--json``: one
    document, nothing else)."""
    if args.remote_storage not in (None, cluster.remote_storage):
        raise ConfigError(f"{cluster.base_dir} holds a cluster whose remote storage is "
                          f"{cluster.remote_storage or 'a local directory'}; stop it and use "
                          f"another --dir for --remote-storage {args.remote_storage}")
    cluster.pin_coordinator_port(args.port)
    if not _json(args):
        cluster.report = _stderr_line
    cluster.start()
    if _json(args):
        emit_json({**doc, "bootstrap_servers": cluster.bootstrap_servers,
                   "zookeeper": cluster.zookeeper_address, "processes": cluster.processes(),
                   **_remote_storage(cluster)})
        return 0
    print(cluster.bootstrap_servers, flush=True)
    _stderr_line(f"export FLUSS_BOOTSTRAP_SERVERS={cluster.bootstrap_servers}")
    store = cluster.object_store
    if store is not None:
        _stderr_line(f"remote.data.dir is {cluster.remote_data_uri} on {store.endpoint} "
                     f"(credentials: {store.credentials_file})")
    return 0


def _remote_storage(cluster: "AnyLocalCluster") -> dict:
    """``remote_data_dir`` (a local path or an ``s3://`` URI) and ``remote_storage``: the
    object store's endpoint, region, bucket and credentials file (None without one)."""
    return {"remote_data_dir": cluster.remote_data_uri,
            "remote_storage": cluster.remote_storage_state()}


def _stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _status_apache_fluss(args, d: Path) -> int:
    from fluss_spark.local.apache_fluss import ApacheFlussProcesses
    cluster = ApacheFlussProcesses.load(d)
    procs = cluster.processes()
    if _json(args):
        emit_json({"dir": str(d), "engine": "apache-fluss", "fluss_version": cluster.version,
                   "bootstrap_servers": cluster.bootstrap_servers,
                   "zookeeper": cluster.zookeeper_address, "processes": procs, "metrics": None,
                   "users_file": str(cluster.users_file) if cluster.sasl else None,
                   **_remote_storage(cluster)})
        return 0
    print(f"cluster {d}  Apache Fluss {cluster.version}  bootstrap {cluster.bootstrap_servers}  "
          f"zookeeper {cluster.zookeeper_address}")
    print_table(procs, ["role", "id", "pid", "address", "alive"])
    _print_remote_storage(cluster)
    return 0


def _print_remote_storage(cluster: "AnyLocalCluster") -> None:
    store = cluster.object_store
    if store is not None:
        print(f"remote.data.dir {cluster.remote_data_uri}  endpoint {store.endpoint}  "
              f"credentials {store.credentials_file}")


def cmd_cluster_status(args) -> int:
    from fluss_spark.local.embedded import EmbeddedProcesses
    d = _cluster_dir(args)
    if engine_of(d) == "apache-fluss":
        return _status_apache_fluss(args, d)
    cluster = EmbeddedProcesses.load(d)
    procs = cluster.processes()
    metrics = None
    coord_up = any(p["role"] == "coordinator" and p["alive"] for p in procs)
    if coord_up:
        try:
            with cluster.connection(request_timeout_s=5.0) as conn:
                metrics = conn.admin().metrics()
        except FlussError:
            metrics = None   # coordinator still starting or not the active one: status only
    if _json(args):
        emit_json({"dir": str(d), "bootstrap_servers": cluster.bootstrap_servers,
                   "zookeeper": cluster.zookeeper_address, "processes": procs,
                   "metrics": metrics,
                   "users_file": str(cluster.users_file) if cluster.sasl else None,
                   "tls_ca_file": str(cluster.tls_files.ca_file) if cluster.tls else None,
                   **_remote_storage(cluster)})
        return 0
    print(f"cluster {d}  bootstrap {cluster.bootstrap_servers}  "
          f"zookeeper {cluster.zookeeper_address}")
    print_table(procs, ["role", "id", "pid", "address", "alive"])
    _print_remote_storage(cluster)
    if metrics is not None:
        print()
        _print_metrics(metrics)
    return 0


def cmd_cluster_stop(args) -> int:
    from fluss_spark.local.apache_fluss import ApacheFlussProcesses
    from fluss_spark.local.embedded import EmbeddedProcesses
    d = _cluster_dir(args)
    cluster: EmbeddedProcesses | ApacheFlussProcesses
    cluster = (ApacheFlussProcesses.load(d) if engine_of(d) == "apache-fluss"
               else EmbeddedProcesses.load(d))
    cluster.stop()
    if _json(args):
        emit_json({"dir": str(d), "processes": cluster.processes()})
    else:
        print(f"stopped the cluster in {d}")
    return 0
