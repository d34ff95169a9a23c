"""``fluss-spark partition``: list, create and drop the partitions of a partitioned table."""

from __future__ import annotations

from fluss_spark.cli.common import _json, bootstrap_servers, connect_cluster, not_available
from fluss_spark.cli.output import _fmt_ms, emit_json, print_table
from fluss_spark.protocol.partitions import parse_spec, spec_text, values_of

_SPEC_HELP = "the partition as key=value[,key=value...], e.g. dt=2026-11-25"


def add_commands(sub, cmd) -> None:
    """Register `partition list|create|drop`."""
    part = sub.add_parser("partition", help="list, create and drop the partitions of a table")
    psub = part.add_subparsers(dest="action", required=True, metavar="ACTION")
    cmd(psub, "list", "list a partitioned table's partitions", cmd_partition_list) \
        .add_argument("table", help="db.table")
    c = cmd(psub, "create", "create a partition", cmd_partition_create)
    c.add_argument("table", help="db.table")
    c.add_argument("spec", help=_SPEC_HELP)
    c.add_argument("--if-not-exists", action="store_true",
                   help="succeed if the partition exists")
    c = cmd(psub, "drop", "drop a partition with its data, snapshots and lease pins",
            cmd_partition_drop)
    c.add_argument("table", help="db.table")
    c.add_argument("spec", help=_SPEC_HELP)
    c.add_argument("--if-exists", action="store_true",
                   help="succeed if the partition does not exist")


def _admin(args, cluster):
    from fluss_spark.client.cluster import PartitionAdmin
    if not cluster.capabilities().partition_admin or not isinstance(cluster, PartitionAdmin):
        raise not_available(args, bootstrap_servers(args),
                            "this client cannot manage its partitions yet")
    return cluster


def _row(keys, p) -> dict:
    return {"partition": spec_text(keys, values_of(p.name)), "partition_id": p.partition_id,
            "name": p.name, "buckets": len(p.assignment), "created_ms": p.created_ms}


def cmd_partition_list(args) -> int:
    with connect_cluster(args) as cluster:
        admin = _admin(args, cluster)
        keys = cluster.get_table(args.table).partition_keys
        rows = [_row(keys, p) for p in admin.list_partitions(args.table)]
    if _json(args):
        emit_json(rows)
    else:
        print_table([{**r, "created_ms": _fmt_ms(r["created_ms"])} for r in rows],
                    ["partition", "partition_id", "buckets", "created_ms"])
    return 0


def cmd_partition_create(args) -> int:
    spec = parse_spec(args.spec)        # a malformed spec fails before connecting
    with connect_cluster(args) as cluster:
        keys = cluster.get_table(args.table).partition_keys
        p = _admin(args, cluster).create_partition(args.table, spec,
                                                   ignore_if_exists=args.if_not_exists)
    row = _row(keys, p)
    if _json(args):
        emit_json({"table": args.table, **row})
    else:
        print(f"created partition {row['partition']} of {args.table} (id {p.partition_id}, "
              f"{row['buckets']} bucket(s))")
    return 0


def cmd_partition_drop(args) -> int:
    spec = parse_spec(args.spec)
    with connect_cluster(args) as cluster:
        _admin(args, cluster).drop_partition(args.table, spec,
                                             ignore_if_not_exists=args.if_exists)
    if _json(args):
        emit_json({"table": args.table, "partition": args.spec, "dropped": True})
    else:
        print(f"dropped partition {args.spec} of {args.table}")
    return 0
