"""PinEdit: one lease's pins changed on copies, with what was added, moved and removed."""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Mapping

from fluss_spark.metadata.layout import LeaseRecord
from fluss_spark.metadata.lease_codec import NO_PARTITION

#: One pinned snapshot: (table_id, partition id or NO_PARTITION, bucket, snapshot_id).
PinKey = tuple[int, int, int, int]


class PinEdit:
    """Copy-on-write changes to the pins of one lease.

    A pin group is a table's own buckets (partition NO_PARTITION) or one partition's. Only the
    groups a change touches are copied: a change to a few buckets must not copy (nor make the
    store encode again) every pin of a 1,000,000-pin lease. ``added`` and ``removed`` list the
    pins for the reference counts, ``changed`` the buckets per group for the store
    (``{table_id or (table_id, partition_id): buckets, or None for the whole group}``).
    """

    def __init__(self, rec: LeaseRecord | None):
        self.base = rec
        self._tables: dict[int, dict[int, int]] = dict(rec.tables) if rec else {}
        self._partitions: dict[int, dict[int, dict[int, int]]] = \
            dict(rec.partitions) if rec else {}
        self._copied: set[tuple[int, int]] = set()
        self._copied_tables: set[int] = set()
        self.changed: dict = {}
        self.added: list[PinKey] = []
        self.removed: list[PinKey] = []

    def pins(self, table_id: int, partition: int = NO_PARTITION) -> Mapping[int, int]:
        """The group's pins as they stand (read only)."""
        if partition == NO_PARTITION:
            return self._tables.get(table_id, {})
        return self._partitions.get(table_id, {}).get(partition, {})

    def partition_ids(self, table_id: int) -> list[int]:
        return sorted(self._partitions.get(table_id, {}))

    def pinned_tables(self) -> set[int]:
        """Tables with pins, their own or their partitions'."""
        return ({t for t, p in self._tables.items() if p}
                | {t for t, ps in self._partitions.items() if any(ps.values())})

    def pin(self, table_id: int, partition: int, pins: Iterable[tuple[int, int]]) -> None:
        """Pin each ``(bucket, snapshot_id)`` (or move the group's pin of the bucket to it);
        the buckets are distinct."""
        current = self.pins(table_id, partition)
        target: dict[int, int] | None = None
        added, removed, buckets = self.added, self.removed, []
        for bucket, snapshot_id in pins:
            # ``current`` still holds the old pins after the copy (each bucket comes once).
            old = current.get(bucket)
            if old == snapshot_id:
                continue
            if target is None:
                target = self._writable(table_id, partition)
            target[bucket] = snapshot_id
            if old is not None:
                removed.append((table_id, partition, bucket, old))
            added.append((table_id, partition, bucket, snapshot_id))
            buckets.append(bucket)
        self._mark(table_id, partition, buckets)

    def unpin(self, table_id: int, partition: int, buckets: Iterable[int]) -> None:
        """Remove the group's pins of ``buckets`` (those it has)."""
        current = self.pins(table_id, partition)
        if not current:
            return
        target: dict[int, int] | None = None
        removed, gone = self.removed, []
        for bucket in buckets:
            if bucket not in (current if target is None else target):
                continue
            if target is None:
                target = self._writable(table_id, partition)
            removed.append((table_id, partition, bucket, target.pop(bucket)))
            gone.append(bucket)
        self._mark(table_id, partition, gone)

    def drop(self, table_id: int, partition: int | None = None) -> None:
        """Remove every pin of one partition, or (``partition`` None) of the table and all of
        its partitions."""
        groups = ([NO_PARTITION] + self.partition_ids(table_id) if partition is None
                  else [partition])
        for p in groups:
            pins = self.pins(table_id, p)
            if not pins:
                continue
            self.removed += [(table_id, p, b, s) for b, s in pins.items()]
            self.changed[table_id if p == NO_PARTITION else (table_id, p)] = None
            if p == NO_PARTITION:
                del self._tables[table_id]
            else:
                self._own_partitions(table_id).pop(p)
            self._copied.discard((table_id, p))

    def record(self, **fields) -> LeaseRecord:
        """The edited lease (``fields`` set the rest; a new lease needs them all); empty groups
        are left out, and a table's holder goes with its last pin."""
        tables = {t: p for t, p in self._tables.items() if p}
        partitions = {t: kept for t, ps in self._partitions.items()
                      if (kept := {p: pins for p, pins in ps.items() if pins})}
        pinned = set(tables) | set(partitions)
        holders = fields.pop("holders", self.base.holders if self.base else {})
        holders = {t: h for t, h in holders.items() if t in pinned}
        if self.base is None:
            return LeaseRecord(tables=tables, partitions=partitions, holders=holders, **fields)
        return replace(self.base, tables=tables, partitions=partitions, holders=holders,
                       **fields)

    def _writable(self, table_id: int, partition: int) -> dict[int, int]:
        if partition == NO_PARTITION:
            if (table_id, partition) not in self._copied:
                self._tables[table_id] = dict(self._tables.get(table_id, {}))
                self._copied.add((table_id, partition))
            return self._tables[table_id]
        own = self._own_partitions(table_id)
        if (table_id, partition) not in self._copied:
            own[partition] = dict(own.get(partition, {}))
            self._copied.add((table_id, partition))
        return own[partition]

    def _own_partitions(self, table_id: int) -> dict[int, dict[int, int]]:
        """The table's map of partitions, copied the first time it is changed."""
        if table_id not in self._copied_tables:
            self._partitions[table_id] = dict(self._partitions.get(table_id, {}))
            self._copied_tables.add(table_id)
        return self._partitions[table_id]

    def _mark(self, table_id: int, partition: int, buckets: list[int]) -> None:
        key = table_id if partition == NO_PARTITION else (table_id, partition)
        if not buckets or (key in self.changed and self.changed[key] is None):
            return      # nothing changed, or the whole group is written anyway
        self.changed.setdefault(key, set()).update(buckets)


def pin_keys(rec: LeaseRecord) -> list[PinKey]:
    """Every pin of a lease as a PinKey."""
    return [(t, p, b, s) for (t, p), pins in rec.groups().items() for b, s in pins.items()]
