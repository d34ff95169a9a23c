"""TableManager: validation, creation, bucket assignment and dropping of table definitions."""

from __future__ import annotations

import threading
from dataclasses import replace

from fluss_spark import config
from fluss_spark.clock import Clock, wall_ms
from fluss_spark.errors import (ConfigError, CorruptMessage, InvalidConfig, InvalidTable,
                                LeaderNotAvailable, TableAlreadyExist, TableNotExist)
from fluss_spark.metadata.layout import AssignmentRecord, TableRecord, check_table_name
from fluss_spark.protocol.arrow_ipc import deserialize_schema, serialize_schema
from fluss_spark.protocol.auto_partition import AutoPartition
from fluss_spark.protocol.messages import AlterTableRequest, CreateTableRequest
from fluss_spark.protocol.partitions import check_partition_keys
from fluss_spark.protocol.schema_change import add_columns
from fluss_spark.protocol.types import validate_table_schema


def assign_buckets(table_id: int, num_buckets: int, tablet_ids: list[int]) -> AssignmentRecord:
    """Round-robin over the sorted live tablet ids, starting at ``table_id % n``."""
    ids = sorted(tablet_ids)
    if not ids:
        raise LeaderNotAvailable("no tablet server is registered; start one")
    start = table_id % len(ids)
    return AssignmentRecord(buckets=[ids[(start + i) % len(ids)] for i in range(num_buckets)])


class TableManager:
    """Table definitions by name and id, mirrored from ZooKeeper by the active coordinator."""

    def __init__(self, store, *, lock: threading.RLock | None = None,
                 clock: Clock = wall_ms):
        self._store = store
        self.lock = lock or threading.RLock()
        self._clock = clock
        self._by_name: dict[str, TableRecord] = {}
        self._by_id: dict[int, TableRecord] = {}

    def load(self) -> int:
        with self.lock:
            self._by_name, self._by_id = {}, {}
            for rec, _ in self._store.tables():
                self._by_name[rec.name] = rec
                self._by_id[rec.table_id] = rec
            return len(self._by_name)

    def by_id(self, table_id: int) -> TableRecord | None:
        return self._by_id.get(table_id)

    def by_name(self, name: str) -> TableRecord | None:
        return self._by_name.get(name)

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def num_retained(self, table_id: int) -> int | None:
        """``kv.snapshot.num-retained`` of a table; None when the table does not exist."""
        rec = self._by_id.get(table_id)
        if rec is None:
            return None
        try:
            return config.KV_SNAPSHOT_NUM_RETAINED.get(rec.properties)
        except ConfigError:
            return config.KV_SNAPSHOT_NUM_RETAINED.default

    def create(self, req: CreateTableRequest) -> int:
        """CREATE_TABLE: validate, allocate an id, assign buckets, write; returns the table id."""
        name = check_table_name(req.name)
        with self.lock:
            existing = self._by_name.get(name) or self._store.table(name)
            if existing is not None:
                if req.ignore_if_exists:
                    return existing.table_id
                raise TableAlreadyExist(f"table {name} already exists (table id "
                                        f"{existing.table_id}); drop it first or pass "
                                        "ignore_if_exists")
            schema_bytes, pk, bucket_key, num_buckets, props, partition_keys = \
                self._validate(req)
            tablets = list(self._store.tablets())
            if not tablets:
                raise LeaderNotAvailable("no tablet server is registered; start one")
            table_id = self._store.next_table_id()
            rec = TableRecord(table_id=table_id, name=name, schema=schema_bytes, primary_key=pk,
                              bucket_key=bucket_key, num_buckets=num_buckets,
                              properties=props, created_ms=self._clock(),
                              partition_keys=partition_keys)
            self._store.create_table(rec, assign_buckets(table_id, num_buckets, tablets))
            self._by_name[name] = rec
            self._by_id[table_id] = rec
            return table_id

    def alter(self, req: AlterTableRequest) -> TableRecord:
        """ALTER_TABLE: append nullable columns; the table gets the next schema id and keeps
        the old schema in its history (rows written under it still decode)."""
        name = check_table_name(req.name)
        with self.lock:
            rec = self._store.table(name)
            if rec is None:
                raise TableNotExist(f"table {name} does not exist")
            try:
                added = deserialize_schema(req.add_columns)
                schema = add_columns(name, deserialize_schema(rec.schema), added,
                                     rec.primary_key)
            except (ConfigError, CorruptMessage) as e:
                raise InvalidTable(str(e) if str(e).startswith("table ")
                                   else f"table {name}: {e}") from None
            new = replace(rec, schema=serialize_schema(schema), schema_id=rec.schema_id + 1,
                          schema_history=[*rec.schema_history, [rec.schema_id, rec.schema]])
            self._store.update_table(new)
            self._by_name[name] = new
            self._by_id[new.table_id] = new
            return new

    def drop(self, name: str, ignore_if_not_exists: bool = False) -> TableRecord | None:
        """Remove the definition and assignment; the caller removes snapshots and pins."""
        check_table_name(name)
        with self.lock:
            rec = self._by_name.get(name) or self._store.table(name)
            if rec is None:
                if ignore_if_not_exists:
                    return None
                raise TableNotExist(f"table {name} does not exist")
            try:
                self._store.drop_table(name)
            except TableNotExist:
                if not ignore_if_not_exists:
                    raise
            self._by_name.pop(name, None)
            self._by_id.pop(rec.table_id, None)
            return rec

    def _validate(self, req: CreateTableRequest):
        """Schema, keys, bucket count and properties of a new table (the wire decoder has
        checked the field types already)."""
        name = req.name
        try:
            schema = deserialize_schema(req.schema)
        except CorruptMessage as e:
            raise InvalidTable(f"table {name}: {e}") from None
        pk, bucket_key = list(req.primary_key), list(req.bucket_key)
        if len(set(pk)) != len(pk):
            raise InvalidTable(f"table {name}: primary key {pk} names a column twice")
        partition_keys = list(req.partition_keys)
        try:
            validate_table_schema(schema, pk, bucket_key)
            bucket_key = check_partition_keys(name, schema, pk, bucket_key, partition_keys)
        except ConfigError as e:
            raise InvalidTable(f"table {name}: {e}" if not str(e).startswith("table ")
                               else str(e)) from None
        if not 1 <= req.num_buckets <= config.MAX_BUCKETS:
            raise InvalidTable(f"table {name}: num_buckets must be between 1 and "
                               f"{config.MAX_BUCKETS}, got {req.num_buckets}")
        try:
            props = config.validate_table_properties(dict(req.properties))
            AutoPartition.of(name, props, partition_keys)
        except ConfigError as e:
            raise InvalidConfig(f"table {name}: {e}" if not str(e).startswith("table ")
                                else str(e)) from None
        return req.schema, pk, bucket_key, req.num_buckets, props, partition_keys
