"""The tiering job's command line: ``spark-submit examples/tier_tables.py`` and
``fluss-spark tier run``."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from contextlib import nullcontext
from typing import Any, Callable, ContextManager

from fluss_spark.config import bounded, parse_pairs
from fluss_spark.errors import ConfigError, FlussError
from fluss_spark.tiering.config import COPY_ON_WRITE, TieringConfig
from fluss_spark.tiering.job import TieringJob
from fluss_spark.tiering.restarts import error_summary
from fluss_spark.tiering.round_report import RoundReport, round_lines


def build_arg_parser(prog: str = "tier_tables.py") -> argparse.ArgumentParser:
    """The parser of ``examples/tier_tables.py`` (spark-submit)."""
    p = argparse.ArgumentParser(prog=prog, description="Keep Apache Iceberg copies "
                                "of every Fluss table matching a pattern.")
    add_run_args(p)
    return p


def add_run_args(p: argparse.ArgumentParser) -> None:
    """The job's options, shared by the spark-submit script and ``fluss-spark tier run``."""
    p.add_argument("--lake", required=True, type=Path, help="lake directory (tables, checkpoints)")
    p.add_argument("--pattern", required=True, help="regex (full match) over db.table names")
    if not any(a.dest == "bootstrap_servers" for a in p._actions):
        p.add_argument("--bootstrap-servers", default=None,
                       help="Fluss servers (default: $FLUSS_BOOTSTRAP_SERVERS)")
    p.add_argument("--trigger-interval", default="5 seconds", help="time between rounds")
    p.add_argument("--max-offsets-per-trigger", type=bounded(int, 1, 10**12), default=None,
                   help="most snapshot rows + changelog records per table per round")
    p.add_argument("--lease-duration", default="10min",
                   help="expiry of the job's KV snapshot lease after its last renewal")
    p.add_argument("--duration", type=bounded(float, 0, 10**9), default=None,
                   help="stop after this many seconds (default: run until killed)")
    p.add_argument("--once", action="store_true",
                   help="catch up to the tables' current end (AvailableNow) and exit")
    p.add_argument("--discover-interval", type=bounded(float, 0.1, 86_400), default=30.0,
                   help="seconds between looks for new tables matching the pattern")
    p.add_argument("--catalog", action="append", default=None, metavar="KEY=VALUE",
                   help="pyiceberg catalog property (repeatable), e.g. type=rest, "
                        "uri=http://host:8181, warehouse=s3://bucket/lake (default: SQLite "
                        "catalog and warehouse in the lake directory)")
    p.add_argument("--max-restarts", type=bounded(int, 0, 1000), default=3,
                   help="restarts of a table's query after a transient failure within 10 "
                        "minutes before the job fails (0: fail at once)")
    p.add_argument("--copy-on-write", choices=COPY_ON_WRITE, default="auto",
                   help="where a PK round rewrites the data files holding its keys: Spark "
                        "tasks, the driver's threads, or auto (the driver on a local master)")


def config_from_args(args: argparse.Namespace,
                     bootstrap_servers: str | None = None) -> TieringConfig:
    """Parsed arguments -> ``TieringConfig`` (ConfigError naming the bad argument)."""
    from fluss_spark.config import parse_duration_ms
    servers = (bootstrap_servers or getattr(args, "bootstrap_servers", None)
               or os.environ.get("FLUSS_BOOTSTRAP_SERVERS"))
    if not servers:
        raise ConfigError("pass --bootstrap-servers or set FLUSS_BOOTSTRAP_SERVERS")
    return TieringConfig(lake=args.lake, bootstrap_servers=servers, table_pattern=args.pattern,
                         trigger_interval=args.trigger_interval, available_now=args.once,
                         max_offsets_per_trigger=args.max_offsets_per_trigger,
                         lease_duration_ms=parse_duration_ms(args.lease_duration,
                                                             "--lease-duration"),
                         discover_interval_s=args.discover_interval,
                         max_restarts=args.max_restarts,
                         copy_on_write=getattr(args, "copy_on_write", "auto"),
                         catalog=_catalog(getattr(args, "catalog", None)),
                         source_options={**_sasl_options(), **_tls_options(args)})


def _catalog(items: list[str] | None) -> dict | None:
    if not items:
        return None
    return parse_pairs(items, "--catalog", "--catalog type=rest")


def _sasl_options() -> dict:
    """SASL credentials from FLUSS_USERNAME / FLUSS_PASSWORD as source options (the password
    reaches the queries' options only, never a log line or the job's files)."""
    user, password = os.environ.get("FLUSS_USERNAME"), os.environ.get("FLUSS_PASSWORD")
    if not user and not password:
        return {}
    if not (user and password):
        raise ConfigError("set both FLUSS_USERNAME and FLUSS_PASSWORD, or neither")
    return {"client.security.sasl.username": user, "client.security.sasl.password": password}


def _tls_options(args: argparse.Namespace) -> dict:
    """TLS settings (``--tls``, ``--tls-ca-file``, FLUSS_TLS, FLUSS_TLS_CA_FILE,
    FLUSS_TLS_VERIFY_HOSTNAME) as source options."""
    from fluss_spark.client import tls_from_environment
    tls = tls_from_environment(getattr(args, "tls", False), getattr(args, "tls_ca_file", None))
    if tls is None:
        return {}
    options = {"client.security.ssl.enabled": "true",
               "client.security.ssl.verify-hostname": str(tls.verify_hostname).lower()}
    if tls.ca_file:
        options["client.security.ssl.ca-file"] = tls.ca_file
    return options


def run_job(spark: Any, config: TieringConfig, duration_s: float | None = None,
            out=None, on_poll: Callable[[dict], None] | None = None) -> dict:
    """Start the job, run it, stop it; prints one JSON status line per table at the end.
    ``on_poll`` gets the status after every poll (``round_report.RoundReport``)."""
    out = out or sys.stdout
    job = TieringJob(spark, config)
    try:
        job.start()
        job.run(duration_s, on_poll)
    finally:
        job.stop()
    from fluss_spark.tiering.progress import job_status
    doc = job_status(config.lake)
    for row in doc["tables"]:
        out.write(json.dumps(row, sort_keys=True) + "\n")
    out.flush()
    return doc


def follow_rounds(wanted: bool) -> ContextManager[RoundReport | None]:
    """Round lines on stderr while a job that runs until stopped (not ``--once``) runs, with
    each table's status on SIGUSR1; None (nothing printed) when not ``wanted``."""
    return round_lines(sys.stderr) if wanted else nullcontext(None)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = build_arg_parser().parse_args(argv)
    config = config_from_args(args)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.appName(f"fluss-tiering {config.table_pattern}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    try:
        with follow_rounds(not args.once) as report:
            run_job(spark, config, args.duration, on_poll=report)
    except FlussError as e:
        print(f"error: {error_summary(e)}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    return 0


__all__ = ["build_arg_parser", "add_run_args", "config_from_args", "follow_rounds", "run_job",
           "main"]
