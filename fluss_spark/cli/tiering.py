"""``fluss-spark tier`` and ``package``: run tiering, show lake progress, build --py-files."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from fluss_spark.cli.common import _json, bootstrap_servers
from fluss_spark.cli.output import _fmt_ms, emit_json, print_table
from fluss_spark.errors import ConfigError, FlussError


def add_commands(sub, cmd) -> None:
    """Register `tier run|status` and `package`."""
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
                 "snapshot_complete", "active", "restarts", "error"]


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
    latest: dict[str, dict[int, int]] | None = None
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
