"""The ``fluss-spark`` command: local cluster, tables, demo data, snapshots, leases, scans.

Human-readable tables by default; ``--json`` prints one JSON document instead. Errors print one
line ``error: ...`` on stderr and exit non-zero.
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import json
import os
import sys
from pathlib import Path
from typing import Any, Iterable

from fluss_spark.errors import ConfigError, FlussError

DEFAULT_TIMEOUT_S = 30.0


# -- argument parsing ---------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line and exit status 2."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see `{self.prog} --help`)\n")


def default_cluster_dir() -> Path:
    """``$FLUSS_SPARK_HOME`` or ``~/.fluss-spark/cluster``."""
    home = os.environ.get("FLUSS_SPARK_HOME")
    return Path(home) if home else Path.home() / ".fluss-spark" / "cluster"


def _common() -> argparse.ArgumentParser:
    # SUPPRESS lets the flags appear before or after the subcommand without one overwriting
    # the other with its default.
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                   help="print one JSON document instead of tables")
    p.add_argument("--bootstrap-servers", default=argparse.SUPPRESS, metavar="HOST:PORT[,..]",
                   help="servers to connect to (default: $FLUSS_BOOTSTRAP_SERVERS, else the "
                        "local cluster)")
    p.add_argument("--timeout", type=float, default=argparse.SUPPRESS, metavar="SECONDS",
                   help=f"request timeout including retries (default {DEFAULT_TIMEOUT_S:.0f})")
    return p


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    p = _Parser(prog="fluss-spark", parents=[common],
                description="Operate a fluss_spark cluster: tables, data, KV snapshots, leases.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def cmd(parent, name, help_, func):
        c = parent.add_parser(name, parents=[common], help=help_, description=help_)
        c.set_defaults(func=func)
        return c

    cluster = sub.add_parser("cluster", help="start, inspect and stop a local cluster")
    csub = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")
    c = cmd(csub, "start", "start a local cluster in the background (idempotent)", cmd_cluster_start)
    _dir_arg(c)
    c.add_argument("--tablets", type=int, help="number of tablet servers (default 1)")
    c.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                   help="use this ZooKeeper instead of starting one")
    c.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="server option, e.g. kv.scanner.ttl=1min (repeatable)")
    c.add_argument("--disable-api", action="append", default=[], metavar="GROUP",
                   help="leave out an API group (kv_snapshot_lease, scan_kv) to emulate an old server")
    _dir_arg(cmd(csub, "status", "every process of the local cluster, and metrics", cmd_cluster_status))
    _dir_arg(cmd(csub, "stop", "stop the local cluster", cmd_cluster_stop))

    table = sub.add_parser("table", help="create, list, describe and drop tables")
    tsub = table.add_subparsers(dest="action", required=True, metavar="ACTION")
    c = cmd(tsub, "create", "create a table", cmd_table_create)
    c.add_argument("table", help="db.table")
    c.add_argument("--schema", required=True, help='columns, e.g. "id BIGINT, name STRING"')
    c.add_argument("--primary-key", help="primary key column(s), comma separated")
    c.add_argument("--bucket-key", help="bucket key column(s) (default: the primary key)")
    c.add_argument("--buckets", type=int, default=1, help="number of buckets (default 1)")
    c.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="table property, e.g. kv.snapshot.interval=1min (repeatable)")
    c.add_argument("--if-not-exists", action="store_true", help="succeed if the table exists")
    cmd(tsub, "list", "list tables", cmd_table_list)
    cmd(tsub, "describe", "show a table's schema, keys, buckets and properties",
        cmd_table_describe).add_argument("table")
    c = cmd(tsub, "drop", "drop a table", cmd_table_drop)
    c.add_argument("table")
    c.add_argument("--if-exists", action="store_true", help="succeed if the table does not exist")

    c = cmd(sub, "produce", "write generated demo rows to a table", cmd_produce)
    c.add_argument("table")
    c.add_argument("--rows", type=int, required=True, help="rows to insert (PK) or append (log)")
    c.add_argument("--updates", type=int, default=0, help="upserts of random existing keys (PK)")
    c.add_argument("--deletes", type=int, default=0, help="deletes of random existing keys (PK)")
    c.add_argument("--seed", type=int, default=0, help="random seed (same seed, same data)")
    c.add_argument("--batch-size", type=int, default=10_000, help="rows per write call")

    snap = sub.add_parser("snapshot", help="trigger and list KV snapshots")
    ssub = snap.add_subparsers(dest="action", required=True, metavar="ACTION")
    c = cmd(ssub, "trigger", "take a KV snapshot of every bucket now", cmd_snapshot_trigger)
    c.add_argument("table")
    c.add_argument("--bucket", type=int, action="append", help="only these buckets (repeatable)")
    c = cmd(ssub, "list", "registered KV snapshots and the leases pinning them", cmd_snapshot_list)
    c.add_argument("table")
    c.add_argument("--bucket", type=int)

    lease = sub.add_parser("lease", help="KV snapshot leases")
    lsub = lease.add_subparsers(dest="action", required=True, metavar="ACTION")
    cmd(lsub, "list", "every lease", cmd_lease_list)
    cmd(lsub, "describe", "one lease and its pins", cmd_lease_describe).add_argument("lease_id")
    cmd(lsub, "drop", "remove a lease and all its pins", cmd_lease_drop).add_argument("lease_id")
    c = cmd(lsub, "acquire", "pin a table's latest KV snapshots", cmd_lease_acquire)
    c.add_argument("lease_id")
    c.add_argument("table")
    c.add_argument("--duration", default="1h", help="lease duration, e.g. 30min, 1h (default 1h)")
    c = cmd(lsub, "renew", "extend a lease", cmd_lease_renew)
    c.add_argument("lease_id")
    c.add_argument("--duration", default="1h", help="new duration from now (default 1h)")
    c = cmd(lsub, "release", "unpin a table's buckets", cmd_lease_release)
    c.add_argument("lease_id")
    c.add_argument("table")

    c = cmd(sub, "scan", "read a PK table's state through scan sessions", cmd_scan)
    c.add_argument("table")
    c.add_argument("--bucket", type=int, help="only this bucket (default: all)")
    c.add_argument("--snapshot", default="latest", metavar="latest|ID|live",
                   help="the latest snapshot (default), a snapshot id, or the live state")
    c.add_argument("--limit", type=int, help="at most this many rows")
    c.add_argument("--columns", help="only these columns, comma separated")
    c.add_argument("--format", choices=["table", "json", "arrow"], default=None,
                   help="output format (arrow: an Arrow IPC stream on stdout)")

    scanner = sub.add_parser("scanner", help="open scan sessions")
    scsub = scanner.add_subparsers(dest="action", required=True, metavar="ACTION")
    cmd(scsub, "list", "open scan sessions on every tablet server", cmd_scanner_list)

    cmd(sub, "metrics", "coordinator metrics (leases, leased snapshots per table)", cmd_metrics)

    c = cmd(sub, "log", "read a table's changelog", cmd_log)
    c.add_argument("table")
    c.add_argument("--bucket", type=int, help="only this bucket (default: all)")
    c.add_argument("--from", dest="start", default="earliest", metavar="earliest|latest|OFFSET",
                   help="where to start (default earliest)")
    c.add_argument("--limit", type=int, help="at most this many records per bucket")
    c.add_argument("--columns", help="only these columns, comma separated")
    _add_tier_commands(sub, cmd)
    return p


def _dir_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", type=Path, default=None,
                   help="cluster directory (default: $FLUSS_SPARK_HOME or ~/.fluss-spark/cluster)")


# -- output -------------------------------------------------------------------------------------
def _json_default(v: Any):
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, (set, frozenset, tuple)):
        return list(v)
    if isinstance(v, Path):
        return str(v)
    return str(v)


def emit_json(doc: Any, out=None) -> None:
    out = out or sys.stdout
    json.dump(doc, out, default=_json_default, indent=None)
    out.write("\n")


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, (list, tuple)):
        return ",".join(map(str, v))
    if isinstance(v, dict):
        return ",".join(f"{k}={val}" for k, val in v.items())
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, bytes):
        return v.hex()
    return str(v)


def print_table(rows: list[dict], columns: list[str] | None = None, out=None) -> None:
    """Aligned columns with a header line; '(none)' for an empty list."""
    out = out or sys.stdout
    if not rows:
        out.write("(none)\n")
        return
    columns = columns or list(rows[0])
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    out.write("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip() + "\n")
    for row in cells:
        out.write("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() + "\n")


def _fmt_ms(ms: int | None) -> str | None:
    if not ms:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


class _Progress:
    """A one-line progress bar on stderr, only on a terminal and never with --json."""

    def __init__(self, what: str, total: int | None, enabled: bool):
        self.what, self.total = what, total
        self.enabled = enabled and sys.stderr.isatty()
        self.done = 0

    def add(self, n: int) -> None:
        self.done += n
        if not self.enabled:
            return
        if self.total:
            frac = min(self.done / self.total, 1.0)
            bar = "#" * int(frac * 30)
            sys.stderr.write(f"\r{self.what} [{bar:<30}] {self.done}/{self.total}")
        else:
            sys.stderr.write(f"\r{self.what} {self.done} rows")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


# -- connections --------------------------------------------------------------------------------
def _json(args) -> bool:
    return bool(getattr(args, "json", False))


def bootstrap_servers(args) -> str:
    explicit = getattr(args, "bootstrap_servers", None) or os.environ.get("FLUSS_BOOTSTRAP_SERVERS")
    if explicit:
        return explicit
    from fluss_spark.testing.cluster import read_state
    d = default_cluster_dir()
    state = read_state(d)
    if state is None:
        raise ConfigError("no cluster to talk to: pass --bootstrap-servers, set "
                          f"FLUSS_BOOTSTRAP_SERVERS, or start one with `fluss-spark cluster start` "
                          f"(looked for {d / 'cluster.json'})")
    host = state.get("host", "127.0.0.1")
    return ",".join(f"{host}:{s['port']}" for s in state["servers"] if s.get("port"))


def connect(args):
    """A FlussConnection, after checking that some bootstrap server accepts connections (a
    cluster that is down is reported at once instead of after the retry timeout)."""
    from fluss_spark.client import FlussConnection
    from fluss_spark.client.connection import parse_bootstrap
    from fluss_spark.testing.ports import port_open
    servers = bootstrap_servers(args)
    if not any(port_open(h, p, timeout_s=2.0) for h, p in parse_bootstrap(servers)):
        raise FlussError(f"no server is reachable at {servers}; is the cluster running? "
                         "(`fluss-spark cluster status`)")
    return FlussConnection(servers, request_timeout_s=getattr(args, "timeout", DEFAULT_TIMEOUT_S))


def _columns_arg(text: str | None) -> list[str] | None:
    if text is None:
        return None
    cols = [c.strip() for c in text.split(",") if c.strip()]
    if not cols:
        raise ConfigError("--columns is empty")
    return cols


def _pairs(items: Iterable[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{what} {item!r} must be key=value")
        out[key.strip()] = value.strip()
    return out


# -- cluster ------------------------------------------------------------------------------------
def _cluster_dir(args) -> Path:
    return args.dir or default_cluster_dir()


def cmd_cluster_start(args) -> int:
    from fluss_spark.config import parse_server_options
    from fluss_spark.protocol.api import API_GROUPS
    from fluss_spark.testing.cluster import LocalCluster, read_state
    d = _cluster_dir(args)
    parse_server_options(args.option)   # refuse a bad option before starting anything
    for g in args.disable_api:
        if g not in API_GROUPS:
            raise ConfigError(f"unknown API group {g!r}; known: {', '.join(sorted(API_GROUPS))}")
    if args.tablets is not None and args.tablets < 1:
        raise ConfigError(f"--tablets must be at least 1, got {args.tablets}")
    if read_state(d) is not None and args.tablets is None and not args.zookeeper:
        cluster = LocalCluster.load(d)
        cluster.server_options = args.option or cluster.server_options
        cluster.disabled_apis = args.disable_api or cluster.disabled_apis
    else:
        cluster = LocalCluster(d, tablets=args.tablets or 1, zookeeper=args.zookeeper,
                               server_options=args.option, disabled_apis=args.disable_api)
    cluster.start()
    if _json(args):
        emit_json({"dir": str(d), "bootstrap_servers": cluster.bootstrap_servers,
                   "zookeeper": cluster.zookeeper_address, "processes": cluster.processes()})
    else:
        print(cluster.bootstrap_servers)
    return 0


def cmd_cluster_status(args) -> int:
    from fluss_spark.testing.cluster import LocalCluster
    d = _cluster_dir(args)
    cluster = LocalCluster.load(d)
    procs = cluster.processes()
    metrics = None
    coord_up = any(p["role"] == "coordinator" and p["alive"] for p in procs)
    if coord_up:
        from fluss_spark.client import FlussConnection
        try:
            with FlussConnection(cluster.bootstrap_servers, request_timeout_s=5.0) as conn:
                metrics = conn.admin().metrics()
        except FlussError:
            metrics = None   # coordinator still starting or not the active one: status only
    if _json(args):
        emit_json({"dir": str(d), "bootstrap_servers": cluster.bootstrap_servers,
                   "zookeeper": cluster.zookeeper_address, "processes": procs,
                   "metrics": metrics})
        return 0
    print(f"cluster {d}  bootstrap {cluster.bootstrap_servers}  zookeeper {cluster.zookeeper_address}")
    print_table(procs, ["role", "id", "pid", "address", "alive"])
    if metrics is not None:
        print()
        _print_metrics(metrics)
    return 0


def cmd_cluster_stop(args) -> int:
    from fluss_spark.testing.cluster import LocalCluster
    d = _cluster_dir(args)
    cluster = LocalCluster.load(d)
    cluster.stop()
    if _json(args):
        emit_json({"dir": str(d), "processes": cluster.processes()})
    else:
        print(f"stopped the cluster in {d}")
    return 0


# -- tables -------------------------------------------------------------------------------------
def _describe(info) -> dict:
    from fluss_spark.protocol.types import format_schema, format_type
    return {
        "table": info.name, "table_id": info.table_id, "schema": format_schema(info.schema),
        "columns": [{"name": f.name, "type": format_type(f.type), "nullable": f.nullable}
                    for f in info.schema],
        "primary_key": list(info.primary_key), "bucket_key": list(info.bucket_key),
        "num_buckets": info.num_buckets, "properties": dict(info.properties),
        "created_ms": info.created_ms,
        "assignment": [{"bucket": b, "tablet": t} for b, t in sorted(info.assignment.items())],
    }


def _print_description(d: dict) -> None:
    print(f"table        {d['table']} (id {d['table_id']})")
    print(f"kind         {'primary-key table' if d['primary_key'] else 'log table'}")
    print(f"primary key  {', '.join(d['primary_key']) or '-'}")
    print(f"bucket key   {', '.join(d['bucket_key']) or '-'}")
    print(f"buckets      {d['num_buckets']}")
    print(f"created      {_fmt_ms(d['created_ms'])}")
    props = ", ".join(f"{k}={v}" for k, v in sorted(d["properties"].items()))
    print(f"properties   {props or '-'}")
    print("columns:")
    print_table(d["columns"], ["name", "type", "nullable"])
    print("assignment:")
    print_table(d["assignment"], ["bucket", "tablet"])


def cmd_table_create(args) -> int:
    pk = _columns_arg(args.primary_key) or []
    bk = _columns_arg(args.bucket_key)
    with connect(args) as conn:
        info = conn.admin().create_table(args.table, args.schema, primary_key=pk, bucket_key=bk,
                                         num_buckets=args.buckets,
                                         properties=_pairs(args.property, "--property"),
                                         ignore_if_exists=args.if_not_exists)
    d = _describe(info)
    if _json(args):
        emit_json(d)
    else:
        print(f"created {info.name} (id {info.table_id}, {info.num_buckets} bucket(s))")
    return 0


def cmd_table_list(args) -> int:
    with connect(args) as conn:
        names = conn.admin().list_tables()
    if _json(args):
        emit_json([{"table": n} for n in names])
    else:
        print_table([{"table": n} for n in names])
    return 0


def cmd_table_describe(args) -> int:
    with connect(args) as conn:
        d = _describe(conn.admin().get_table(args.table))
    emit_json(d) if _json(args) else _print_description(d)
    return 0


def cmd_table_drop(args) -> int:
    with connect(args) as conn:
        conn.admin().drop_table(args.table, ignore_if_not_exists=args.if_exists)
    if _json(args):
        emit_json({"table": args.table, "dropped": True})
    else:
        print(f"dropped {args.table}")
    return 0


# -- produce ------------------------------------------------------------------------------------
def cmd_produce(args) -> int:
    from fluss_spark.testing.demo_data import DemoData
    for name in ("rows", "updates", "deletes"):
        if getattr(args, name) < 0:
            raise ConfigError(f"--{name} must not be negative")
    if args.batch_size < 1:
        raise ConfigError("--batch-size must be at least 1")
    with connect(args) as conn:
        info = conn.table(args.table)
        if not info.has_primary_key and (args.updates or args.deletes):
            raise ConfigError(f"{info.name} is a log table: --updates and --deletes need a "
                              "primary-key table")
        gen = DemoData(info.schema, info.primary_key, seed=args.seed)
        writer = conn.writer(info)
        total = args.rows + args.updates + min(args.deletes, args.rows)
        progress = _Progress(f"produce {info.name}", total, enabled=not _json(args))
        counts = {"inserts" if info.has_primary_key else "appends": 0}
        if info.has_primary_key:
            counts.update(updates=0, deletes=0)
        for start in range(0, args.rows, args.batch_size):
            batch = gen.rows(start, min(start + args.batch_size, args.rows))
            (writer.upsert if info.has_primary_key else writer.append)(batch)
            counts["inserts" if info.has_primary_key else "appends"] += batch.num_rows
            progress.add(batch.num_rows)
        if info.has_primary_key and args.rows:
            for start in range(0, args.updates, args.batch_size):
                n = min(args.batch_size, args.updates - start)
                batch = gen.updates(n, args.rows)
                writer.upsert(batch)
                counts["updates"] += n
                progress.add(n)
            deleted = gen.deletes(min(args.deletes, args.rows), args.rows)
            for start in range(0, deleted.num_rows, args.batch_size):
                part = deleted.slice(start, args.batch_size)
                writer.delete(part)
                counts["deletes"] += part.num_rows
                progress.add(part.num_rows)
        progress.close()
    written = sum(counts.values())
    if _json(args):
        emit_json({"table": info.name, "rows": written, **counts})
    else:
        detail = ", ".join(f"{v} {k}" for k, v in counts.items())
        print(f"wrote {written} rows to {info.name} ({detail})")
    return 0


# -- snapshots ----------------------------------------------------------------------------------
def _snapshot_row(name: str, s) -> dict:
    return {"table": name, "bucket": s.bucket, "snapshot_id": s.snapshot_id,
            "log_offset": s.log_offset, "row_count": s.row_count, "size_bytes": s.size_bytes,
            "created_ms": s.created_ms, "created": _fmt_ms(s.created_ms), "path": s.path,
            "pinned_by": list(s.pinned_by)}


def cmd_snapshot_trigger(args) -> int:
    with connect(args) as conn:
        info = conn.table(args.table)
        if not info.has_primary_key:
            raise ConfigError(f"{info.name} is a log table: KV snapshots exist only for "
                              "primary-key tables")
        snaps = conn.admin().trigger_kv_snapshot(info, args.bucket)
    rows = []
    for b, s in snaps.items():
        rows.append(_snapshot_row(info.name, s) if s else
                    {"table": info.name, "bucket": b, "snapshot_id": None, "log_offset": None,
                     "row_count": None, "size_bytes": None, "created_ms": None, "created": None,
                     "path": None, "pinned_by": []})
    if _json(args):
        emit_json(rows)
    else:
        print_table(rows, ["bucket", "snapshot_id", "log_offset", "row_count", "created"])
    return 0


def cmd_snapshot_list(args) -> int:
    with connect(args) as conn:
        info = conn.table(args.table)
        snaps = conn.admin().list_kv_snapshots(info, args.bucket)
    rows = [_snapshot_row(info.name, s) for s in snaps]
    if _json(args):
        emit_json(rows)
    else:
        print_table(rows, ["bucket", "snapshot_id", "log_offset", "row_count", "created",
                           "pinned_by"])
    return 0


# -- leases -------------------------------------------------------------------------------------
def _lease_doc(lease, names: dict[int, str]) -> dict:
    return {
        "lease_id": lease.lease_id, "expires_at_ms": lease.expires_at_ms,
        "expires": _fmt_ms(lease.expires_at_ms), "created_ms": lease.created_ms,
        "pin_count": lease.pin_count,
        "tables": [{"table_id": t, "table": names.get(t),
                    "pins": [{"bucket": b, "snapshot_id": s} for b, s in sorted(pins.items())]}
                   for t, pins in sorted(lease.tables.items())],
    }


def _table_names(conn) -> dict[int, str]:
    try:
        return {t.table_id: t.name for t in conn.refresh_metadata()}
    except FlussError:
        return {}


def cmd_lease_list(args) -> int:
    with connect(args) as conn:
        leases = conn.admin().list_kv_snapshot_leases()
        names = _table_names(conn) if leases else {}
    docs = [_lease_doc(l, names) for l in leases]
    if _json(args):
        emit_json(docs)
    else:
        print_table([{**d, "tables": [t["table"] or t["table_id"] for t in d["tables"]],
                      "created": _fmt_ms(d["created_ms"])} for d in docs],
                    ["lease_id", "expires", "created", "pin_count", "tables"])
    return 0


def cmd_lease_describe(args) -> int:
    with connect(args) as conn:
        lease = conn.admin().describe_kv_snapshot_lease(args.lease_id)
        d = _lease_doc(lease, _table_names(conn))
    if _json(args):
        emit_json(d)
        return 0
    print(f"lease      {d['lease_id']}")
    print(f"expires    {d['expires']} ({d['expires_at_ms']})")
    print(f"created    {_fmt_ms(d['created_ms'])}")
    print(f"pins       {d['pin_count']}")
    print_table([{"table": t["table"] or t["table_id"], "bucket": p["bucket"],
                  "snapshot_id": p["snapshot_id"]} for t in d["tables"] for p in t["pins"]])
    return 0


def cmd_lease_drop(args) -> int:
    with connect(args) as conn:
        conn.admin().drop_kv_snapshot_lease(args.lease_id)
    if _json(args):
        emit_json({"lease_id": args.lease_id, "dropped": True})
    else:
        print(f"dropped lease {args.lease_id}")
    return 0


def cmd_lease_acquire(args) -> int:
    from fluss_spark.config import parse_duration_ms
    duration_ms = parse_duration_ms(args.duration, "--duration")
    with connect(args) as conn:
        admin = conn.admin()
        info = conn.table(args.table)
        latest = admin.latest_kv_snapshots(info)
        if not latest:
            raise ConfigError(f"table {info.name} has no KV snapshots to pin; take one with "
                              f"`fluss-spark snapshot trigger {info.name}`")
        pins = {b: s.snapshot_id for b, s in latest.items()}
        unavailable = admin.acquire_kv_snapshot_lease(args.lease_id, duration_ms,
                                                      {info.table_id: pins}).get(info.table_id, {})
        lease = admin.describe_kv_snapshot_lease(args.lease_id)
    pinned = [{"bucket": b, "snapshot_id": s} for b, s in sorted(pins.items())
              if b not in unavailable]
    missing = [{"bucket": b, "snapshot_id": s} for b, s in sorted(unavailable.items())]
    if _json(args):
        emit_json({"lease_id": args.lease_id, "table": info.name, "expires_at_ms": lease.expires_at_ms,
                   "pinned": pinned, "unavailable": missing})
    else:
        print(f"lease {args.lease_id} pins {len(pinned)} snapshot(s) of {info.name} until "
              f"{_fmt_ms(lease.expires_at_ms)} UTC")
        print_table([{**p, "status": "pinned"} for p in pinned]
                    + [{**p, "status": "unavailable"} for p in missing],
                    ["bucket", "snapshot_id", "status"])
    return 0


def cmd_lease_renew(args) -> int:
    from fluss_spark.config import parse_duration_ms
    duration_ms = parse_duration_ms(args.duration, "--duration")
    with connect(args) as conn:
        expires = conn.admin().renew_kv_snapshot_lease(args.lease_id, duration_ms)
    if _json(args):
        emit_json({"lease_id": args.lease_id, "expires_at_ms": expires})
    else:
        print(f"lease {args.lease_id} now expires at {_fmt_ms(expires)} UTC")
    return 0


def cmd_lease_release(args) -> int:
    with connect(args) as conn:
        info = conn.table(args.table)
        remaining = conn.admin().release_kv_snapshot_lease(args.lease_id,
                                                           {info.table_id: info.buckets})
    if _json(args):
        emit_json({"lease_id": args.lease_id, "table": info.name, "remaining_pins": remaining})
    else:
        print(f"released {info.name} from lease {args.lease_id}; {remaining} pin(s) remain")
    return 0


# -- scans and logs -----------------------------------------------------------------------------
def _write_rows(batches: Iterable, fmt: str, schema) -> int:
    """Print record batches as a table, JSON array or Arrow IPC stream; returns rows written."""
    import pyarrow as pa
    if fmt == "arrow":
        out = sys.stdout.buffer
        n = 0
        with pa.ipc.new_stream(out, schema) as w:
            for b in batches:
                w.write_batch(b)
                n += b.num_rows
        out.flush()
        return n
    rows = []
    for b in batches:
        rows.extend(b.to_pylist())
    if fmt == "json":
        emit_json(rows)
    else:
        print_table(rows, schema.names)
    return len(rows)


def cmd_scan(args) -> int:
    fmt = args.format or ("json" if _json(args) else "table")
    if args.limit is not None and args.limit < 1:
        raise ConfigError("--limit must be at least 1")
    spec = args.snapshot.strip().lower()
    if spec not in ("latest", "live") and not spec.isdigit():
        raise ConfigError(f"--snapshot must be latest, live or a snapshot id, got {args.snapshot!r}")
    if spec.isdigit() and args.bucket is None:
        raise ConfigError("--snapshot ID names one bucket's snapshot: add --bucket")
    projection = _columns_arg(args.columns)
    with connect(args) as conn:
        info = conn.table(args.table)
        if not info.has_primary_key:
            raise ConfigError(f"{info.name} is a log table: scan reads primary-key tables; use "
                              f"`fluss-spark log {info.name}`")
        if projection:
            unknown = [c for c in projection if c not in info.schema.names]
            if unknown:
                raise ConfigError(f"--columns: {', '.join(unknown)} not in {info.name} "
                                  f"({', '.join(info.schema.names)})")
        buckets = [args.bucket] if args.bucket is not None else info.buckets
        if args.bucket is not None and not 0 <= args.bucket < info.num_buckets:
            raise ConfigError(f"{info.name} has buckets 0..{info.num_buckets - 1}, not {args.bucket}")
        plan: list[tuple[int, int | None]] = []
        if spec == "latest":
            latest = conn.admin().latest_kv_snapshots(info)
            plan = [(b, latest[b].snapshot_id) for b in buckets if b in latest]
            if not plan:
                raise ConfigError(f"{info.name} has no KV snapshot yet: take one with "
                                  f"`fluss-spark snapshot trigger {info.name}` or scan the "
                                  "current state with --snapshot live")
        elif spec == "live":
            plan = [(b, None) for b in buckets]
        else:
            plan = [(buckets[0], int(spec))]
        scanner = conn.kv_scanner(info)
        schema = _project_schema(info.schema, projection)
        total = (sum(latest[b].row_count for b, _ in plan) if spec == "latest" else None)
        if total is not None and args.limit is not None:
            total = min(total, args.limit)
        progress = _Progress(f"scan {info.name}", total,
                             enabled=fmt == "table" and not _json(args))

        def batches():
            remaining = args.limit
            for bucket, snapshot_id in plan:
                if remaining is not None and remaining <= 0:
                    return
                for b in scanner.scan(bucket, snapshot_id=snapshot_id, live=snapshot_id is None,
                                      projection=projection, limit=remaining):
                    if remaining is not None:
                        b = b.slice(0, remaining)
                        remaining -= b.num_rows
                    if b.num_rows:
                        progress.add(b.num_rows)
                        yield b.select(schema.names) if b.schema.names != schema.names else b
                    if remaining is not None and remaining <= 0:
                        return

        try:
            _write_rows(batches(), fmt, schema)
        finally:
            progress.close()
    return 0


def _project_schema(schema, projection):
    import pyarrow as pa
    return pa.schema([schema.field(c) for c in projection]) if projection else schema


def cmd_scanner_list(args) -> int:
    with connect(args) as conn:
        rows = conn.admin().list_scanners()
    if _json(args):
        emit_json(rows)
    else:
        print_table(rows, ["server_id", "scanner_id", "table_id", "bucket", "snapshot_id",
                           "age_ms", "idle_ms", "rows_served", "next_row"])
    return 0


def _print_metrics(m: dict) -> None:
    print_table([{"metric": k, "value": v} for k, v in sorted((m.get("metrics") or {}).items())])
    tables = m.get("tables") or {}
    if tables:
        print()
        print_table([{"table": t, **vals} for t, vals in sorted(tables.items())])


def cmd_metrics(args) -> int:
    with connect(args) as conn:
        m = conn.admin().metrics()
    emit_json(m) if _json(args) else _print_metrics(m)
    return 0


def cmd_log(args) -> int:
    import pyarrow as pa
    if args.limit is not None and args.limit < 1:
        raise ConfigError("--limit must be at least 1")
    start_spec = args.start.strip().lower()
    if start_spec not in ("earliest", "latest") and not start_spec.isdigit():
        raise ConfigError(f"--from must be earliest, latest or an offset, got {args.start!r}")
    with connect(args) as conn:
        info = conn.table(args.table)
        buckets = [args.bucket] if args.bucket is not None else info.buckets
        admin = conn.admin()
        ends = admin.list_offsets(info, buckets, "latest")
        if start_spec.isdigit():
            starts = {b: int(start_spec) for b in buckets}
        else:
            starts = admin.list_offsets(info, buckets, start_spec)
        scanner = conn.log_scanner(info, _columns_arg(args.columns))
        schema = pa.schema([pa.field("_bucket", pa.int32())] + list(scanner.schema))

        def batches():
            for b in buckets:
                end = ends[b] if args.limit is None else min(ends[b], starts[b] + args.limit)
                for rb in scanner.read(b, starts[b], end) if starts[b] < end else ():
                    col = pa.array([b] * rb.num_rows, pa.int32())
                    yield pa.RecordBatch.from_arrays([col, *rb.columns], schema=schema)

        _write_rows(batches(), "json" if _json(args) else "table", schema)
    return 0


# -- tiering and spark-submit packaging ---------------------------------------------------------
def _add_tier_commands(sub, cmd) -> None:
    from fluss_spark.tiering.run import add_run_args
    tier = sub.add_parser("tier", help="keep lake copies of tables (a Spark job) and show progress")
    tsub = tier.add_subparsers(dest="action", required=True, metavar="ACTION")
    c = cmd(tsub, "run", "run the tiering Spark job in this process (see examples/tier_tables.py "
            "for spark-submit)", cmd_tier_run)
    add_run_args(c)
    c.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    c = cmd(tsub, "status", "per-table progress of a lake: rows tiered, lag, last round",
            cmd_tier_status)
    c.add_argument("--lake", required=True, type=Path, help="the lake directory")
    c = cmd(sub, "package", "build the --py-files zip that ships fluss_spark to Spark nodes",
            cmd_package)
    c.add_argument("--out", type=Path, default=Path("dist/fluss_spark.zip"),
                   help="zip to write (default dist/fluss_spark.zip)")
    c.add_argument("--include-server", action="store_true",
                   help="also include the server, ZooKeeper and test-cluster modules")


def cmd_tier_run(args) -> int:
    from fluss_spark.tiering.run import config_from_args, run_job
    config = config_from_args(args, bootstrap_servers(args))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master(args.master)
             .appName(f"fluss-tiering {config.table_pattern}")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        doc_rows = run_job(spark, config, args.duration, out=open(os.devnull, "w"))["tables"]
    finally:
        spark.stop()
    if _json(args):
        emit_json(doc_rows)
    else:
        print_table([{**r, "last_round": _fmt_ms(r.get("last_round_ms"))} for r in doc_rows],
                    _TIER_COLUMNS)
    return 0


_TIER_COLUMNS = ["table", "kind", "rows_tiered", "lake_rows", "lag", "last_round", "batch_id",
                 "snapshot_complete", "active", "error"]


def cmd_tier_status(args) -> int:
    from fluss_spark.tiering.job import JOB_FILE
    from fluss_spark.tiering.progress import TIERING_DIR, job_status
    lake = args.lake
    job_file = lake / TIERING_DIR / JOB_FILE
    if not lake.is_dir():
        raise ConfigError(f"lake directory {lake} does not exist")
    servers = getattr(args, "bootstrap_servers", None) or os.environ.get("FLUSS_BOOTSTRAP_SERVERS")
    if not servers and job_file.exists():
        servers = json.loads(job_file.read_text()).get("bootstrap_servers")
    latest = None
    if servers:
        # An exact lag needs the tables' latest offsets; without the cluster, the job's last one.
        from fluss_spark.client import FlussConnection
        from fluss_spark.tiering.lake import list_lake_tables
        try:
            with FlussConnection(servers, request_timeout_s=getattr(args, "timeout", 5.0)) as conn:
                admin = conn.admin()
                latest = {}
                for t in list_lake_tables(lake):
                    name = t.manifest().table
                    if admin.table_exists(name):
                        latest[name] = admin.list_offsets(name, spec="latest")
        except FlussError:
            latest = None
    doc = job_status(lake, latest)
    if _json(args):
        emit_json(doc)
        return 0
    print(f"lake {doc['lake']}  job {doc['job_id'] or '-'}  lease {doc['lease_id'] or '-'}  "
          f"status updated {_fmt_ms(doc['updated_ms']) or '-'}")
    rows = [{**r, "last_round": _fmt_ms(r.get("last_round_ms"))} for r in doc["tables"]]
    print_table(rows, _TIER_COLUMNS)
    return 0


def cmd_package(args) -> int:
    from fluss_spark.tiering.submit import build_pyfiles_zip
    import zipfile
    out = build_pyfiles_zip(args.out, include_server=args.include_server)
    with zipfile.ZipFile(out) as zf:
        n = len(zf.namelist())
    doc = {"path": str(out), "bytes": out.stat().st_size, "files": n}
    if _json(args):
        emit_json(doc)
    else:
        print(f"wrote {out} ({n} modules, {doc['bytes']} bytes); use: spark-submit --py-files {out} ...")
    return 0


# -- entry point --------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return args.func(args) or 0
    except (FlussError, TimeoutError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        kind = "" if type(e) in (FlussError, ConfigError) else f"{type(e).__name__}: "
        print(f"error: {kind}{first}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Output piped into `head` and closed: not an error of ours.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0


if __name__ == "__main__":
    sys.exit(main())
