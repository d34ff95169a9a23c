"""AutoPartitioner: the active coordinator's pass that creates and expires time partitions.

Every ``auto-partition.check.interval``, and at once when this coordinator starts leading or a
table is created, it visits each table with ``table.auto-partition.enabled``: it first drops the
partitions whose time value is older than ``num-retention`` units back, then creates the current
partition and the ``num-precreate - 1`` after it, as Fluss's AutoPartitionManager does. With
several partition keys only the time key (``table.auto-partition.key``) has a known value, so
nothing is created (such a table is refused at create unless ``num-precreate`` is 0) and
retention drops every partition whose time key value expired, whatever its other values.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Callable

from fluss_spark.clock import Clock, wall_ms
from fluss_spark.errors import ConfigError, FlussError
from fluss_spark.metadata.layout import TableRecord
from fluss_spark.protocol.auto_partition import AutoPartition
from fluss_spark.server.coordinator.partitions import PartitionManager
from fluss_spark.server.coordinator.tables import TableManager

log = logging.getLogger(__name__)

#: Drops a partition the way a DROP_PARTITION request does: (table, spec, ignore_if_not_exists).
DropPartition = Callable[[str, dict, bool], object]


@dataclass
class AutoPartitionPass:
    """What one pass did: ``(table, partition name)`` pairs created and dropped."""

    created: list = field(default_factory=list)
    dropped: list = field(default_factory=list)


class AutoPartitioner:
    """Creates the coming partitions and drops the expired ones of auto-partitioned tables."""

    def __init__(self, tables: TableManager, partitions: PartitionManager, *,
                 drop: DropPartition, clock: Clock = wall_ms):
        self._tables = tables
        self._partitions = partitions
        self._drop = drop
        self._clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # start and stop come from different threads (leadership changes, shutdown)
        self._lifecycle = threading.Lock()
        self._paused = False
        #: Tables whose properties were refused once: logged once, not every pass.
        self._refused: set[int] = set()

    def run_once(self, now_ms: int | None = None) -> AutoPartitionPass:
        """One pass over every auto-partitioned table at ``now_ms`` (default: the clock)."""
        now = self._clock() if now_ms is None else now_ms
        done = AutoPartitionPass()
        for name in self._tables.names():
            rec = self._tables.by_name(name)
            if rec is None or not rec.partitioned:
                continue
            strategy = self._strategy(rec)
            if strategy is not None and strategy.enabled:
                try:
                    self._table_pass(rec, strategy, now, done)
                except FlussError as e:     # dropped meanwhile, no tablet yet: next pass
                    log.warning("auto-partitioning of table %s skipped this pass: %s", name, e)
        return done

    def _strategy(self, rec: TableRecord) -> AutoPartition | None:
        try:
            return AutoPartition.of(rec.name, rec.properties, rec.partition_keys)
        except ConfigError as e:
            if rec.table_id not in self._refused:
                log.warning("table %s is not auto-partitioned: %s", rec.name, e)
                self._refused.add(rec.table_id)
            return None

    def _table_pass(self, rec: TableRecord, strategy: AutoPartition, now: int,
                    done: AutoPartitionPass) -> None:
        keys = list(rec.partition_keys)
        index = keys.index(strategy.time_key(keys))
        for part in self._partitions.of(rec.name):
            if strategy.expired(now, part.values[index]):
                self._drop(rec.name, dict(zip(keys, part.values)), True)
                log.info("auto-partitioning dropped partition %s of table %s (older than "
                         "%d %s)", part.name, rec.name, strategy.num_retention,
                         strategy.time_unit)
                done.dropped.append((rec.name, part.name))
        if len(keys) > 1:
            return      # the other keys' values are unknown: nothing to create
        existing = {p.name for p in self._partitions.of(rec.name)}
        for value in strategy.wanted(now):
            if value not in existing:
                self._partitions.create(rec.name, {keys[0]: value}, ignore_if_exists=True)
                log.info("auto-partitioning created partition %s of table %s", value, rec.name)
                done.created.append((rec.name, value))

    # -- the loop ----------------------------------------------------------------------------
    def tick(self, active: Callable[[], bool] | None = None) -> AutoPartitionPass | None:
        """One pass of the loop: skipped (None) while ``active`` says this coordinator may not
        change state (not the confirmed leader, or no live ZooKeeper session)."""
        if active is not None and not active():
            if not self._paused:
                log.warning("auto-partitioning paused: this coordinator is not the confirmed "
                            "leader or has no live ZooKeeper session")
            self._paused = True
            return None
        if self._paused:
            log.info("auto-partitioning resumed")
            self._paused = False
        return self.run_once()

    def start(self, interval_ms: int, active: Callable[[], bool] | None = None) -> None:
        """Run a pass now and every ``interval_ms`` (or when woken) until ``stop``."""
        with self._lifecycle:
            self._stop_thread()
            self._stop = stop = threading.Event()
            self._thread = threading.Thread(target=self._loop, args=(stop, interval_ms, active),
                                            name="auto-partitioning", daemon=True)
            self._thread.start()

    def _loop(self, stop: threading.Event, interval_ms: int,
              active: Callable[[], bool] | None) -> None:
        while not stop.is_set():
            self._wake.clear()
            try:
                self.tick(active)
            except Exception:  # noqa: BLE001 - ZooKeeper hiccups must not end the loop
                log.exception("auto-partitioning pass failed; retrying next interval")
            self._wake.wait(interval_ms / 1000.0)

    def wake(self) -> None:
        """Run the next pass now (a table was created)."""
        self._wake.set()

    def stop(self) -> None:
        with self._lifecycle:
            self._stop_thread()

    def _stop_thread(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None
