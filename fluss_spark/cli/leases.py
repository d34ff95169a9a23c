"""``fluss-spark lease``: list, describe, acquire, renew, release and drop KV snapshot leases."""

from __future__ import annotations

from fluss_spark.cli.common import _json, connect, connect_cluster, no_snapshot_yet
from fluss_spark.cli.output import _fmt_ms, emit_json, print_table
from fluss_spark.errors import ConfigError, FlussError, LeaseNotFound


def add_commands(sub, cmd) -> None:
    """Register `lease list|describe|drop|acquire|renew|release`."""
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


def _lease_doc(lease, names: dict[int, str]) -> dict:
    return {
        "lease_id": lease.lease_id, "expires_at_ms": lease.expires_at_ms,
        "expires": _fmt_ms(lease.expires_at_ms), "created_ms": lease.created_ms,
        "pin_count": lease.pin_count, "owner": lease.owner,
        # The query (holder) that pinned each table; a table pinned without a holder has none.
        "holders": {t: h for t, h in sorted(lease.holders.items())},
        "tables": [{"table_id": t, "table": names.get(t), "holder": lease.holders.get(t),
                    "pins": [{"bucket": b, "snapshot_id": s} for b, s in sorted(pins.items())]}
                   for t, pins in sorted(lease.tables.items())],
    }


def _table_names(conn) -> dict[int, str]:
    try:
        return {t.table_id: t.name for t in conn.refresh_metadata()}
    except FlussError:
        return {}


def cmd_lease_list(args) -> int:
    with connect(args, needs="lease_listing") as conn:
        leases = conn.admin().list_kv_snapshot_leases()
        names = _table_names(conn) if leases else {}
    docs = [_lease_doc(lease, names) for lease in leases]
    if _json(args):
        emit_json(docs)
    else:
        print_table([{**d, "tables": [t["table"] or t["table_id"] for t in d["tables"]],
                      "holders": sorted({t["holder"] for t in d["tables"] if t["holder"]}),
                      "created": _fmt_ms(d["created_ms"])} for d in docs],
                    ["lease_id", "expires", "created", "pin_count", "tables", "holders"])
    return 0


def cmd_lease_describe(args) -> int:
    with connect(args, needs="lease_describe") as conn:
        lease = conn.admin().describe_kv_snapshot_lease(args.lease_id)
        d = _lease_doc(lease, _table_names(conn))
    if _json(args):
        emit_json(d)
        return 0
    print(f"lease      {d['lease_id']}")
    print(f"expires    {d['expires']} ({d['expires_at_ms']})")
    print(f"created    {_fmt_ms(d['created_ms'])}")
    print(f"pins       {d['pin_count']}")
    print_table([{"table": t["table"] or t["table_id"], "holder": t["holder"] or "-",
                  "bucket": p["bucket"], "snapshot_id": p["snapshot_id"]}
                 for t in d["tables"] for p in t["pins"]])
    return 0


def cmd_lease_drop(args) -> int:
    with connect_cluster(args) as cluster:
        if not cluster.drop_kv_snapshot_lease(args.lease_id):
            raise LeaseNotFound(f"KV snapshot lease {args.lease_id!r} does not exist (expired, "
                                f"released or never acquired); nothing was dropped")
    if _json(args):
        emit_json({"lease_id": args.lease_id, "dropped": True})
    else:
        print(f"dropped lease {args.lease_id}")
    return 0


def cmd_lease_acquire(args) -> int:
    from fluss_spark.clock import wall_ms
    from fluss_spark.config import parse_duration_ms
    duration_ms = parse_duration_ms(args.duration, "--duration")
    with connect_cluster(args) as cluster:
        info = cluster.get_table(args.table)
        if not info.has_primary_key:
            raise ConfigError(f"{info.name} is a log table: only primary-key tables have KV "
                              "snapshots to pin")
        latest = cluster.latest_kv_snapshots(info.name)
        if not latest:
            raise ConfigError(f"table {info.name} has no KV snapshots to pin yet; "
                              f"{no_snapshot_yet(args, info.name, cluster.capabilities())}")
        pins = {b: s.snapshot_id for b, s in latest.items()}
        asked_ms = wall_ms()
        unavailable = cluster.acquire_kv_snapshot_lease(
            args.lease_id, duration_ms, {info.table_id: pins}).get(info.table_id, {})
        if cluster.capabilities().lease_describe:
            expires_at_ms = cluster.describe_kv_snapshot_lease(args.lease_id).expires_at_ms
        else:
            expires_at_ms = asked_ms + duration_ms    # from the time it was asked
    pinned = [{"bucket": b, "snapshot_id": s} for b, s in sorted(pins.items())
              if b not in unavailable]
    missing = [{"bucket": b, "snapshot_id": s} for b, s in sorted(unavailable.items())]
    if _json(args):
        emit_json({"lease_id": args.lease_id, "table": info.name, "expires_at_ms": expires_at_ms,
                   "pinned": pinned, "unavailable": missing})
    else:
        print(f"lease {args.lease_id} pins {len(pinned)} snapshot(s) of {info.name} until "
              f"{_fmt_ms(expires_at_ms)} UTC")
        print_table([{**p, "status": "pinned"} for p in pinned]
                    + [{**p, "status": "unavailable"} for p in missing],
                    ["bucket", "snapshot_id", "status"])
    return 0


def cmd_lease_renew(args) -> int:
    from fluss_spark.config import parse_duration_ms
    duration_ms = parse_duration_ms(args.duration, "--duration")
    with connect(args, needs="lease_renewal") as conn:
        expires = conn.admin().renew_kv_snapshot_lease(args.lease_id, duration_ms)
    if _json(args):
        emit_json({"lease_id": args.lease_id, "expires_at_ms": expires})
    else:
        print(f"lease {args.lease_id} now expires at {_fmt_ms(expires)} UTC")
    return 0


def cmd_lease_release(args) -> int:
    with connect_cluster(args) as cluster:
        info = cluster.get_table(args.table)
        # The server treats releasing an unknown lease as a no-op (as Apache Fluss does), so
        # the command asks first: reporting success for a lease that is not there would hide a
        # typo or an expired lease.
        if cluster.capabilities().lease_describe:   # otherwise: release as asked
            try:
                cluster.describe_kv_snapshot_lease(args.lease_id)
            except LeaseNotFound:
                raise LeaseNotFound(f"KV snapshot lease {args.lease_id!r} does not exist "
                                    f"(expired, released or never acquired); nothing was "
                                    f"released") from None
        remaining = cluster.release_kv_snapshot_lease(args.lease_id,
                                                      {info.table_id: info.buckets})
    if _json(args):
        emit_json({"lease_id": args.lease_id, "table": info.name,
                   "remaining_pins": remaining if remaining >= 0 else None})
    elif remaining >= 0:
        print(f"released {info.name} from lease {args.lease_id}; {remaining} pin(s) remain")
    else:   # Apache Fluss does not say what a release left pinned
        print(f"released {info.name} from lease {args.lease_id}")
    return 0
