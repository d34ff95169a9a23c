"""LeaseManager: KV snapshot leases that pin snapshots against retention and GC."""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from typing import Callable, Iterable, Mapping, NamedTuple, Protocol

from fluss_spark.clock import Clock, wall_ms
from fluss_spark.config import MAX_LEASE_DURATION_MS
from fluss_spark.errors import InvalidRequest, LeaseHeldByOther, LeaseNotFound
from fluss_spark.metadata.layout import LeaseRecord, check_lease_id
from fluss_spark.metadata.lease_codec import NO_PARTITION, PinChanges
from fluss_spark.server.coordinator.lease_pins import PinEdit, PinKey, pin_keys

log = logging.getLogger(__name__)


class Grant(NamedTuple):
    """What an acquire did not grant, and the lease's new expiry."""

    #: {table_id: {bucket: snapshot_id}}
    unavailable: dict
    #: {table_id: {partition_id: {bucket: snapshot_id}}}
    unavailable_partitions: dict
    expires_at_ms: int


class LeaseStore(Protocol):
    """The part of MetadataStore the lease manager writes through."""

    def save_lease(self, record: LeaseRecord,
                   changed: PinChanges | None = None) -> int: ...

    def delete_lease(self, lease_id: str) -> None: ...

    def load_leases(self) -> list[LeaseRecord]: ...


def _int(value, what: str) -> int:
    """Accept ints (and digit strings from loosely typed clients) for ids in request maps."""
    if isinstance(value, bool):
        raise InvalidRequest(f"{what} must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    raise InvalidRequest(f"{what} must be an integer, got {value!r}")


class LeaseManager:
    """Leases by id, a reference count per pinned snapshot, and the expiry pass.

    Every mutation is computed on a copy, written to the store, and only then applied in
    memory and acknowledged, so a failed ZooKeeper write changes nothing. All state is
    guarded by ``lock``, which the coordinator shares with the snapshot registry: checking
    that a snapshot exists and pinning it is atomic with respect to GC deleting it.

    ``snapshot_exists(table_id, bucket, snapshot_id[, partition_id])`` answers acquire's
    existence check (the partition id is passed only for a partition's pin);
    ``on_unpinned([PinKey])`` is told about snapshots whose last pin just went, so the registry
    can collect them at once if they are outside retention (what it returns is ignored).
    """

    def __init__(self, store: LeaseStore, *,
                 snapshot_exists: Callable[..., bool],
                 on_unpinned: Callable[[list[PinKey]], object] = lambda keys: None,
                 clock: Clock = wall_ms,
                 lock: threading.RLock | None = None):
        self._store = store
        self._exists = snapshot_exists
        self._on_unpinned = on_unpinned
        self._clock = clock
        self.lock = lock or threading.RLock()
        self._leases: dict[str, LeaseRecord] = {}
        self._refs: dict[PinKey, int] = {}
        self._expiry_thread: threading.Thread | None = None
        self._expiry_stop = threading.Event()

    # -- recovery ----------------------------------------------------------------------------
    def load(self) -> int:
        """Replace the in-memory state by every lease stored; returns how many were loaded."""
        with self.lock:
            self._leases, self._refs = {}, {}
            for rec in self._store.load_leases():
                self._leases[rec.lease_id] = rec
                self._add_refs(pin_keys(rec))
            return len(self._leases)

    # -- the API -----------------------------------------------------------------------------
    def acquire(self, lease_id: str, duration_ms: int,
                tables: Mapping[int, Mapping[int, int]],
                holder: str | None = None, owner: str | None = None) -> tuple[dict, int]:
        """``pin`` of tables' own buckets only; returns ``(unavailable, expires_at_ms)``."""
        grant = self.pin(lease_id, duration_ms, tables, holder=holder, owner=owner)
        return grant.unavailable, grant.expires_at_ms

    def pin(self, lease_id: str, duration_ms: int, tables: Mapping[int, Mapping[int, int]],
            partitions: Mapping[int, Mapping[int, Mapping[int, int]]] | None = None, *,
            holder: str | None = None, owner: str | None = None) -> Grant:
        """Pin snapshots of tables ``{table_id: {bucket: snapshot_id}}`` and of partitions
        ``{table_id: {partition_id: {bucket: snapshot_id}}}``; returns what was not granted.

        Creates the lease or extends it to now + ``duration_ms``. A bucket already pinned by
        this lease (in the same partition) moves to the requested snapshot. A snapshot that is
        not registered (in that partition) is reported unavailable and not pinned (the bucket
        keeps any pin it had).

        ``holder`` names the query the pins are for. If any requested table has pins (its own
        or its partitions') in this lease recorded for another holder, the whole acquire is
        refused (``LeaseHeldByOther``, nothing changes), so two queries sharing a lease id
        cannot move each other's pins. The same holder again is a restart of the same
        checkpoint and is granted. A holder claims every requested table that has pins
        afterwards. Without a holder (operators, older clients) nothing is refused and recorded
        holders stay. A table's holder is forgotten with its last pin (release, table or
        partition drop, expiry).

        ``owner``: the authenticated principal, recorded when the lease is created.
        """
        check_lease_id(lease_id)
        duration_ms = _duration(duration_ms)
        if holder is not None:
            _check_holder(holder)
        groups = _groups(tables, partitions or {})
        with self.lock:
            now = self._clock()
            current = self._live(lease_id, now)
            edit = PinEdit(current)
            holders = dict(current.holders) if current else {}
            if holder is not None:
                pinned = edit.pinned_tables()
                for table_id in {t for t, _, _ in groups}:
                    other = holders.get(table_id)
                    if table_id in pinned and other is not None and other != holder:
                        raise LeaseHeldByOther(
                            _held_by_other_message(lease_id, table_id, other, holder))
            unavailable: dict[int, dict[int, int]] = {}
            unavailable_partitions: dict[int, dict[int, dict[int, int]]] = {}
            for table_id, partition, pins in groups:
                granted, missing = self._check_pins(table_id, partition, pins)
                edit.pin(table_id, partition, granted)
                if missing and partition == NO_PARTITION:
                    unavailable.setdefault(table_id, {}).update(missing)
                elif missing:
                    unavailable_partitions.setdefault(table_id, {}).setdefault(
                        partition, {}).update(missing)
            if holder is not None:
                # No other holder owns these tables (checked above), so the caller claims them.
                holders.update((t, holder) for t, _, _ in groups)
            rec = edit.record(lease_id=lease_id,
                              created_ms=current.created_ms if current else now,
                              expires_at_ms=now + duration_ms, holders=holders,
                              owner=current.owner if current else owner)
            self._store.save_lease(rec, changed=edit.changed)
            self._leases[lease_id] = rec
            self._add_refs(edit.added)
            self._unpinned(self._remove_refs(edit.removed))
            return Grant(unavailable, unavailable_partitions, rec.expires_at_ms)

    def owner_of(self, lease_id: str) -> str | None:
        """The principal that created a live lease (None: unknown lease or no owner)."""
        with self.lock:
            rec = self._live(lease_id, self._clock())
            return rec.owner if rec is not None else None

    def pinned_tables(self, lease_id: str) -> list[int]:
        """The table ids a live lease pins (none for an unknown lease)."""
        with self.lock:
            rec = self._live(lease_id, self._clock())
            return sorted(rec.pinned_table_ids()) if rec is not None else []

    def renew(self, lease_id: str, duration_ms: int) -> int:
        """Extend a live lease to now + ``duration_ms``; LeaseNotFound if unknown or expired."""
        check_lease_id(lease_id)
        duration_ms = _duration(duration_ms)
        with self.lock:
            now = self._clock()
            current = self._live(lease_id, now)
            if current is None:
                raise LeaseNotFound(f"KV snapshot lease {lease_id!r} does not exist or has "
                                    "expired; its snapshots are no longer pinned, acquire again")
            rec = replace(current, expires_at_ms=now + duration_ms)
            self._store.save_lease(rec, changed={})
            self._leases[lease_id] = rec
            return rec.expires_at_ms

    def release(self, lease_id: str, tables: Mapping[int, Iterable[int]],
                partitions: Mapping[int, Mapping[int, Iterable[int]]] | None = None) -> int:
        """Unpin buckets; returns the pins left. Unknown leases and buckets are no-ops.

        ``tables`` ``{table_id: [bucket]}`` unpins those buckets of the table's own pins and of
        each of its partitions' (so all of its buckets release all of its pins); ``partitions``
        ``{table_id: {partition_id: [bucket]}}`` those of one partition. A lease left without
        pins is removed.
        """
        check_lease_id(lease_id)
        with self.lock:
            current = self._live(lease_id, self._clock())
            if current is None:
                return 0
            edit = PinEdit(current)
            for t_raw, buckets in tables.items():
                table_id = _table_id(t_raw)
                buckets = [_bucket(b) for b in buckets]
                for partition in [NO_PARTITION] + edit.partition_ids(table_id):
                    edit.unpin(table_id, partition, buckets)
            for t_raw, by_partition in (partitions or {}).items():
                table_id = _table_id(t_raw)
                for p_raw, buckets in by_partition.items():
                    edit.unpin(table_id, _partition_id(p_raw), [_bucket(b) for b in buckets])
            if not edit.removed:
                return current.pin_count()
            self._unpinned(self._write(lease_id, edit))
            return self._leases[lease_id].pin_count() if lease_id in self._leases else 0

    def drop(self, lease_id: str) -> bool:
        """Remove a lease and all its pins; False (no error) when it does not exist."""
        check_lease_id(lease_id)
        with self.lock:
            if lease_id not in self._leases:
                return False
            self._remove_lease(lease_id)
            return True

    def describe(self, lease_id: str) -> LeaseRecord:
        check_lease_id(lease_id)
        with self.lock:
            current = self._live(lease_id, self._clock())
            if current is None:
                raise LeaseNotFound(f"KV snapshot lease {lease_id!r} does not exist or has "
                                    "expired")
            return current

    def live(self) -> list[LeaseRecord]:
        """Every lease that has not expired."""
        with self.lock:
            now = self._clock()
            return [rec for lease_id, rec in sorted(self._leases.items())
                    if self._live(lease_id, now) is not None]

    # -- expiry ------------------------------------------------------------------------------
    def expire_once(self) -> list[str]:
        """Remove every expired lease now; returns their ids."""
        with self.lock:
            now = self._clock()
            expired = [i for i, rec in self._leases.items() if rec.expires_at_ms <= now]
            for lease_id in expired:
                log.info("KV snapshot lease %s expired", lease_id)
                self._remove_lease(lease_id)
            return expired

    def start_expiry(self, interval_ms: int, active: Callable[[], bool] | None = None) -> None:
        """Run ``expire_once`` every ``interval_ms`` on a daemon thread until ``stop_expiry``.

        ``active`` (the coordinator: "I lead and my ZooKeeper session is live") is asked before
        every pass; while it says no, passes are skipped: a coordinator that lost its session
        or its leadership must not expire leases (and collect the snapshots they pinned) from
        a state another coordinator may have changed. Passes resume when it says yes again."""
        self.stop_expiry()
        self._expiry_stop = threading.Event()
        stop = self._expiry_stop

        def loop():
            paused = False
            while not stop.wait(interval_ms / 1000.0):
                try:
                    if active is not None and not active():
                        if not paused:
                            log.warning("KV snapshot lease expiry paused: this coordinator is "
                                        "not the confirmed leader or has no live ZooKeeper "
                                        "session")
                        paused = True
                        continue
                    if paused:
                        log.info("KV snapshot lease expiry resumed")
                        paused = False
                    self.expire_once()
                except Exception:  # noqa: BLE001 - ZooKeeper hiccups must not end the loop
                    log.exception("KV snapshot lease expiry pass failed; retrying next interval")

        self._expiry_thread = threading.Thread(target=loop, name="lease-expiry", daemon=True)
        self._expiry_thread.start()

    def stop_expiry(self) -> None:
        self._expiry_stop.set()
        if (self._expiry_thread is not None
                and self._expiry_thread is not threading.current_thread()):
            self._expiry_thread.join(timeout=5)
        self._expiry_thread = None

    # -- table and partition drops, GC queries ------------------------------------------------
    def drop_table_pins(self, table_id: int) -> list[PinKey]:
        """Remove the table's pins, its partitions' included, from every lease (leases left
        empty are removed); returns the pins whose last reference went."""
        return self._drop_pins(table_id, None)

    def drop_partition_pins(self, table_id: int, partition_id: int) -> list[PinKey]:
        """Remove a (dropped) partition's pins from every lease, as ``drop_table_pins``."""
        return self._drop_pins(table_id, partition_id)

    def _drop_pins(self, table_id: int, partition_id: int | None) -> list[PinKey]:
        with self.lock:
            gone: list[PinKey] = []
            for lease_id, rec in list(self._leases.items()):
                edit = PinEdit(rec)
                edit.drop(table_id, partition_id)
                if edit.removed:
                    # Counted down with each lease's own write: if a later lease's write fails,
                    # the leases already changed must not keep their pins counted.
                    gone += self._write(lease_id, edit)
            return gone

    def table_ids(self) -> set[int]:
        """Every table id some lease pins (its own buckets or its partitions')."""
        with self.lock:
            return {t for rec in self._leases.values() for t in rec.pinned_table_ids()}

    def partition_ids(self) -> set[tuple[int, int]]:
        """Every (table_id, partition_id) some lease pins."""
        with self.lock:
            return {(t, p) for rec in self._leases.values()
                    for t, ps in rec.partitions.items() for p in ps}

    def is_pinned(self, table_id: int, bucket: int, snapshot_id: int,
                  partition_id: int | None = None) -> bool:
        return self.pin_refs(table_id, bucket, snapshot_id, partition_id) > 0

    def pin_refs(self, table_id: int, bucket: int, snapshot_id: int,
                 partition_id: int | None = None) -> int:
        return self._refs.get((table_id, _group_partition(partition_id), bucket, snapshot_id), 0)

    def pinned_by(self, table_id: int, bucket: int, snapshot_id: int,
                  partition_id: int | None = None) -> list[str]:
        with self.lock:
            if not self.is_pinned(table_id, bucket, snapshot_id, partition_id):
                return []
            return sorted(i for i, rec in self._leases.items()
                          if _group_pins(rec, table_id, partition_id).get(bucket) == snapshot_id)

    def metrics(self) -> tuple[dict, dict]:
        """({lease_count, leased_snapshot_count, lease_pin_count}, {table_id: {...}})."""
        with self.lock:
            per_table: dict[int, dict[str, int]] = {}
            for (t, _, _, _), n in self._refs.items():
                m = per_table.setdefault(t, {"leased_snapshot_count": 0, "lease_pin_count": 0})
                m["leased_snapshot_count"] += 1
                m["lease_pin_count"] += n
            return ({"lease_count": len(self._leases),
                     "leased_snapshot_count": len(self._refs),
                     "lease_pin_count": sum(self._refs.values())}, per_table)

    # -- internals ---------------------------------------------------------------------------
    def _live(self, lease_id: str, now: int) -> LeaseRecord | None:
        """The lease if it exists and has not expired; an expired one is removed on the spot."""
        rec = self._leases.get(lease_id)
        if rec is not None and rec.expires_at_ms <= now:
            self._remove_lease(lease_id)
            return None
        return rec

    def _remove_lease(self, lease_id: str) -> None:
        rec = self._leases[lease_id]
        self._store.delete_lease(lease_id)
        del self._leases[lease_id]
        self._unpinned(self._remove_refs(pin_keys(rec)))

    def _write(self, lease_id: str, edit: PinEdit) -> list[PinKey]:
        """Store an edited lease, or remove it when it has no pin left; returns the pins whose
        last reference went."""
        rec = edit.record()
        if rec.pin_count():
            self._store.save_lease(rec, changed=edit.changed)
            self._leases[lease_id] = rec
        else:
            self._store.delete_lease(lease_id)
            del self._leases[lease_id]
        return self._remove_refs(edit.removed)

    def _check_pins(self, table_id: int, partition: int, pins: Mapping
                    ) -> tuple[list[tuple[int, int]], dict[int, int]]:
        """(the (bucket, snapshot_id) pins whose snapshot is registered, the others) of one
        group an acquire names; the loop of a 1,000,000-pin acquire, so kept lean."""
        if partition == NO_PARTITION:
            exists = self._exists
        else:
            def exists(t, b, s):
                return self._exists(t, b, s, partition)
        granted, missing = [], {}
        for b_raw, s_raw in pins.items():
            bucket, snap = _int(b_raw, "bucket"), _int(s_raw, "snapshot_id")
            if bucket < 0:
                raise InvalidRequest(f"bucket {bucket} of {_where(table_id, partition)} is "
                                     "negative")
            if exists(table_id, bucket, snap):
                granted.append((bucket, snap))
            else:
                missing[bucket] = snap
        return granted, missing

    def _add_refs(self, keys: Iterable[PinKey]) -> None:
        refs = self._refs
        for key in keys:
            refs[key] = refs.get(key, 0) + 1

    def _remove_refs(self, keys: Iterable[PinKey]) -> list[PinKey]:
        """Decrement; returns the keys whose count reached zero."""
        gone = []
        refs = self._refs
        for key in keys:
            n = refs.get(key, 0) - 1
            if n > 0:
                refs[key] = n
            else:
                refs.pop(key, None)
                gone.append(key)
        return gone

    def _unpinned(self, keys: list[PinKey]) -> None:
        if keys:
            self._on_unpinned(keys)


def _table_id(raw) -> int:
    return _int(raw, "table_id")


def _held_by_other_message(lease_id: str, table_id: int, other: str, holder: str) -> str:
    """The LeaseHeldByOther message: whose pins they are and what the user can do about it."""
    return (f"KV snapshot lease {lease_id!r} pins table id {table_id} for holder {other!r}, not "
            f"{holder!r}; another query uses the same lease id. Fix: use a distinct "
            f"scan.kv.snapshot.lease.id, or, if the other query is gone, drop the lease "
            f"(`fluss-spark lease drop {lease_id}`)")


def _check_holder(holder) -> None:
    # A holder is stored beside lease ids and shown by the CLI, so it obeys the same charset.
    try:
        check_lease_id(holder)
    except Exception:  # noqa: BLE001 - any invalid value is the caller's bad request
        raise InvalidRequest(f"invalid lease holder {holder!r}: use 1 to 128 characters of "
                             "letters, digits, '.', '_' and '-'") from None


def _bucket(raw) -> int:
    return _int(raw, "bucket")


def _partition_id(raw) -> int:
    # Negative ids are refused: NO_PARTITION (-1) marks a table's own pins.
    partition = _int(raw, "partition_id")
    if partition < 0:
        raise InvalidRequest(f"partition id {partition} is negative")
    return partition


def _group_partition(partition_id: int | None) -> int:
    return NO_PARTITION if partition_id is None else partition_id


def _group_pins(rec: LeaseRecord, table_id: int, partition_id: int | None) -> Mapping[int, int]:
    if partition_id is None:
        return rec.tables.get(table_id, {})
    return rec.partitions.get(table_id, {}).get(partition_id, {})


def _groups(tables, partitions) -> list[tuple[int, int, Mapping]]:
    """(table_id, partition id or NO_PARTITION, {bucket: snapshot_id}) of each pin group an
    acquire names, tables' own first; ids and maps checked, the pins themselves not yet."""
    if not isinstance(tables, Mapping):
        raise InvalidRequest("tables must be a map {table_id: {bucket: snapshot_id}}")
    if not isinstance(partitions, Mapping):
        raise InvalidRequest("partitions must be a map {table_id: {partition_id: {bucket: "
                             "snapshot_id}}}")
    groups = [(_table_id(t), NO_PARTITION, pins) for t, pins in tables.items()]
    for t_raw, by_partition in partitions.items():
        table_id = _table_id(t_raw)
        if not isinstance(by_partition, Mapping):
            raise InvalidRequest(f"partition pins of table {table_id} must be a map "
                                 "{partition_id: {bucket: snapshot_id}}")
        groups += [(table_id, _partition_id(p), pins) for p, pins in by_partition.items()]
    for table_id, partition, pins in groups:
        if not isinstance(pins, Mapping):
            raise InvalidRequest(f"pins of {_where(table_id, partition)} must be a map "
                                 "{bucket: snapshot_id}")
    return groups


def _where(table_id: int, partition: int) -> str:
    return f"table {table_id}" + ("" if partition == NO_PARTITION
                                  else f" partition id {partition}")


def _duration(value) -> int:
    if (isinstance(value, bool) or not isinstance(value, int)
            or not 0 < value <= MAX_LEASE_DURATION_MS):
        raise InvalidRequest(f"duration_ms must be an integer in 1..{MAX_LEASE_DURATION_MS} "
                             f"(365 days), got {value!r}")
    return value
