"""``fluss-spark snapshot``: trigger and list KV snapshots."""

from __future__ import annotations

from fluss_spark.cli.common import (MAX_BUCKETS, _json, bounded, connect, connect_cluster,
                                    embedded_connection)
from fluss_spark.cli.output import _fmt_ms, emit_json, print_table
from fluss_spark.cli.partitions import (PARTITION_HELP, cluster_partition_names,
                                        partition_names)
from fluss_spark.protocol.partitions import spec_text, values_of
from fluss_spark.errors import ConfigError


def add_commands(sub, cmd) -> None:
    """Register `snapshot trigger|list`."""
    snap = sub.add_parser("snapshot", help="trigger and list KV snapshots")
    ssub = snap.add_subparsers(dest="action", required=True, metavar="ACTION")
    c = cmd(ssub, "trigger", "take a KV snapshot of every bucket now", cmd_snapshot_trigger)
    c.add_argument("table")
    c.add_argument("--bucket", type=bounded(int, 0, MAX_BUCKETS - 1), action="append",
                   help="only these buckets (repeatable)")
    c.add_argument("--partition", metavar="SPEC", help=PARTITION_HELP + " (default: every one)")
    c = cmd(ssub, "list", "registered KV snapshots and the leases pinning them (Apache Fluss: "
            "the latest snapshot of each bucket)", cmd_snapshot_list)
    c.add_argument("table")
    c.add_argument("--bucket", type=bounded(int, 0, MAX_BUCKETS - 1))
    c.add_argument("--partition", metavar="SPEC", help=PARTITION_HELP)


def _snapshot_row(name: str, s, partitions: dict | None = None) -> dict:
    """One snapshot as a row; ``partitions`` ({partition id: spec}) adds its partition."""
    where = {} if partitions is None else {
        "partition": partitions.get(s.partition_id, f"id {s.partition_id}")}
    return {"table": name, **where, "bucket": s.bucket, "snapshot_id": s.snapshot_id,
            "log_offset": s.log_offset, "row_count": s.row_count, "size_bytes": s.size_bytes,
            "created_ms": s.created_ms, "created": _fmt_ms(s.created_ms), "path": s.path,
            "pinned_by": list(s.pinned_by)}


def cmd_snapshot_trigger(args) -> int:
    with connect(args, needs="snapshot_trigger") as conn:
        info = conn.table(args.table)
        if not info.has_primary_key:
            raise ConfigError(f"{info.name} is a log table: KV snapshots exist only for "
                              "primary-key tables")
        specs = _partition_specs(conn, info)
        rows = []
        for partition in partition_names(conn, info, args.partition):
            snaps = conn.admin().trigger_kv_snapshot(info, args.bucket, partition=partition)
            where = {} if partition is None else {"partition": spec_text(
                info.partition_keys, values_of(partition))}
            for b, s in snaps.items():
                rows.append(_snapshot_row(info.name, s, specs) if s else
                            {"table": info.name, **where, "bucket": b, "snapshot_id": None,
                             "log_offset": None, "row_count": None, "size_bytes": None,
                             "created_ms": None, "created": None, "path": None, "pinned_by": []})
    if _json(args):
        emit_json(rows)
    else:
        print_table(rows, ["partition"] * (specs is not None)
                    + ["bucket", "snapshot_id", "log_offset", "row_count", "created"])
    return 0


def cmd_snapshot_list(args) -> int:
    from fluss_spark.client.embedded import EmbeddedCluster
    with connect_cluster(args) as cluster:
        if isinstance(cluster, EmbeddedCluster):
            # This project's servers list every registered snapshot and the leases pinning it.
            conn = embedded_connection(args, cluster)
            info = conn.table(args.table)
            name = info.name
            specs = _partition_specs(conn, info)
            snaps = conn.admin().list_kv_snapshots(info, args.bucket, partition=args.partition)
        else:
            # Other clusters name only each bucket's latest snapshot, not the leases pinning it.
            info = cluster.get_table(args.table)
            name, specs = info.name, _specs(info.partition_keys, info.partitions)
            snaps = [s for p in cluster_partition_names(cluster, info, args.partition)
                     for b, s in sorted(cluster.latest_kv_snapshots(name, partition=p).items())
                     if args.bucket is None or b == args.bucket]
    rows = [_snapshot_row(name, s, specs) for s in snaps]
    if _json(args):
        emit_json(rows)
    else:
        print_table(rows, ["partition"] * (specs is not None)
                    + ["bucket", "snapshot_id", "log_offset", "row_count", "created",
                       "pinned_by"])
    return 0


def _partition_specs(conn, info) -> dict | None:
    """{partition id: spec} of a partitioned table (fresh), None for an unpartitioned one."""
    if not info.partitioned:
        return None
    return _specs(info.partition_keys, conn.refresh_table(info.name).partitions)


def _specs(keys, partitions) -> dict | None:
    """{partition id: spec} of ``partitions``; None without partition ``keys``."""
    if not keys:
        return None
    return {p.partition_id: spec_text(keys, values_of(p.name)) for p in partitions}
