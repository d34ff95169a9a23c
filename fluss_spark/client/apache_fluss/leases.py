"""KV snapshot leases of Apache Fluss 0.9.1: acquire, release and drop, for the buckets of
tables and of partitions; the KV snapshot metadata call that tells whether a pin holds; and
whether the coordinator has taken a new table in."""

from __future__ import annotations

import threading
import uuid
from typing import Callable, Iterable, Mapping, Sequence

from fluss_spark.client.apache_fluss.connection import FlussWireConnection
from fluss_spark.clock import monotonic_ms
from fluss_spark.errors import (ApiError, AuthorizationFailed, InvalidLeaseId,
                                KvSnapshotNotExist, NonPrimaryKeyTable)
from fluss_spark.protocol.apache_fluss.messages import (
    AcquireKvSnapshotLeaseRequest, AcquireKvSnapshotLeaseResponse, DropKvSnapshotLeaseRequest,
    GetKvSnapshotMetadataRequest, GetKvSnapshotMetadataResponse, PbKvSnapshotLeaseForBucket,
    PbKvSnapshotLeaseForTable, PbTableBucket, ReleaseKvSnapshotLeaseRequest)
from fluss_spark.protocol.names import LEASE_ID_RULE, is_valid_lease_id

#: ``{table_id: {bucket: snapshot_id}}``: pins of unpartitioned tables.
TablePins = Mapping[int, Mapping[int, int]]
#: ``{table_id: {partition_id: {bucket: snapshot_id}}}``: pins of partitions.
PartitionPins = Mapping[int, Mapping[int, Mapping[int, int]]]


def checked(lease_id: str) -> str:
    """The lease id, if this project's rule allows it: Fluss makes it a znode name unchecked."""
    if not is_valid_lease_id(lease_id):
        raise InvalidLeaseId(f"invalid lease id {lease_id!r}: use {LEASE_ID_RULE}")
    return lease_id


def _flat(tables: TablePins, partitions: PartitionPins | None) -> dict[int, dict[tuple, int]]:
    """``{table_id: {(partition_id or None, bucket): snapshot_id}}``."""
    out: dict[int, dict[tuple, int]] = {}
    for tid, pins in tables.items():
        for b, sid in pins.items():
            out.setdefault(int(tid), {})[(None, int(b))] = int(sid)
    for tid, parts in (partitions or {}).items():
        for pid, pins in parts.items():
            for b, sid in pins.items():
                out.setdefault(int(tid), {})[(int(pid), int(b))] = int(sid)
    return out


def acquire_request(lease_id: str, duration_ms: int, tables: TablePins,
                    partitions: PartitionPins | None = None) -> AcquireKvSnapshotLeaseRequest:
    """The ACQUIRE_KV_SNAPSHOT_LEASE request pinning ``tables`` and ``partitions``: one entry per
    table (Fluss keeps only the last entry of a table id), a partition's buckets with its id."""
    return AcquireKvSnapshotLeaseRequest(
        lease_id=checked(lease_id), lease_duration_ms=int(duration_ms),
        snapshots_to_lease=[PbKvSnapshotLeaseForTable(table_id=tid, bucket_snapshots=[
            PbKvSnapshotLeaseForBucket(partition_id=pid, bucket_id=b, snapshot_id=sid)
            for (pid, b), sid in sorted(pins.items(), key=lambda kv: (kv[0][0] or -1, kv[0][1]))])
            for tid, pins in sorted(_flat(tables, partitions).items())])


def unavailable_pins(resp: AcquireKvSnapshotLeaseResponse
                     ) -> tuple[dict[int, dict[int, int]], dict[int, dict[int, dict[int, int]]]]:
    """The pins an ACQUIRE answer refused: (of unpartitioned tables, of partitions)."""
    tables: dict[int, dict[int, int]] = {}
    partitions: dict[int, dict[int, dict[int, int]]] = {}
    for t in resp.unavailable_snapshots:
        for s in t.bucket_snapshots:
            if s.partition_id is None:
                tables.setdefault(t.table_id, {})[s.bucket_id] = s.snapshot_id
            else:
                partitions.setdefault(t.table_id, {}).setdefault(
                    s.partition_id, {})[s.bucket_id] = s.snapshot_id
    return tables, partitions


def release_request(lease_id: str, tables: Mapping[int, Iterable[int]],
                    partitions: Mapping[int, Mapping[int, Iterable[int]]] | None = None
                    ) -> ReleaseKvSnapshotLeaseRequest:
    """The RELEASE_KV_SNAPSHOT_LEASE request unpinning buckets of ``tables`` (``{table_id:
    [bucket]}``) and of ``partitions`` (``{table_id: {partition_id: [bucket]}}``)."""
    buckets = [PbTableBucket(table_id=int(tid), bucket_id=int(b))
               for tid, bs in sorted(tables.items()) for b in sorted(set(bs))]
    buckets += [PbTableBucket(table_id=int(tid), partition_id=int(pid), bucket_id=int(b))
                for tid, parts in sorted((partitions or {}).items())
                for pid, bs in sorted(parts.items()) for b in sorted(set(bs))]
    return ReleaseKvSnapshotLeaseRequest(lease_id=checked(lease_id), buckets_to_release=buckets)


def kv_snapshot_metadata(conn: FlussWireConnection, table_id: int, bucket: int, snapshot_id: int,
                         partition_id: int | None = None) -> GetKvSnapshotMetadataResponse:
    """The log offset and files of one KV snapshot; ``KvSnapshotNotExist`` when it is gone."""
    answer = conn.call_coordinator(GetKvSnapshotMetadataRequest(
        table_id=int(table_id), partition_id=partition_id, bucket_id=int(bucket),
        snapshot_id=int(snapshot_id)))
    conn.snapshot_answered((int(table_id), partition_id, int(bucket), int(snapshot_id)), answer)
    return answer


#: A pin as checked: (table id, partition id or None, bucket, snapshot id).
_Pin = tuple[int, "int | None", int, int]


def kv_snapshots_metadata(conn: FlussWireConnection, snapshots: Sequence[_Pin]
                          ) -> list[GetKvSnapshotMetadataResponse | ApiError]:
    """``kv_snapshot_metadata`` of each (table id, partition id or None, bucket, snapshot id),
    asked at once (pipelined): its answer, or the error it was answered with (not raised)."""
    answers = conn.call_coordinator_many([GetKvSnapshotMetadataRequest(
        table_id=int(tid), partition_id=pid, bucket_id=int(b), snapshot_id=int(sid))
        for tid, pid, b, sid in snapshots])
    for (tid, pid, b, sid), answer in zip(snapshots, answers):
        if not isinstance(answer, ApiError):
            conn.snapshot_answered((int(tid), pid, int(b), int(sid)), answer)
    return answers


def _missing(answer: GetKvSnapshotMetadataResponse | ApiError) -> bool:
    """Whether a snapshot's metadata answer says it is gone (any other error is raised)."""
    if isinstance(answer, KvSnapshotNotExist):
        return True
    if isinstance(answer, ApiError):
        raise answer
    return False


class FlussLeases:
    """The lease calls of one Apache Fluss cluster's coordinator."""

    def __init__(self, conn: FlussWireConnection, clock: Callable[[], int] = monotonic_ms):
        self.conn = conn
        self._clock = clock
        self._lock = threading.Lock()
        # By lease id: until when (this process's clock) its last grant surely held, and the
        # pins of that grant found to exist. A pin held since without a gap cannot have been
        # removed by retention, so acquiring it again (a renewal) needs no new check.
        self._checked: dict[str, tuple[int, set[_Pin]]] = {}

    def acquire(self, lease_id: str, duration_ms: int, tables: TablePins,
                partitions: PartitionPins | None = None
                ) -> tuple[dict[int, dict[int, int]], dict[int, dict[int, dict[int, int]]]]:
        """Pin ``tables`` and ``partitions``; returns the pins not granted (of tables, of
        partitions), each checked to still exist."""
        request = acquire_request(lease_id, duration_ms, tables, partitions)
        with self._lock:
            until, checked = self._checked.pop(lease_id, (0, set()))
        sent = self._clock()
        resp = self.conn.call_coordinator(request)
        # The earlier grant expires no sooner than its duration after it was sent: answered
        # before that, this grant extended it without a gap.
        held = checked if self._clock() < until else set()
        refused_tables, refused_parts = unavailable_pins(resp)
        granted: list[_Pin] = []
        for tid, pins in _flat(tables, partitions).items():
            for (pid, b), sid in pins.items():
                refused = (refused_tables.get(tid, {}) if pid is None
                           else refused_parts.get(tid, {}).get(pid, {}))
                if b not in refused:
                    granted.append((tid, pid, b, sid))
        # Fluss 0.9.1 may grant a pin on a snapshot that retention already removed (its answer
        # does not list it as unavailable), so every granted pin not held since it was checked
        # is checked to still exist: all of them at once, a table's buckets in a round trip.
        unchecked = [pin for pin in granted if pin not in held]
        gone = {pin for pin, answer in zip(unchecked, kv_snapshots_metadata(self.conn, unchecked))
                if _missing(answer)}
        for pin in gone:
            tid, pid, b, sid = pin
            if pid is None:
                refused_tables.setdefault(tid, {})[b] = sid
            else:
                refused_parts.setdefault(tid, {}).setdefault(pid, {})[b] = sid
        found = set(granted) - gone
        with self._lock:
            self._checked[lease_id] = (sent + int(duration_ms), found)
        return refused_tables, refused_parts

    def release(self, lease_id: str, tables: Mapping[int, Iterable[int]],
                partitions: Mapping[int, Mapping[int, Iterable[int]]] | None = None) -> None:
        request = release_request(lease_id, tables, partitions)
        self._forget(lease_id)
        self.conn.call_coordinator(request)

    def check_table_known(self, table_id: int) -> None:
        """Raises ``UnknownTableOrBucket`` while the coordinator's own table registry lacks
        ``table_id``. The release of a lease that does not exist asks exactly that and changes
        nothing: the coordinator looks the table up before anything else (a refused
        authorization, or a log table's answer that it has no primary key, come after), and a
        lease it lacks is a no-op."""
        probe = ReleaseKvSnapshotLeaseRequest(
            lease_id=f"fluss-spark-probe-{uuid.uuid4().hex}",
            buckets_to_release=[PbTableBucket(table_id=int(table_id), bucket_id=0)])
        try:
            self.conn.coordinator().call(probe)
        except (AuthorizationFailed, NonPrimaryKeyTable):
            pass

    def drop(self, lease_id: str) -> None:
        request = DropKvSnapshotLeaseRequest(lease_id=checked(lease_id))
        self._forget(lease_id)
        self.conn.call_coordinator(request)

    def _forget(self, lease_id: str) -> None:
        """A lease some of whose pins go: its next grant checks every pin again."""
        with self._lock:
            self._checked.pop(lease_id, None)


__all__ = ["FlussLeases", "PartitionPins", "TablePins", "acquire_request", "checked",
           "kv_snapshot_metadata", "kv_snapshots_metadata", "release_request",
           "unavailable_pins"]
