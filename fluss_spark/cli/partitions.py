"""``fluss-spark partition``: list, create and drop the partitions of a partitioned table."""

from __future__ import annotations

from fluss_spark.cli.common import _json, bootstrap_servers, connect_cluster, not_available
from fluss_spark.cli.output import _fmt_ms, emit_json, print_table
from fluss_spark.errors import ConfigError
from fluss_spark.protocol.partitions import parse_spec, spec_text, values_of

_SPEC_HELP = "the partition as key=value[,key=value...], e.g. dt=2026-11-25"
#: Help of the --partition option of commands that read or write one partition.
PARTITION_HELP = "only this partition of a partitioned table (key=value[,key=value...])"


def partition_names(conn, info, partition: str | None) -> list[str | None]:
    """The partitions a command addresses: [None] for an unpartitioned table (a ``partition``
    is refused), the one ``partition`` names, or every partition of the table, by name."""
    from fluss_spark.client.embedded import partitions
    if partition is not None:
        found = partitions.lookup(conn, info, partition)
        return [None if found is None else found.name]
    if not info.partitioned:
        return [None]
    return _some(info, [p.name for p in conn.refresh_table(info.name).partitions])


def cluster_partition_names(cluster, info, partition: str | None) -> list[str | None]:
    """``partition_names`` over any ``Cluster``: [``partition``] when it names one (the read
    checks it) or the table is unpartitioned, else every partition the cluster lists."""
    from fluss_spark.client.cluster import PartitionAdmin
    if partition is not None or not info.partitioned:
        return [partition]
    if not cluster.capabilities().partition_admin or not isinstance(cluster, PartitionAdmin):
        return [None]       # the read says that a partition must be named
    return _some(info, [p.name for p in cluster.list_partitions(info.name)])


def _some(info, names: list[str]) -> list[str | None]:
    """``names`` sorted; a table without partitions is refused in one line."""
    if not names:
        raise ConfigError(f"table {info.name} has no partitions; create one with `fluss-spark "
                          f"partition create {info.name} {info.partition_keys[0]}=VALUE`")
    return list(sorted(names))


def row_placer(cluster, info, partition: str | None):
    """A function that sets the partition key columns of generated rows: to ``partition``, or
    spread over the table's partitions by the rows' bucket key (an update or delete of a key
    then goes where its insert went); unpartitioned tables' rows pass unchanged."""
    import pyarrow as pa

    from fluss_spark.client.partition_names import missing, name_of
    from fluss_spark.protocol.rows import bucket_ids
    names = cluster_partition_names(cluster, info, None)
    if partition is not None:
        name = name_of(info.name, info.partition_keys, partition)
        if name not in names:
            raise missing(info.name, info.partition_keys, name, write=True)
        names = [name]
    if names == [None]:
        return lambda rows: rows
    keys = list(info.bucket_key) or [c for c in info.schema.names
                                     if c not in info.partition_keys][:1]
    values = {k: pa.array([values_of(str(n))[i] for n in names]).cast(info.schema.field(k).type)
              for i, k in enumerate(info.partition_keys)}

    def place(rows):
        at = (bucket_ids(rows, keys, len(names)) if len(names) > 1 and keys
              else pa.array([0] * rows.num_rows, pa.int32()))
        for k, vals in values.items():
            i = rows.schema.get_field_index(k)
            rows = rows.set_column(i, rows.schema.field(i), vals.take(at))
        return rows
    return place


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
