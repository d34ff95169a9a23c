"""Partitions of a stream's partitioned tables: new ones found, gone ones reported once.

At most once a second (``GONE_CHECK_MS``), and at once after a read found a partition missing,
the driver asks for each partitioned table's fresh metadata (its partitions with their ids): a
partition the offset reads that is no longer listed has disappeared; every
``scan.partition.discovery.interval`` the ones not read yet are added. Partitions are told
apart by id, so a partition dropped and created again under the same name is one gone and one
new partition.

- **A new partition** joins the offset at its start position and is read from the next batch
  on. In ``full`` mode a PK table's partition that appears while the table's snapshot phase runs
  (some partition of it has snapshot rows left) joins that phase: its latest KV snapshots, pinned
  under the query's one lease before an offset names them (by the enumerator). After the phase it
  is read from changelog offset 0: a new partition's changelog holds every record it ever had,
  so it needs no snapshot and no pin, unless its log no longer starts at 0 (retention deleted
  its head), in which case its snapshot is pinned and read. In the other modes, and for log
  tables, it is read from its earliest offset.
- **A partition that disappears** (dropped by hand, or expired by the table's auto-partition
  retention) is removed from the offset: rows already delivered stay delivered. The driver logs
  ONE warning naming it and what it knew was not read, and counts it in the table's ``gone``
  entry of the offset (``fluss_spark/connector/progress.py`` reads it from the progress). With
  ``failOnDataLoss=true``, a partition dropped by hand with records known unread fails the query;
  one older than the retention window counts as expired and never fails it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Callable

from fluss_spark.client.cluster import Cluster, TableInfo, expired_by_retention, partition_spec
from fluss_spark.clock import Clock, monotonic_ms, wall_ms
from fluss_spark.connector.offsets import SourceOffset, TablePos, UnitKey
from fluss_spark.connector.options import SourceOptions
from fluss_spark.connector.planning import OffsetPlanner
from fluss_spark.errors import PartitionNotExist

log = logging.getLogger(__name__)

#: How often, at most, the partitions are listed to notice gone ones (a read that finds one
#: gone has them listed at the next micro-batch): Spark may ask for offsets every 10 ms.
GONE_CHECK_MS = 1000


@dataclass(frozen=True)
class PartitionChange:
    """What one look at the partitions changed: the offset to plan from, the partitions it
    added (key -> start position) and the ones it removed."""

    offset: SourceOffset
    added: dict[UnitKey, TablePos]
    gone: list[UnitKey]

    @property
    def changed(self) -> bool:
        return bool(self.added or self.gone)


class PartitionTracker:
    """Finds the partitions of a query's partitioned tables that appeared or disappeared."""

    def __init__(self, options: SourceOptions, cluster: Callable[[], Cluster],
                 planner: OffsetPlanner, *, clock: Clock = monotonic_ms,
                 wall: Clock = wall_ms):
        """``clock`` times discovery; ``wall`` (epoch ms) tells an expired partition."""
        self.options = options
        self._cluster = cluster
        self.planner = planner
        self.clock = clock
        self._wall = wall
        self._next_ms = clock() + options.partition_discovery_interval_ms
        self._next_check_ms = clock()
        self._forced = False

    def force(self) -> None:
        """Look for new partitions at the next micro-batch, whatever the interval."""
        self._forced = True

    def _discover(self) -> bool:
        interval = self.options.partition_discovery_interval_ms
        if self._forced or (interval > 0 and self.clock() >= self._next_ms):
            self._forced = False
            self._next_ms = self.clock() + interval
            return True
        return False

    def infos(self, offset: SourceOffset) -> dict[int, TableInfo]:
        """Fresh metadata of the offset's partitioned tables: their partitions with ids (and,
        on a client that caches metadata, reads by partition name address these)."""
        return {tid: self._cluster().get_table(t.name)
                for tid, t in sorted(offset.tables.items()) if t.partitioned}

    def existing(self, offset: SourceOffset) -> set[UnitKey]:
        """The units of ``offset`` that still exist (every unpartitioned table's)."""
        infos = self.infos(offset)
        alive = {(tid, p.partition_id) for tid, info in infos.items() for p in info.partitions}
        return {k for k in offset.units() if k[1] is None or k in alive}

    def update(self, start: SourceOffset) -> PartitionChange:
        """``start`` without its gone partitions and, when discovery is due, with the new ones
        at their start positions. Raises ``PartitionNotExist`` for a partition dropped by hand
        with records known unread, under ``failOnDataLoss=true``."""
        if not any(t.partitioned for t in start.tables.values()):
            return PartitionChange(start, {}, [])
        discover = self._discover()
        if not (discover or self.planner.vanished or self.clock() >= self._next_check_ms):
            return PartitionChange(start, {}, [])
        self.planner.vanished = False
        self._next_check_ms = self.clock() + GONE_CHECK_MS
        infos = self.infos(start)
        units = start.units()
        gone = [k for k in units if k[1] is not None
                and k[1] not in {p.partition_id for p in infos[k[0]].partitions}]
        counts = {tid: t.gone for tid, t in start.tables.items()}
        for key in gone:
            unread = self._report(start, key, infos[key[0]])
            n, records = counts[key[0]]
            counts[key[0]] = (n + 1, records + unread)
            for bucket_key in [k for k in self.planner.known_latest if k[0] == key]:
                del self.planner.known_latest[bucket_key]
        added: dict[UnitKey, TablePos] = {}
        if discover:
            for tid, info in infos.items():
                for p in sorted(info.partitions, key=lambda p: p.partition_id):
                    if (tid, p.partition_id) not in units:
                        try:
                            added[(tid, p.partition_id)] = self.start_of(start, info, p.name)
                        except PartitionNotExist:
                            continue        # dropped again at once: never read, never reported
        offset = start.with_units(added, drop=gone)
        if gone:
            offset = offset.with_tables({tid: replace(t, gone=counts[tid])
                                         for tid, t in offset.tables.items()})
        return PartitionChange(offset, added, gone)

    def start_of(self, start: SourceOffset, info: TableInfo, name: str) -> TablePos:
        """Where the new partition ``name`` of ``info`` starts (see the module docstring)."""
        mode = self.options.startup_mode
        if mode != "full" or not info.has_primary_key:
            return self.planner.unit_start(info, name, "earliest")
        if not start.tables[info.table_id].snapshot_complete:
            return self.planner.unit_start(info, name, "full")     # joins the snapshot phase
        earliest = self.planner.offsets(info.name, "earliest", partition=name)
        if any(earliest.values()):
            return self.planner.unit_start(info, name, "full")     # its log lost its head
        return TablePos(name, {}, {b: 0 for b in range(info.num_buckets)})

    def _report(self, start: SourceOffset, key: UnitKey, info: TableInfo) -> int:
        """Warn once about the gone partition ``key`` (or fail, see ``update``); returns how
        many of its records were known and not read."""
        pos = start.units()[key]
        unread, parts = 0, []
        for b in sorted(set(pos.snapshot) | set(pos.log)):
            snap = pos.snapshot.get(b)
            if snap is not None and not snap.complete:
                unread += snap.remaining
                parts.append(f"bucket {b}: rows [{snap.next_row}, {snap.row_count}) of KV "
                             f"snapshot {snap.snapshot_id}, then its changelog from offset "
                             f"{snap.log_offset}")
                continue
            at = pos.log.get(b, 0)
            latest = self.planner.known_latest.get((key, b))
            if latest is None:
                parts.append(f"bucket {b}: changelog from offset {at} (its end unknown)")
            elif latest > at:
                unread += latest - at
                parts.append(f"bucket {b}: changelog offsets [{at}, {latest})")
        expired = expired_by_retention(info, pos.name, self._wall())
        what = (f"table {info.name!r} partition {partition_spec(info.partition_keys, pos.name)} "
                f"(id {key[1]}) {'expired by retention' if expired else 'was dropped'} while "
                f"the query read it; not read: {'; '.join(parts) or 'nothing'}")
        if unread and not expired and self.options.fail_on_data_loss:
            raise PartitionNotExist(f"{what}. Those {unread} records are lost: set "
                                    f"failOnDataLoss=false to go on without them, or restart "
                                    f"the query with a new checkpointLocation")
        log.warning("%s; the query goes on without it (%s)", what,
                    "an expired partition never fails it" if expired
                    else "failOnDataLoss=false" if unread else "no record known unread")
        return unread


__all__ = ["PartitionChange", "PartitionTracker"]
