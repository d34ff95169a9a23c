"""SnapshotMigration: the coordinator's background move of layout v1 KV snapshot znodes into
the snapshot index."""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from fluss_spark.errors import NotCoordinatorLeader
from fluss_spark.server.coordinator.snapshots import SnapshotRegistry

log = logging.getLogger(__name__)


class SnapshotMigration:
    """Runs ``SnapshotRegistry.migrate_step`` on a daemon thread until no layout v1 snapshot
    is left, so a coordinator serves at once however large the old layout is.

    Each step moves up to 128 buckets of one table and holds the coordinator's lock only
    while it writes; ``pause_ms`` between steps spreads the load on ZooKeeper. Steps run only
    while ``active()`` (the coordinator leads and its session is live); a step fenced by a
    newer coordinator ends the thread, and that coordinator resumes the move where it stands.
    """

    def __init__(self, registry: SnapshotRegistry):
        self._registry = registry
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self, pause_ms: int, active: Callable[[], bool]) -> None:
        self.stop()
        left = self._registry.unmoved_buckets()
        if not left:
            return
        log.info("moving the layout v1 KV snapshots of %d buckets into the snapshot index in "
                 "the background", left)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(self._stop, pause_ms, active),
                                        name="snapshot-migration", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self._thread = None

    def _run(self, stop: threading.Event, pause_ms: int, active: Callable[[], bool]) -> None:
        started = time.monotonic()
        backoff_s = 1.0
        while not stop.is_set():
            if not active():
                stop.wait(0.2)      # no leadership confirmed, or ZooKeeper away: wait
                continue
            try:
                left = self._registry.migrate_step()
            except NotCoordinatorLeader:
                return              # another coordinator leads and continues the move
            except Exception as e:  # noqa: BLE001 - ZooKeeper trouble: the step is retried
                log.warning("moving layout v1 KV snapshots failed (%s: %s); retrying in %.0f s",
                            type(e).__name__, e, backoff_s)
                stop.wait(backoff_s)
                backoff_s = min(30.0, backoff_s * 2)
                continue
            backoff_s = 1.0
            if not left:
                log.info("layout v1 KV snapshot migration finished in %.1f s",
                         time.monotonic() - started)
                return
            if pause_ms:
                stop.wait(pause_ms / 1000.0)
