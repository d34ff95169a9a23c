"""``fluss-spark lease``: list, describe, acquire, renew, release and drop KV snapshot leases."""

from __future__ import annotations

from fluss_spark.cli.common import (_json, bootstrap_servers, connect, connect_cluster,
                                    no_snapshot_yet, not_available)
from fluss_spark.cli.partitions import PARTITION_HELP
from fluss_spark.cli.output import _fmt_ms, emit_json, print_table
from fluss_spark.errors import ConfigError, FlussError, LeaseNotFound, UnknownServerError
from fluss_spark.protocol.partitions import spec_text, values_of


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
    c.add_argument("--partition", metavar="SPEC",
                   help=PARTITION_HELP + " (default: every partition)")
    c.add_argument("--duration", default="1h", help="lease duration, e.g. 30min, 1h (default 1h)")
    c = cmd(lsub, "renew", "extend a lease", cmd_lease_renew)
    c.add_argument("lease_id")
    c.add_argument("--duration", default="1h", help="new duration from now (default 1h)")
    c = cmd(lsub, "release", "unpin a table's buckets", cmd_lease_release)
    c.add_argument("lease_id")
    c.add_argument("table")
    c.add_argument("--partition", metavar="SPEC",
                   help=PARTITION_HELP + " (default: the whole table, every partition)")


def _lease_doc(lease, names: dict[int, str], specs: dict[tuple[int, int], str]) -> dict:
    """A lease as JSON; ``specs`` ({(table id, partition id): spec}) names partitions' pins."""
    pins: dict[int, list[dict]] = {t: [{"partition": None, "partition_id": None, "bucket": b,
                                        "snapshot_id": s} for b, s in sorted(p.items())]
                                   for t, p in lease.tables.items()}
    for t, by_partition in lease.partitions.items():
        pins.setdefault(t, []).extend(sorted(
            ({"partition": specs.get((t, p), f"id {p}"), "partition_id": p, "bucket": b,
              "snapshot_id": s} for p, ps in by_partition.items() for b, s in ps.items()),
            key=lambda pin: (pin["partition"], pin["bucket"])))
    return {
        "lease_id": lease.lease_id, "expires_at_ms": lease.expires_at_ms,
        "expires": _fmt_ms(lease.expires_at_ms), "created_ms": lease.created_ms,
        "pin_count": lease.pin_count, "owner": lease.owner,
        # The query (holder) that pinned each table; a table pinned without a holder has none.
        "holders": {t: h for t, h in sorted(lease.holders.items())},
        "tables": [{"table_id": t, "table": names.get(t), "holder": lease.holders.get(t),
                    "pins": pins[t]} for t in sorted(pins)],
    }


def _table_names(conn) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
    """({table id: name}, {(table id, partition id): partition spec}); empty when the metadata
    cannot be had (the ids are shown instead)."""
    try:
        infos = conn.refresh_metadata()
    except FlussError:
        return {}, {}
    return ({t.table_id: t.name for t in infos},
            {(t.table_id, p.partition_id): spec_text(t.partition_keys, values_of(p.name))
             for t in infos for p in t.partitions})


def cmd_lease_list(args) -> int:
    with connect(args, needs="lease_listing") as conn:
        leases = conn.admin().list_kv_snapshot_leases()
        names, specs = _table_names(conn) if leases else ({}, {})
    docs = [_lease_doc(lease, names, specs) for lease in leases]
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
        d = _lease_doc(lease, *_table_names(conn))
    if _json(args):
        emit_json(d)
        return 0
    print(f"lease      {d['lease_id']}")
    print(f"expires    {d['expires']} ({d['expires_at_ms']})")
    print(f"created    {_fmt_ms(d['created_ms'])}")
    print(f"pins       {d['pin_count']}")
    rows = [{"table": t["table"] or t["table_id"], "partition": p["partition"] or "-",
             "holder": t["holder"] or "-", "bucket": p["bucket"], "snapshot_id": p["snapshot_id"]}
            for t in d["tables"] for p in t["pins"]]
    partitioned = any(p["partition"] for t in d["tables"] for p in t["pins"])
    print_table(rows, ["table"] + ["partition"] * partitioned
                + ["holder", "bucket", "snapshot_id"])
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


def _partitions(args, cluster, info) -> dict[int, str]:
    """{partition id: spec} a command addresses: the one ``--partition`` names, or every
    partition of a partitioned table; {} for an unpartitioned table (which refuses a spec)."""
    from fluss_spark.client.embedded import partitions
    if args.partition is None and not info.partitioned:
        return {}
    if not cluster.capabilities().partition_admin:
        raise not_available(args, bootstrap_servers(args),
                            "this client cannot pin or release partitions yet")
    found = list(info.partitions)
    if args.partition is not None:
        name = partitions.name_of(info, args.partition)    # refuses an unpartitioned table
        found = [p for p in found if p.name == name]
        if not found:
            raise partitions.missing(info, name)
    elif not found:
        raise ConfigError(f"table {info.name} has no partitions; create one with "
                          f"`fluss-spark partition create {info.name} "
                          f"{info.partition_keys[0]}=VALUE`")
    return {p.partition_id: spec_text(info.partition_keys, values_of(p.name)) for p in found}


def cmd_lease_acquire(args) -> int:
    from fluss_spark.clock import wall_ms
    from fluss_spark.config import parse_duration_ms
    duration_ms = parse_duration_ms(args.duration, "--duration")
    with connect_cluster(args) as cluster:
        info = cluster.get_table(args.table)
        if not info.has_primary_key:
            raise ConfigError(f"{info.name} is a log table: only primary-key tables have KV "
                              "snapshots to pin")
        # {partition id: spec}, or {None: None}: the table's own buckets.
        specs: dict[int | None, str | None] = {
            p: spec for p, spec in _partitions(args, cluster, info).items()} or {None: None}
        latest = {}     # {partition id or None: {bucket: snapshot id}}
        for pid, spec in specs.items():
            snaps = cluster.latest_kv_snapshots(info.name, partition=spec)
            if snaps:
                latest[pid] = {b: s.snapshot_id for b, s in snaps.items()}
        if not latest:
            raise ConfigError(f"table {info.name} has no KV snapshots to pin yet; "
                              f"{no_snapshot_yet(args, info.name, cluster.capabilities())}")
        own = latest.get(None)
        by_partition = {p: pins for p, pins in latest.items() if p is not None}
        asked_ms = wall_ms()
        unavailable = cluster.acquire_kv_snapshot_lease(
            args.lease_id, duration_ms, {info.table_id: own} if own else {},
            partitions={info.table_id: by_partition} if by_partition else None)
        if cluster.capabilities().lease_describe:
            expires_at_ms = cluster.describe_kv_snapshot_lease(args.lease_id).expires_at_ms
        else:
            expires_at_ms = asked_ms + duration_ms    # from the time it was asked
    refused: dict[int | None, dict[int, int]] = {None: unavailable.get(info.table_id, {})}
    refused.update(unavailable.partitions.get(info.table_id, {}).items())
    docs: dict[str, list[dict]] = {"pinned": [], "unavailable": []}
    for pid, pins in sorted(latest.items(), key=lambda kv: specs[kv[0]] or ""):
        for b, sid in sorted(pins.items()):
            docs["unavailable" if b in refused.get(pid, {}) else "pinned"].append(
                {**({"partition": specs[pid]} if pid is not None else {}), "bucket": b,
                 "snapshot_id": sid})
    if _json(args):
        emit_json({"lease_id": args.lease_id, "table": info.name, "expires_at_ms": expires_at_ms,
                   **docs})
    else:
        print(f"lease {args.lease_id} pins {len(docs['pinned'])} snapshot(s) of {info.name} "
              f"until {_fmt_ms(expires_at_ms)} UTC")
        print_table([{**p, "status": status} for status in ("pinned", "unavailable")
                     for p in docs[status]],
                    ["partition"] * (None not in specs) + ["bucket", "snapshot_id", "status"])
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


def _release_bucket_by_bucket(cluster, lease_id: str, tables: dict, partitions: dict) -> int:
    """Release on a cluster that cannot say what a lease pins, one (partition,) bucket a
    request: Apache Fluss 0.9.1 fails a release naming a bucket the lease does not pin once the
    table's pinned ones are gone (having released those, yet kept the lease record), and one of
    a table the lease does not pin at all; alone, such a request fails changing nothing, and
    releasing nothing is what was asked of it."""
    one: list[tuple[dict, dict | None]] = [
        ({tid: [b]}, None) for tid, buckets in tables.items() for b in buckets]
    one += [({}, {tid: {pid: [b]}}) for tid, parts in partitions.items()
            for pid, buckets in sorted(parts.items()) for b in buckets]
    for table_buckets, partition_buckets in one:
        try:
            cluster.release_kv_snapshot_lease(lease_id, table_buckets,
                                              partitions=partition_buckets)
        except UnknownServerError:
            pass
    return -1


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
        where: dict[str, str] = {}
        if args.partition is None:
            # Every bucket of the table: its own pins and its partitions' all go.
            tables, partitions = {info.table_id: info.buckets}, None
        else:
            (pid, spec), = _partitions(args, cluster, info).items()
            where = {"partition": spec}
            tables, partitions = {}, {info.table_id: {pid: info.buckets}}
        if cluster.capabilities().lease_describe:
            remaining = cluster.release_kv_snapshot_lease(args.lease_id, tables,
                                                          partitions=partitions)
        else:
            if info.partition_keys and partitions is None:
                tables, partitions = {}, {info.table_id: {p.partition_id: info.buckets
                                                          for p in info.partitions}}
            remaining = _release_bucket_by_bucket(cluster, args.lease_id, tables,
                                                  partitions or {})
    what = f"partition {where['partition']} of {info.name}" if where else info.name
    if _json(args):
        emit_json({"lease_id": args.lease_id, "table": info.name, **where,
                   "remaining_pins": remaining if remaining >= 0 else None})
    elif remaining >= 0:
        print(f"released {what} from lease {args.lease_id}; {remaining} pin(s) remain")
    else:   # Apache Fluss does not say what a release left pinned
        print(f"released {what} from lease {args.lease_id}")
    return 0
