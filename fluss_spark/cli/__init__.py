"""The ``fluss-spark`` command: local cluster, tables, demo data, snapshots, leases, scans, ACLs.

Human-readable tables by default; ``--json`` prints one JSON document instead. Errors print one
line ``error: ...`` on stderr and exit non-zero.
"""

from __future__ import annotations

import argparse
import os
import sys

from fluss_spark import __version__
from fluss_spark.cli import (acls, cluster, leases, partitions, scans, snapshots, tables,
                             tiering)
from fluss_spark.cli.common import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, bootstrap_servers, bounded
from fluss_spark.cli.output import emit_json, print_table
from fluss_spark.errors import EXTRAS, ConfigError, FlussError, MissingExtra

# Names other code imports from ``fluss_spark.cli``.
__all__ = ["bootstrap_servers", "build_parser", "emit_json", "main", "print_table"]


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line and exit status 2."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see `{self.prog} --help`)\n")


def _common() -> argparse.ArgumentParser:
    # SUPPRESS lets the flags appear before or after the subcommand without one overwriting
    # the other with its default.
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                   help="print one JSON document instead of tables")
    p.add_argument("--bootstrap-servers", default=argparse.SUPPRESS, metavar="HOST:PORT[,..]",
                   help="servers to connect to (default: $FLUSS_BOOTSTRAP_SERVERS, else the "
                        "local cluster)")
    p.add_argument("--username", default=argparse.SUPPRESS, metavar="NAME",
                   help="SASL username (default $FLUSS_USERNAME); the password is read from "
                        "$FLUSS_PASSWORD, never from the command line")
    p.add_argument("--tls", action="store_true", default=argparse.SUPPRESS,
                   help="connect with TLS, trusting the system's CAs (default $FLUSS_TLS; the "
                        "local cluster's own CA when it was started with --tls); `cluster "
                        "start --tls`: the cluster listens with TLS")
    p.add_argument("--tls-ca-file", default=argparse.SUPPRESS, metavar="PEM",
                   help="connect with TLS, trusting the CA certificates in this file (default "
                        "$FLUSS_TLS_CA_FILE); $FLUSS_TLS_VERIFY_HOSTNAME=false skips the "
                        "hostname check")
    p.add_argument("--timeout", type=bounded(float, 0.001, MAX_TIMEOUT_S),
                   default=argparse.SUPPRESS, metavar="SECONDS",
                   help=f"request timeout including retries (default {DEFAULT_TIMEOUT_S:.0f})")
    return p


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    p = _Parser(prog="fluss-spark", parents=[common],
                description="Operate a fluss_spark cluster: tables, data, KV snapshots, leases.")
    p.add_argument("--version", action="version", version=f"fluss-spark {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def cmd(parent, name, help_, func):
        c = parent.add_parser(name, parents=[common], help=help_, description=help_)
        c.set_defaults(func=func)
        return c

    for module in (cluster, tables, partitions, snapshots, leases, scans, tiering, acls):
        module.add_commands(sub, cmd)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return args.func(args) or 0
    except (FlussError, TimeoutError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        kind = "" if type(e) in (FlussError, ConfigError, MissingExtra) else f"{type(e).__name__}: "
        print(f"error: {kind}{first}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as e:
        # A command of an extra that is not installed (`tier` without [tiering]).
        if (e.name or "").split(".")[0] not in EXTRAS:
            raise
        print(f"error: {MissingExtra(e.name or '', f'the {args.command} commands')}",
              file=sys.stderr)
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
