"""``fluss-spark scan``, ``scanner list``, ``metrics``, ``log``: read table state and changelogs."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from typing import Iterable

from fluss_spark.cli.common import (MAX_BUCKETS, MAX_COUNT, _columns_arg, _json, bootstrap_servers,
                                    bounded, connect, connect_cluster, embedded_connection,
                                    no_snapshot_yet, not_available)
from fluss_spark.cli.output import _print_metrics, emit_json, print_table
from fluss_spark.cli.partitions import (PARTITION_HELP, cluster_partition_names,
                                        partition_names)
from fluss_spark.cli.progress import Progress
from fluss_spark.errors import ConfigError


def add_commands(sub, cmd) -> None:
    """Register `scan`, `scanner list`, `metrics` and `log`."""
    c = cmd(sub, "scan", "read a PK table's KV snapshot (or live state) through scan sessions; on "
            "Apache Fluss from the snapshot's files", cmd_scan)
    c.add_argument("table")
    c.add_argument("--bucket", type=bounded(int, 0, MAX_BUCKETS - 1),
                   help="only this bucket (default: all)")
    c.add_argument("--snapshot", default="latest", metavar="latest|ID|live",
                   help="the latest snapshot (default), a snapshot id, or the live state")
    c.add_argument("--limit", type=bounded(int, 1, MAX_COUNT), help="at most this many rows")
    c.add_argument("--columns", help="only these columns, comma separated")
    c.add_argument("--partition", metavar="SPEC",
                   help=PARTITION_HELP + " (default: every partition)")
    c.add_argument("--format", choices=["table", "json", "arrow"], default=None,
                   help="output format (arrow: an Arrow IPC stream on stdout)")

    scanner = sub.add_parser("scanner", help="open scan sessions")
    scsub = scanner.add_subparsers(dest="action", required=True, metavar="ACTION")
    cmd(scsub, "list", "open scan sessions on every tablet server", cmd_scanner_list)

    cmd(sub, "metrics", "coordinator metrics (leases, leased snapshots per table)", cmd_metrics)

    c = cmd(sub, "log", "read a table's changelog", cmd_log)
    c.add_argument("table")
    c.add_argument("--bucket", type=bounded(int, 0, MAX_BUCKETS - 1),
                   help="only this bucket (default: all)")
    c.add_argument("--from", dest="start", default="earliest", metavar="earliest|latest|OFFSET",
                   help="where to start (default earliest)")
    c.add_argument("--limit", type=bounded(int, 1, MAX_COUNT),
                   help="at most this many records per bucket")
    c.add_argument("--columns", help="only these columns, comma separated")


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
    spec = args.snapshot.strip().lower()
    if spec not in ("latest", "live") and not spec.isdigit():
        raise ConfigError("--snapshot must be latest, live or a snapshot id, "
                          f"got {args.snapshot!r}")
    if spec.isdigit() and args.bucket is None:
        raise ConfigError("--snapshot ID names one bucket's snapshot: add --bucket")
    projection = _columns_arg(args.columns)
    with ExitStack() as stack:
        cluster = stack.enter_context(connect_cluster(args))
        caps = cluster.capabilities()
        if spec == "live" and not caps.scan_sessions:
            raise not_available(args, bootstrap_servers(args),
                                "it serves no reads of a bucket's live state; scan its latest KV "
                                "snapshot (--snapshot latest)", command="scan --snapshot live")
        if not caps.scan_sessions:
            # The cluster's own snapshot reads (Apache Fluss: the snapshot's files).
            info = cluster.get_table(args.table)
            parts = cluster_partition_names(cluster, info, args.partition)

            def latest_snapshots(partition):
                return cluster.latest_kv_snapshots(info.name, partition=partition)

            def read(partition, bucket, snapshot_id, limit):
                return cluster.read_snapshot(info.name, bucket, snapshot_id,
                                             projection=projection, limit=limit,
                                             partition=partition)
        else:
            # Scan sessions, which also read the live state.
            conn = embedded_connection(args, cluster)
            info = conn.table(args.table)
            parts = partition_names(conn, info, args.partition)
            scanners = {p: conn.kv_scanner(info, p) for p in parts}

            def latest_snapshots(partition):
                return conn.admin().latest_kv_snapshots(info, partition=partition)

            def read(partition, bucket, snapshot_id, limit):
                return scanners[partition].scan(bucket, snapshot_id=snapshot_id,
                                                live=snapshot_id is None,
                                                projection=projection, limit=limit)
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
            raise ConfigError(f"{info.name} has buckets 0..{info.num_buckets - 1}, "
                              f"not {args.bucket}")
        if spec.isdigit() and len(parts) > 1:
            raise ConfigError(f"--snapshot ID names one bucket's snapshot of one partition of "
                              f"{info.name}: add --partition")
        # (partition, bucket, snapshot id or None for live, its row count if known)
        plan: list[tuple[str | None, int, int | None, int | None]] = []
        if spec == "latest":
            for p in parts:
                latest = latest_snapshots(p)
                plan += [(p, b, latest[b].snapshot_id, latest[b].row_count)
                         for b in buckets if b in latest]
            if not plan:
                raise ConfigError(f"{info.name} has no KV snapshot yet: "
                                  f"{no_snapshot_yet(args, info.name, caps)}")
        elif spec == "live":
            plan = [(p, b, None, None) for p in parts for b in buckets]
        else:
            plan = [(parts[0], buckets[0], int(spec), None)]
        schema = _project_schema(info.schema, projection)
        total = (sum(n or 0 for *_, n in plan) if spec == "latest" else None)
        if total is not None and args.limit is not None:
            total = min(total, args.limit)
        progress = Progress(f"scan {info.name}", total,
                             enabled=fmt == "table" and not _json(args))

        def batches():
            remaining = args.limit
            for partition, bucket, snapshot_id, _ in plan:
                if remaining is not None and remaining <= 0:
                    return
                for b in read(partition, bucket, snapshot_id, remaining):
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
    with connect(args, needs="scan_sessions") as conn:
        rows = conn.admin().list_scanners()
    if _json(args):
        emit_json(rows)
    else:
        print_table(rows, ["server_id", "scanner_id", "table_id", "bucket", "snapshot_id",
                           "age_ms", "idle_ms", "rows_served", "next_row"])
    return 0


def cmd_metrics(args) -> int:
    with connect(args) as conn:
        m = conn.admin().metrics()
    emit_json(m) if _json(args) else _print_metrics(m)
    return 0


def cmd_log(args) -> int:
    import pyarrow as pa
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
