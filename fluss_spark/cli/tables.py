"""``fluss-spark table`` and ``produce``: create, list, describe, drop tables; write demo rows."""

from __future__ import annotations

from contextlib import closing

from fluss_spark.cli.common import (MAX_BUCKETS, MAX_COUNT, _columns_arg, _json, bounded,
                                    connect_cluster, table_admin,
                                    table_writer)
from fluss_spark.config import parse_pairs
from fluss_spark.cli.output import _fmt_ms, emit_json, print_table
from fluss_spark.cli.progress import Progress
from fluss_spark.cli.partitions import row_placer
from fluss_spark.errors import ConfigError


def add_commands(sub, cmd) -> None:
    """Register `table create|alter|list|describe|drop` and `produce`."""
    table = sub.add_parser("table", help="create, alter, list, describe and drop tables")
    tsub = table.add_subparsers(dest="action", required=True, metavar="ACTION")
    c = cmd(tsub, "create", "create a table", cmd_table_create)
    c.add_argument("table", help="db.table")
    c.add_argument("--schema", required=True, help='columns, e.g. "id BIGINT, name STRING"')
    c.add_argument("--primary-key", help="primary key column(s), comma separated")
    c.add_argument("--bucket-key", help="bucket key column(s) (default: the primary key)")
    c.add_argument("--buckets", type=bounded(int, 1, MAX_BUCKETS), default=1,
                   help="number of buckets (default 1)")
    c.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="table property, e.g. kv.snapshot.interval=1min (repeatable)")
    c.add_argument("--partition-key", help="partition key column(s), comma separated (in the "
                   "primary key of a PK table); see table.auto-partition.* properties")
    c.add_argument("--if-not-exists", action="store_true", help="succeed if the table exists")
    c = cmd(tsub, "alter", "change a table's schema: append nullable columns (rows written "
            "before read them as null; a running query keeps its columns until restarted)",
            cmd_table_alter)
    c.add_argument("table", help="db.table")
    c.add_argument("--add-column", action="append", required=True, metavar='"NAME TYPE"',
                   help='a nullable column to append, e.g. "note STRING" (repeatable)')
    cmd(tsub, "list", "list tables", cmd_table_list)
    cmd(tsub, "describe", "show a table's schema, keys, buckets and properties",
        cmd_table_describe).add_argument("table")
    c = cmd(tsub, "drop", "drop a table", cmd_table_drop)
    c.add_argument("table")
    c.add_argument("--if-exists", action="store_true", help="succeed if the table does not exist")

    c = cmd(sub, "produce", "write generated demo rows to a table", cmd_produce)
    c.add_argument("table")
    c.add_argument("--rows", type=bounded(int, 0, MAX_COUNT), required=True,
                   help="rows to insert (PK) or append (log)")
    c.add_argument("--updates", type=bounded(int, 0, MAX_COUNT), default=0,
                   help="upserts of random existing keys (PK)")
    c.add_argument("--deletes", type=bounded(int, 0, MAX_COUNT), default=0,
                   help="deletes of random existing keys (PK)")
    c.add_argument("--seed", type=bounded(int, 0, 2**63 - 1), default=0,
                   help="random seed (same seed, same data)")
    c.add_argument("--partition", metavar="SPEC",
                   help="write to this partition (key=value[,key=value...]); default: spread the "
                        "rows of a partitioned table over its partitions")
    c.add_argument("--batch-size", type=bounded(int, 1, 10_000_000), default=10_000,
                   help="rows per write call")


def _describe(info) -> dict:
    from fluss_spark.protocol.types import format_schema, format_type
    return {
        "table": info.name, "table_id": info.table_id, "schema": format_schema(info.schema),
        "columns": [{"name": f.name, "type": format_type(f.type), "nullable": f.nullable}
                    for f in info.schema],
        "primary_key": list(info.primary_key), "bucket_key": list(info.bucket_key),
        "partition_keys": list(info.partition_keys),
        "num_buckets": info.num_buckets, "properties": dict(info.properties),
        "created_ms": info.created_ms, "schema_id": info.schema_id,
        "assignment": [{"bucket": b, "tablet": t} for b, t in sorted(info.assignment.items())],
    }


def _print_description(d: dict) -> None:
    print(f"table        {d['table']} (id {d['table_id']})")
    print(f"kind         {'primary-key table' if d['primary_key'] else 'log table'}")
    print(f"primary key  {', '.join(d['primary_key']) or '-'}")
    print(f"bucket key   {', '.join(d['bucket_key']) or '-'}")
    print(f"partitioned  {', '.join(d['partition_keys']) or '-'}")
    print(f"buckets      {d['num_buckets']}")
    print(f"schema id    {d['schema_id']}")
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
    partition_keys = _columns_arg(args.partition_key) or []
    properties = parse_pairs(args.property, "--property")
    from fluss_spark.config import validate_table_properties
    from fluss_spark.protocol.auto_partition import AutoPartition
    from fluss_spark.protocol.partitions import check_partition_keys
    from fluss_spark.protocol.types import parse_schema, validate_table_schema
    schema = parse_schema(args.schema)          # a bad definition fails before connecting
    validate_table_schema(schema, pk, bk or [])
    check_partition_keys(args.table, schema, pk, bk or [], partition_keys)
    AutoPartition.of(args.table, validate_table_properties(properties), partition_keys)
    with connect_cluster(args) as cluster:
        admin = table_admin(args, cluster)
        admin.create_database(args.table.partition(".")[0], ignore_if_exists=True)
        admin.create_table(args.table, schema, primary_key=pk, bucket_key=bk,
                           buckets=args.buckets, properties=properties,
                           ignore_if_exists=args.if_not_exists,
                           partition_keys=partition_keys)
        info = cluster.get_table(args.table)
    d = _describe(info)
    if _json(args):
        emit_json(d)
    else:
        print(f"created {info.name} (id {info.table_id}, {info.num_buckets} bucket(s))")
    return 0


def cmd_table_alter(args) -> int:
    import pyarrow as pa

    from fluss_spark.protocol.schema_change import add_columns
    from fluss_spark.protocol.types import parse_schema
    # A bad column (NOT NULL, repeated, reserved) fails before connecting; a name the table
    # already has is refused once its schema is known, in one line too.
    columns = pa.schema([f for text in args.add_column for f in parse_schema(text)])
    add_columns(args.table, pa.schema([]), columns)
    with connect_cluster(args) as cluster:
        info = table_admin(args, cluster).add_columns(args.table, columns)
    d = _describe(info)
    if _json(args):
        emit_json(d)
    else:
        print(f"altered {info.name}: added {', '.join(columns.names)} (schema id "
              f"{info.schema_id})")
    return 0


def cmd_table_list(args) -> int:
    with connect_cluster(args) as cluster:
        names = cluster.list_tables()
    if _json(args):
        emit_json([{"table": n} for n in names])
    else:
        print_table([{"table": n} for n in names])
    return 0


def cmd_table_describe(args) -> int:
    with connect_cluster(args) as cluster:
        d = _describe(cluster.get_table(args.table))
    emit_json(d) if _json(args) else _print_description(d)
    return 0


def cmd_table_drop(args) -> int:
    with connect_cluster(args) as cluster:
        table_admin(args, cluster).drop_table(args.table, ignore_if_not_exists=args.if_exists)
    if _json(args):
        emit_json({"table": args.table, "dropped": True})
    else:
        print(f"dropped {args.table}")
    return 0


def cmd_produce(args) -> int:
    from fluss_spark.local.demo_data import DemoData
    with connect_cluster(args) as cluster:
        info = cluster.get_table(args.table)
        place = (row_placer(cluster, info, args.partition)
                 if info.partitioned or args.partition is not None else _unchanged)
        if not info.has_primary_key and (args.updates or args.deletes):
            raise ConfigError(f"{info.name} is a log table: --updates and --deletes need a "
                              "primary-key table")
        gen = DemoData(info.schema, info.primary_key, seed=args.seed)
        total = args.rows + (args.updates + min(args.deletes, args.rows) if args.rows else 0)
        # A bar on a terminal; in a log, a line a second once a write takes that long.
        with closing(table_writer(args, cluster, info.name)) as writer, \
                Progress(f"produce {info.name}", total, enabled=not _json(args),
                         lines=True) as progress:
            counts = _write_demo_rows(args, info, writer, gen, place, progress)
    written = sum(counts.values())
    if _json(args):
        emit_json({"table": info.name, "rows": written, **counts})
    else:
        detail = ", ".join(f"{v} {k}" for k, v in counts.items())
        print(f"wrote {written} rows to {info.name} ({detail})")
    return 0


def _unchanged(rows):
    return rows


def _write_demo_rows(args, info, writer, gen, place, progress: Progress) -> dict[str, int]:
    """Write ``--rows`` inserts (appends), then ``--updates`` and ``--deletes``, a batch of
    ``--batch-size`` rows per call; the rows written of each kind, once every row is
    acknowledged."""
    counts = {"inserts" if info.has_primary_key else "appends": 0}
    if info.has_primary_key:
        counts.update(updates=0, deletes=0)
    for start in range(0, args.rows, args.batch_size):
        batch = place(gen.rows(start, min(start + args.batch_size, args.rows)))
        (writer.upsert if info.has_primary_key else writer.append)(batch)
        counts["inserts" if info.has_primary_key else "appends"] += batch.num_rows
        progress.add(batch.num_rows)
    if info.has_primary_key and args.rows:
        for start in range(0, args.updates, args.batch_size):
            n = min(args.batch_size, args.updates - start)
            writer.upsert(place(gen.updates(n, args.rows)))
            counts["updates"] += n
            progress.add(n)
        deleted = place(gen.deletes(min(args.deletes, args.rows), args.rows))
        for start in range(0, deleted.num_rows, args.batch_size):
            part = deleted.slice(start, args.batch_size)
            writer.delete(part)
            counts["deletes"] += part.num_rows
            progress.add(part.num_rows)
    writer.flush()
    return counts
