"""PartitionManager: creating, listing and dropping the partitions of partitioned tables."""

from __future__ import annotations

import threading

from fluss_spark.clock import Clock, wall_ms
from fluss_spark.errors import (ConfigError, InvalidPartitionSpec, LeaderNotAvailable,
                                PartitionAlreadyExist, PartitionNotExist, TableNotExist,
                                TableNotPartitioned)
from fluss_spark.metadata.layout import PartitionRecord, TableRecord
from fluss_spark.protocol.partitions import partition_name, resolve, spec_text, values_of
from fluss_spark.server.coordinator.tables import TableManager, assign_buckets


class PartitionManager:
    """The partitions of every partitioned table, mirrored from ZooKeeper by the active
    coordinator; a partition's buckets are assigned on their own, like a table's."""

    def __init__(self, store, tables: TableManager, *, lock: threading.RLock | None = None,
                 clock: Clock = wall_ms):
        self._store = store
        self._tables = tables
        self.lock = lock or tables.lock
        self._clock = clock
        self._by_table: dict[int, dict[str, PartitionRecord]] = {}

    def load(self) -> int:
        """Reload every partition (after ``TableManager.load``); returns how many."""
        with self.lock:
            self._by_table = {}
            for name in self._tables.names():
                rec = self._tables.by_name(name)
                if rec is not None and rec.partitioned:
                    self._by_table[rec.table_id] = {
                        p.name: p for p in self._store.partitions(name)}
            return sum(len(p) for p in self._by_table.values())

    def of(self, table: str) -> list[PartitionRecord]:
        """The partitions of a partitioned table, by name."""
        rec = self._partitioned(table)
        with self.lock:
            return sorted(self._by_table.get(rec.table_id, {}).values(), key=lambda p: p.name)

    def create(self, table: str, spec: dict, ignore_if_exists: bool = False) -> PartitionRecord:
        """CREATE_PARTITION: check the spec, allocate an id, assign buckets, write."""
        with self.lock:
            rec = self._partitioned(table)
            name = self._name(rec, spec)
            known = self._by_table.setdefault(rec.table_id, {})
            if name in known:
                if ignore_if_exists:
                    return known[name]
                raise PartitionAlreadyExist(f"partition {self._text(rec, name)} of table {table} "
                                            "already exists")
            tablets = list(self._store.tablets())
            if not tablets:
                raise LeaderNotAvailable("no tablet server is registered; start one")
            partition_id = self._store.next_partition_id()
            part = PartitionRecord(
                table_id=rec.table_id, partition_id=partition_id, name=name,
                values=list(values_of(name)), created_ms=self._clock(),
                buckets=assign_buckets(partition_id, rec.num_buckets, tablets).buckets)
            self._store.create_partition(table, part)
            known[name] = part
            return part

    def drop(self, table: str, spec: dict, ignore_if_not_exists: bool = False
             ) -> PartitionRecord | None:
        """DROP_PARTITION: remove the record; the caller removes its snapshots and pins."""
        with self.lock:
            rec = self._partitioned(table)
            name = self._name(rec, spec)
            part = self._by_table.get(rec.table_id, {}).get(name)
            if part is None:
                if ignore_if_not_exists:
                    return None
                raise PartitionNotExist(f"partition {self._text(rec, name)} of table {table} "
                                        "does not exist; list them with `fluss-spark partition "
                                        f"list {table}`")
            try:
                self._store.drop_partition(table, name)
            except PartitionNotExist:
                pass
            self._by_table[rec.table_id].pop(name, None)
            return part

    def forget_table(self, table_id: int) -> list[PartitionRecord]:
        """Drop the cached partitions of a dropped table; returns them."""
        with self.lock:
            return list(self._by_table.pop(table_id, {}).values())

    def by_id(self, table_id: int, partition_id: int) -> PartitionRecord | None:
        with self.lock:
            for part in self._by_table.get(table_id, {}).values():
                if part.partition_id == partition_id:
                    return part
            return None

    def _partitioned(self, table: str) -> TableRecord:
        rec = self._tables.by_name(table)
        if rec is None:
            raise TableNotExist(f"table {table} does not exist")
        if not rec.partitioned:
            raise TableNotPartitioned(f"table {table} is not partitioned; it has no partitions "
                                      "to create, drop or list")
        return rec

    @staticmethod
    def _name(rec: TableRecord, spec: dict) -> str:
        try:
            return partition_name(resolve(rec.name, rec.partition_keys, spec))
        except ConfigError as e:
            raise InvalidPartitionSpec(str(e)) from None

    @staticmethod
    def _text(rec: TableRecord, name: str) -> str:
        return spec_text(rec.partition_keys, values_of(name))
