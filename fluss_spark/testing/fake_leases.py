"""The lease half of the in-memory ``FakeCluster``: KV snapshot leases with the coordinator's
semantics (pins per table and per partition, holders, expiry)."""

from __future__ import annotations

from typing import Iterable, Literal, Mapping

from fluss_spark.client import LeaseInfo
from fluss_spark.client.cluster import PartitionPins, Pins, Unavailable
from fluss_spark.clock import Clock
from fluss_spark.errors import (InvalidLeaseId, InvalidRequest, LeaseHeldByOther, LeaseNotFound,
                                UnsupportedVersion)
from fluss_spark.metadata.layout import check_lease_id


class FakeLeases:
    """KV snapshot leases of a fake cluster; ``FakeCluster`` supplies the tables and the clock.

    ``leases``: lease id -> {"pins": {table_id: {bucket: snapshot_id}}, "partition_pins":
    {table_id: {partition_id: {bucket: snapshot_id}}}, "holders": {table_id: holder},
    "expires": ms, "created": ms}.
    """

    clock: Clock
    leases_supported: bool
    lease_renewal: Literal["renew", "reacquire"]
    leases: dict[str, dict]
    calls: list[tuple]

    def _by_id(self, tid):  # the FakeTable of a table id, or None (FakeCluster's)
        raise NotImplementedError

    def _now_ms(self) -> int:
        return self.clock()

    def _expire(self):
        now = self._now_ms()
        for lid in [k for k, v in self.leases.items() if v["expires"] <= now]:
            del self.leases[lid]

    def _lease_api(self):
        if not self.leases_supported:
            raise UnsupportedVersion("this fake cluster has no KV snapshot lease API")

    # -- the Cluster interface ----------------------------------------------------------------

    # -- leases -----------------------------------------------------------------------------
    def acquire_kv_snapshot_lease(self, lease_id: str, duration_ms: int, tables: Pins,
                                  holder: str | None = None, *,
                                  partitions: PartitionPins | None = None) -> Unavailable:
        """``partitions``: pins of partitions ``{table_id: {partition_id: {bucket: id}}}``; the
        answer's ``partitions`` attribute holds those not granted, in that shape."""
        self._lease_api()
        check_lease_id(lease_id)
        duration_ms = _check_duration(duration_ms)
        if holder is not None:
            _check_holder(holder)
        self.calls.append(("acquire", lease_id, {t: dict(p) for t, p in tables.items()}, holder))
        partitions = {t: {p: dict(bs) for p, bs in ps.items()}
                      for t, ps in (partitions or {}).items()}
        if partitions:
            self.calls.append(("acquire_partitions", lease_id, partitions, holder))
        self._expire()
        now = self._now_ms()
        current = self.leases.get(lease_id)
        pins = {t: dict(p) for t, p in current["pins"].items()} if current else {}
        part_pins = ({t: {p: dict(bs) for p, bs in ps.items()}
                      for t, ps in current.get("partition_pins", {}).items()} if current else {})
        holders = dict(current["holders"]) if current else {}

        def pinned(tid: int) -> bool:
            return bool(pins.get(tid)) or any(part_pins.get(tid, {}).values())
        if holder is not None:
            for tid in {*tables, *partitions}:
                other = holders.get(tid)
                if pinned(tid) and other is not None and other != holder:
                    raise LeaseHeldByOther(
                        f"KV snapshot lease {lease_id!r} pins table id {tid} for holder "
                        f"{other!r}, not {holder!r}; another query uses the same lease id. Fix: "
                        f"use a distinct scan.kv.snapshot.lease.id, or, if the other query is "
                        f"gone, drop the lease (`fluss-spark lease drop {lease_id}`)")
        unavailable: dict[int, dict[int, int]] = {}
        unavailable_partitions: dict[int, dict[int, dict[int, int]]] = {}
        for tid, wanted in tables.items():
            t = self._by_id(tid)
            for b, sid in wanted.items():
                if b < 0:
                    raise InvalidRequest(f"bucket {b} of table {tid} is negative")
                if t is not None and sid in t.snapshots.get(b, {}):
                    pins.setdefault(tid, {})[b] = sid
                else:
                    unavailable.setdefault(tid, {})[b] = sid
        for tid, by_partition in partitions.items():
            t = self._by_id(tid)
            for pid, wanted in by_partition.items():
                part = next((p for p in (t.partitions.values() if t else ())
                             if p.partition_id == pid), None)
                for b, sid in wanted.items():
                    if part is not None and sid in part.snapshots.get(b, {}):
                        part_pins.setdefault(tid, {}).setdefault(pid, {})[b] = sid
                    else:
                        unavailable_partitions.setdefault(tid, {}).setdefault(pid, {})[b] = sid
        pins = {t: p for t, p in pins.items() if p}
        part_pins = {t: {p: bs for p, bs in ps.items() if bs} for t, ps in part_pins.items()}
        part_pins = {t: ps for t, ps in part_pins.items() if ps}
        if holder is not None:
            holders.update((t, holder) for t in {*tables, *partitions} if pinned(t))
        # Kept even with no pins, as the coordinator does; holders go with their table's pins.
        self.leases[lease_id] = {"pins": pins, "partition_pins": part_pins,
                                 "holders": {t: h for t, h in holders.items() if pinned(t)},
                                 "created": current["created"] if current else now,
                                 "expires": now + duration_ms}
        return Unavailable(unavailable, unavailable_partitions)

    def renew_kv_snapshot_lease(self, lease_id: str, duration_ms: int) -> int:
        self._lease_api()
        if self.lease_renewal != "renew":
            raise UnsupportedVersion("this fake cluster renews a lease by acquiring it again")
        check_lease_id(lease_id)
        duration_ms = _check_duration(duration_ms)
        self.calls.append(("renew", lease_id))
        self._expire()
        if lease_id not in self.leases:
            raise LeaseNotFound(lease_id)
        self.leases[lease_id]["expires"] = self._now_ms() + duration_ms
        return self.leases[lease_id]["expires"]

    def release_kv_snapshot_lease(self, lease_id: str, tables: Mapping[int, Iterable[int]], *,
                                  partitions: Mapping[int, Mapping[int, Iterable[int]]]
                                  | None = None) -> int:
        """A table's buckets release them in the table and in every one of its partitions."""
        self._lease_api()
        check_lease_id(lease_id)
        self.calls.append(("release", lease_id, {t: list(b) for t, b in tables.items()}))
        self._expire()
        lease = self.leases.get(lease_id)
        if lease is None:
            return 0
        pins, part_pins = lease["pins"], lease.setdefault("partition_pins", {})
        removed = False
        for tid, buckets in tables.items():
            for b in buckets:
                removed |= pins.get(tid, {}).pop(b, None) is not None
                for by_bucket in part_pins.get(tid, {}).values():
                    removed |= by_bucket.pop(b, None) is not None
        for tid, by_partition in (partitions or {}).items():
            for pid, buckets in by_partition.items():
                for b in buckets:
                    removed |= part_pins.get(tid, {}).get(pid, {}).pop(b, None) is not None
        for tid in list({*pins, *part_pins}):
            part_pins[tid] = {p: bs for p, bs in part_pins.get(tid, {}).items() if bs}
            if not part_pins[tid]:
                del part_pins[tid]
            if tid in pins and not pins[tid]:
                del pins[tid]
            if tid not in pins and tid not in part_pins:
                lease["holders"].pop(tid, None)
        remaining = (sum(len(p) for p in pins.values())
                     + sum(len(bs) for ps in part_pins.values() for bs in ps.values()))
        if removed and not remaining:
            del self.leases[lease_id]
        return remaining

    def drop_kv_snapshot_lease(self, lease_id: str) -> bool:
        self._lease_api()
        check_lease_id(lease_id)
        self.calls.append(("drop", lease_id))
        return self.leases.pop(lease_id, None) is not None

    def list_kv_snapshot_leases(self) -> list[LeaseInfo]:
        self._lease_api()
        self._expire()
        return [self._info(lid) for lid in sorted(self.leases)]

    def describe_kv_snapshot_lease(self, lease_id: str) -> LeaseInfo:
        self._lease_api()
        check_lease_id(lease_id)
        self._expire()
        if lease_id not in self.leases:
            raise LeaseNotFound(lease_id)
        return self._info(lease_id)

    def _info(self, lease_id) -> LeaseInfo:
        v = self.leases[lease_id]
        tables = {t: dict(p) for t, p in v["pins"].items() if p}
        partitions = {t: {p: dict(bs) for p, bs in ps.items() if bs}
                      for t, ps in v.get("partition_pins", {}).items()}
        pinned = {*tables, *(t for t, ps in partitions.items() if ps)}
        return LeaseInfo(lease_id, v["expires"], v["created"], tables,
                         sum(len(p) for p in tables.values())
                         + sum(len(bs) for ps in partitions.values() for bs in ps.values()),
                         {t: h for t, h in v["holders"].items() if t in pinned},
                         partitions={t: ps for t, ps in partitions.items() if ps})


def _check_duration(duration_ms) -> int:
    # The client sends int(duration_ms); the coordinator refuses anything not positive.
    duration_ms = int(duration_ms)
    if duration_ms <= 0:
        raise InvalidRequest(f"duration_ms must be a positive integer, got {duration_ms!r}")
    return duration_ms


def _check_holder(holder) -> None:
    # The coordinator refuses a holder that is not a valid lease id as a bad request.
    try:
        check_lease_id(holder)
    except InvalidLeaseId:
        raise InvalidRequest(f"invalid lease holder {holder!r}") from None


__all__ = ["FakeLeases"]
