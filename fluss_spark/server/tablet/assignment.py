"""What a tablet server hosts: the buckets of tables and of partitions assigned to its id, and
where each bucket keeps its local data."""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from fluss_spark.metadata.layout import PartitionRecord, TableRecord
from fluss_spark.metadata.store import MetadataStore

log = logging.getLogger(__name__)

#: A hosted bucket: (table id, partition id or None, bucket).
BucketKey = tuple[int, int | None, int]
#: Prefix of a partition's directory under its table's: ``p<partition id>``.
PARTITION_DIR_PREFIX = "p"


@dataclass
class Assignment:
    """Tables and partitions as ZooKeeper lists them, and which of their buckets a server owns.

    An unpartitioned table's buckets follow its assignment; a partitioned table has buckets only
    in its partitions, each assigned on its own (the table's own assignment is not used)."""

    #: table id -> (record, tablet id of each bucket)
    tables: dict[int, tuple[TableRecord, list]] = field(default_factory=dict)
    #: (table id, partition id) -> partition record
    partitions: dict[tuple[int, int], PartitionRecord] = field(default_factory=dict)

    @classmethod
    def read(cls, store: MetadataStore) -> "Assignment":
        out = cls()
        for rec, assignment in store.tables():
            out.tables[rec.table_id] = (rec, list(assignment.buckets) if assignment else [])
            if rec.partitioned:
                for p in store.partitions(rec.name):
                    out.partitions[(rec.table_id, p.partition_id)] = p
        return out

    def owners(self, table_id: int, partition_id: int | None) -> list:
        """The tablet id of each bucket of a table (or of one of its partitions)."""
        if partition_id is None:
            rec, owners = self.tables.get(table_id, (None, []))
            return [] if rec is None or rec.partitioned else owners
        part = self.partitions.get((table_id, partition_id))
        return list(part.buckets) if part is not None else []

    def owned_by(self, server_id: int) -> set[BucketKey]:
        keys: set[BucketKey] = set()
        for tid in self.tables:
            keys.update((tid, None, b) for b, o in enumerate(self.owners(tid, None))
                        if o == server_id)
        for tid, pid in self.partitions:
            keys.update((tid, pid, b) for b, o in enumerate(self.owners(tid, pid))
                        if o == server_id)
        return keys


def table_dir(data_dir: Path, table_id: int) -> Path:
    return data_dir / "tables" / str(table_id)


def bucket_dir(data_dir: Path, key: BucketKey) -> Path:
    """``tables/<table id>/<bucket>``, or ``tables/<table id>/p<partition id>/<bucket>``."""
    table_id, partition_id, bucket = key
    base = table_dir(data_dir, table_id)
    if partition_id is not None:
        base = base / f"{PARTITION_DIR_PREFIX}{partition_id}"
    return base / str(bucket)


def remove_dropped_dirs(data_dir: Path, known: Assignment) -> None:
    """Delete the local data of tables and partitions that no longer exist."""
    root = data_dir / "tables"
    if not root.is_dir():
        return
    for d in root.iterdir():
        if not d.name.isdigit():
            continue
        if int(d.name) not in known.tables:
            log.info("deleting local data of dropped table id %s", d.name)
            shutil.rmtree(d, ignore_errors=True)
            continue
        for p in d.iterdir():
            pid = p.name[len(PARTITION_DIR_PREFIX):]
            if p.name.startswith(PARTITION_DIR_PREFIX) and pid.isdigit() \
                    and (int(d.name), int(pid)) not in known.partitions:
                log.info("deleting local data of dropped partition id %s of table id %s", pid,
                         d.name)
                shutil.rmtree(p, ignore_errors=True)
