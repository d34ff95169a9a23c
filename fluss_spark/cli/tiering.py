"""``fluss-spark tier`` (run, status, compact, expire, migrate) and ``package`` (--py-files zip)."""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

from fluss_spark.cli.common import _json, bootstrap_servers
from fluss_spark.cli.output import _fmt_ms, emit_json, print_table
from fluss_spark.errors import ConfigError, FlussError, MissingExtra


def add_commands(sub, cmd) -> None:
    """Register `tier run|status|compact|expire|migrate` and `package`."""
    from fluss_spark.tiering.run import add_run_args
    tier = sub.add_parser("tier", help="keep lake copies of tables (a Spark job) and show progress")
    tsub = tier.add_subparsers(dest="action", required=True, metavar="ACTION")
    c = cmd(tsub, "run", "run the tiering Spark job in this process (see examples/tier_tables.py "
            "for spark-submit)", cmd_tier_run)
    add_run_args(c)
    c.add_argument("--master", default="local[2,4]",
                   help="Spark master (default local[2,4]: 2 cores, 4 attempts per task as on a "
                        "cluster)")
    c = cmd(tsub, "status", "per-table progress of a lake: rows tiered, lag, last round",
            cmd_tier_status)
    c.add_argument("--lake", required=True, type=Path, help="the lake directory")
    c = cmd(tsub, "compact", "rewrite lake tables of many small data files into few (one "
            "Iceberg commit per table; rows and Fluss offsets unchanged)", cmd_tier_compact)
    c.add_argument("--lake", required=True, type=Path, help="the lake directory")
    c.add_argument("--table", action="append", default=None,
                   help="db.table to compact (repeatable; default: every table)")
    c.add_argument("--min-files", type=int, default=2,
                   help="compact only tables with more data files than this (default 2)")
    c = cmd(tsub, "expire", "expire old Iceberg snapshots of lake tables and delete the files "
            "only they used", cmd_tier_expire)
    c.add_argument("--lake", required=True, type=Path, help="the lake directory")
    c.add_argument("--table", action="append", default=None,
                   help="db.table (repeatable; default: every table)")
    c.add_argument("--older-than", default="1d",
                   help="expire snapshots older than this (default 1d; e.g. 2h, 30min)")
    c.add_argument("--retain-last", type=int, default=10,
                   help="always keep this many newest snapshots per table (default 10)")
    c.add_argument("--orphan-grace", default="1h",
                   help="delete files no snapshot ever committed once older than this "
                        "(default 1h: longer than a round)")
    c = cmd(tsub, "migrate", "convert a lake of the old Parquet-manifest format into Iceberg "
            "tables (checkpoints kept: tiering continues where it stopped)", cmd_tier_migrate)
    c.add_argument("--lake", required=True, type=Path, help="the lake directory")
    for tier_parser in tsub.choices.values():
        tier_parser.set_defaults(func=_needs_tiering(tier_parser.get_default("func")))
    c = cmd(sub, "package", "build the --py-files zip that ships fluss_spark to Spark nodes",
            cmd_package)
    c.add_argument("--out", type=Path, default=Path("dist/fluss_spark.zip"),
                   help="zip to write (default dist/fluss_spark.zip)")
    c.add_argument("--include-server", action="store_true",
                   help="also include the server, ZooKeeper and test-cluster modules")


def _needs_tiering(func):
    """A tier command, refused in one line when the [tiering] extra is not installed (every tier
    command reads or writes the lake through pyiceberg)."""
    @functools.wraps(func)
    def run(args) -> int:
        MissingExtra.check("pyiceberg", "the tier commands")
        return func(args)
    return run


def cmd_tier_run(args) -> int:
    from fluss_spark.tiering.run import config_from_args, follow_rounds, run_job
    config = config_from_args(args, bootstrap_servers(args))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master(args.master)
             .appName(f"fluss-tiering {config.table_pattern}")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with follow_rounds(not args.once and not _json(args)) as report:
            doc_rows = run_job(spark, config, args.duration, out=open(os.devnull, "w"),
                               on_poll=report)["tables"]
    finally:
        spark.stop()
    if _json(args):
        emit_json(doc_rows)
    else:
        print_table([{**r, "last_round": _fmt_ms(r.get("last_round_ms"))} for r in doc_rows],
                    _TIER_COLUMNS)
    return 0


_TIER_COLUMNS = ["table", "kind", "rows_tiered", "lake_rows", "lag", "last_round", "batch_id",
                 "snapshot_complete", "active", "restarts", "error"]


def cmd_tier_status(args) -> int:
    from fluss_spark.tiering.job import JOB_FILE
    from fluss_spark.tiering.progress import TIERING_DIR, Latest, job_status, latest_offsets
    lake = args.lake
    job_file = lake / TIERING_DIR / JOB_FILE
    if not lake.is_dir():
        raise ConfigError(f"lake directory {lake} does not exist")
    servers = getattr(args, "bootstrap_servers", None) or os.environ.get("FLUSS_BOOTSTRAP_SERVERS")
    if not servers and job_file.exists():
        servers = json.loads(job_file.read_text()).get("bootstrap_servers")
    latest: dict[str, Latest] | None = None
    unknown = None
    if servers:
        # An exact lag needs the tables' latest offsets; without the cluster, the job's last one.
        from fluss_spark.client import FlussConnection
        from fluss_spark.tiering.lake import list_lake_tables
        try:
            with FlussConnection(servers, request_timeout_s=getattr(args, "timeout", 5.0)) as conn:
                admin = conn.admin()
                latest = {}
                for t in list_lake_tables(lake):
                    name = t.name
                    if admin.table_exists(name):
                        latest[name] = latest_offsets(admin, name)
        except FlussError as e:
            latest = None
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            unknown = f"the cluster at {servers} did not answer: {first}"
    doc = job_status(lake, latest, unknown)
    if _json(args):
        emit_json(doc)
        return 0
    print(f"lake {doc['lake']}  job {doc['job_id'] or '-'}  lease {doc['lease_id'] or '-'}  "
          f"status updated {_fmt_ms(doc['updated_ms']) or '-'}")
    rows = [{**r, "last_round": _fmt_ms(r.get("last_round_ms")),
             "lag": "unknown" if unknown and r.get("lag") is None else r.get("lag")}
            for r in doc["tables"]]
    print_table(rows, _TIER_COLUMNS)
    if unknown:
        print(f"lag unknown: {unknown} (the job's last reported lag: --json, reported_lag)")
    return 0


def _lake_tables(args) -> list:
    from fluss_spark.tiering.lake import LakeTable, list_lake_tables
    if not args.lake.is_dir():
        raise ConfigError(f"lake directory {args.lake} does not exist")
    if args.table:
        return [LakeTable.open(args.lake, t) for t in args.table]
    return list_lake_tables(args.lake)


def cmd_tier_compact(args) -> int:
    rows = []
    for t in _lake_tables(args):
        before = t.state()
        after = t.compact(max_files=args.min_files)
        rows.append({"table": t.name, "files_before": before.data_files,
                     "files_after": (after or before).data_files, "rows": before.rows,
                     "snapshot_id": (after or before).snapshot_id, "compacted": after is not None})
    if _json(args):
        emit_json(rows)
    else:
        print_table(rows, ["table", "compacted", "files_before", "files_after", "rows",
                           "snapshot_id"])
    return 0


def cmd_tier_expire(args) -> int:
    import time
    from fluss_spark.config import parse_duration_ms
    older = parse_duration_ms(args.older_than, "--older-than")
    grace = parse_duration_ms(args.orphan_grace, "--orphan-grace")
    if args.retain_last < 1:
        raise ConfigError(f"--retain-last must be at least 1 (got {args.retain_last})")
    now_ms = int(time.time() * 1000)
    rows = []
    for t in _lake_tables(args):
        r = t.expire(now_ms - older, retain_last=args.retain_last, orphan_grace_ms=grace)
        rows.append({**r, "expired_snapshots": len(r["expired_snapshots"])})
    if _json(args):
        emit_json(rows)
    else:
        print_table(rows, ["table", "expired_snapshots", "removed_files", "snapshots"])
    return 0


def cmd_tier_migrate(args) -> int:
    from fluss_spark.tiering.migrate import migrate_lake
    if not args.lake.is_dir():
        raise ConfigError(f"lake directory {args.lake} does not exist")
    rows = migrate_lake(args.lake)
    if _json(args):
        emit_json(rows)
    elif not rows:
        print(f"lake {args.lake} has no table in the old format")
    else:
        print_table(rows, ["table", "legacy_version", "rows", "snapshot_id", "legacy_dir"])
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
        print(f"wrote {out} ({n} modules, {doc['bytes']} bytes); "
              f"use: spark-submit --py-files {out} ...")
    return 0
