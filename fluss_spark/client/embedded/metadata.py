"""The client's cache of cluster metadata: coordinator, live tablets, tables and assignments."""

from __future__ import annotations

import threading

from fluss_spark.errors import ConfigError, LeaderNotAvailable, PartitionNotExist
from fluss_spark.protocol.messages import GetMetadataResponse, TableInfo


class MetadataCache:
    """Thread-safe view of the last GET_METADATA answers, merged table by table.

    Answers are merged in the order their requests were sent (``ticket``), not in the order
    they come back: threads sharing a connection refresh concurrently, and an answer to an
    earlier request arriving last would bring back a table as it was before (a partition
    just created missing from it)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.coordinator: tuple[str, int] | None = None
        self.tablets: dict[int, tuple[str, int]] = {}
        self._by_name: dict[str, TableInfo] = {}
        self._by_id: dict[int, TableInfo] = {}
        # The ticket of the request each table's entry (and the servers) came from.
        self._tickets: dict[str, int] = {}
        self._servers_ticket = -1
        self._next_ticket = 0

    def ticket(self) -> int:
        """The number of a request about to be sent: its answer goes to ``update`` with it."""
        with self._lock:
            self._next_ticket += 1
            return self._next_ticket

    def update(self, answer: GetMetadataResponse, *, complete: bool = False,
               ticket: int | None = None) -> list[TableInfo]:
        """Merge one GET_METADATA answer (to the request of ``ticket``; None: the newest);
        ``complete`` means it listed every table. What an answer to a later request already
        brought stays. Returns the answer's tables."""
        tables = list(answer.tables)
        coord = answer.coordinator
        with self._lock:
            if ticket is None:
                self._next_ticket += 1
                ticket = self._next_ticket
            if ticket > self._servers_ticket:
                self._servers_ticket = ticket
                self.coordinator = (coord.host, coord.port) if coord else None
                self.tablets = {t.id: (t.host, t.port) for t in answer.tablets}
            if complete:
                # Tables missing from a complete answer are gone, unless a later one has them.
                named = {t.name for t in tables}
                for name in [n for n, t in self._tickets.items()
                             if t < ticket and n not in named]:
                    self._drop(name)
            for t in tables:
                if self._tickets.get(t.name, -1) > ticket:
                    continue
                self._drop(t.name)
                self._by_name[t.name] = t
                self._by_id[t.table_id] = t
                self._tickets[t.name] = ticket
        return tables

    def _drop(self, name: str) -> None:
        old = self._by_name.pop(name, None)
        self._tickets.pop(name, None)
        if old is not None:
            self._by_id.pop(old.table_id, None)

    def forget(self, name: str) -> None:
        with self._lock:
            self._drop(name)

    def table(self, name: str) -> TableInfo | None:
        with self._lock:
            return self._by_name.get(name)

    def table_by_id(self, table_id: int) -> TableInfo | None:
        with self._lock:
            return self._by_id.get(int(table_id))

    def tablet_address(self, table: TableInfo, bucket: int,
                       partition_id: int | None = None) -> tuple[int, tuple[str, int]]:
        """(tablet id, address) hosting ``bucket`` (of partition ``partition_id``);
        LeaderNotAvailable when none is known, PartitionNotExist when the partition is gone."""
        if not 0 <= bucket < table.num_buckets:
            raise ConfigError(f"table {table.name} has buckets 0..{table.num_buckets - 1}, "
                                f"not {bucket}")
        with self._lock:
            current = self._by_id.get(table.table_id, table)
            assignment = current.assignment
            if partition_id is not None:
                part = next((p for p in current.partitions if p.partition_id == partition_id),
                            None)
                if part is None:
                    raise PartitionNotExist(f"partition id {partition_id} of table {table.name} "
                                            "does not exist (any more)")
                assignment = part.assignment
            tablet = assignment.get(bucket)
            addr = self.tablets.get(tablet) if tablet is not None else None
        if tablet is None or addr is None:
            raise LeaderNotAvailable(f"no live tablet server hosts bucket {bucket} of "
                                     f"{table.name} (assigned to {tablet})")
        return tablet, addr

    def addresses(self) -> list[tuple[str, int]]:
        """Every server address known, coordinator first."""
        with self._lock:
            out = [self.coordinator] if self.coordinator else []
            return out + [a for _, a in sorted(self.tablets.items())]
