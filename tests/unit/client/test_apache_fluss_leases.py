"""The Apache Fluss lease requests over tables and partitions, and their answers."""

from __future__ import annotations

import pytest

from fluss_spark.client.apache_fluss.leases import (FlussLeases, acquire_request,
                                                    release_request, unavailable_pins)
from fluss_spark.errors import AuthorizationFailed, InvalidLeaseId, KvSnapshotNotExist
from fluss_spark.protocol.apache_fluss.messages import (AcquireKvSnapshotLeaseRequest,
                                                        AcquireKvSnapshotLeaseResponse,
                                                        GetKvSnapshotMetadataRequest,
                                                        GetKvSnapshotMetadataResponse,
                                                        PbKvSnapshotLeaseForBucket,
                                                        PbKvSnapshotLeaseForTable,
                                                        ReleaseKvSnapshotLeaseRequest)


def _pins(request: AcquireKvSnapshotLeaseRequest) -> list[tuple]:
    return [(t.table_id, b.partition_id, b.bucket_id, b.snapshot_id)
            for t in request.snapshots_to_lease for b in t.bucket_snapshots]


def test_acquire_sends_one_entry_per_table_with_partition_ids():
    request = acquire_request("job-1", 60_000, {1: {0: 10}},
                              {2: {6: {0: 22}, 5: {1: 20, 0: 21}}, 1: {9: {0: 30}}})
    # Fluss keeps only the last entry of a table id: a table's pins travel in one entry.
    assert [t.table_id for t in request.snapshots_to_lease] == [1, 2]
    assert _pins(request) == [(1, None, 0, 10), (1, 9, 0, 30), (2, 5, 0, 21), (2, 5, 1, 20),
                              (2, 6, 0, 22)]
    assert AcquireKvSnapshotLeaseRequest.decode(request.encode()) == request
    # A bucket of a partition: {1: partition 5, 2: bucket 1, 3: snapshot 20}.
    assert PbKvSnapshotLeaseForBucket(partition_id=5, bucket_id=1, snapshot_id=20).encode() == \
        b"\x08\x05\x10\x01\x18\x14"
    assert _pins(acquire_request("job-1", 1, {1: {0: 10}})) == [(1, None, 0, 10)]


def test_release_names_each_partition_bucket():
    request = release_request("job-1", {1: [0, 0, 1]}, {2: {5: [1], 4: [0]}})
    assert [(b.table_id, b.partition_id, b.bucket_id) for b in request.buckets_to_release] == [
        (1, None, 0), (1, None, 1), (2, 4, 0), (2, 5, 1)]
    # PbTableBucket {1: table 2, 2: partition 4, 3: bucket 0}.
    assert request.buckets_to_release[2].encode() == b"\x08\x02\x10\x04\x18\x00"
    assert ReleaseKvSnapshotLeaseRequest.decode(request.encode()) == request
    with pytest.raises(InvalidLeaseId):
        release_request("a/b", {}, {2: {5: [1]}})


def test_unavailable_pins_split_tables_from_partitions():
    resp = AcquireKvSnapshotLeaseResponse(unavailable_snapshots=[
        PbKvSnapshotLeaseForTable(table_id=1, bucket_snapshots=[
            PbKvSnapshotLeaseForBucket(bucket_id=0, snapshot_id=10)]),
        PbKvSnapshotLeaseForTable(table_id=2, bucket_snapshots=[
            PbKvSnapshotLeaseForBucket(partition_id=5, bucket_id=1, snapshot_id=20),
            PbKvSnapshotLeaseForBucket(partition_id=6, bucket_id=0, snapshot_id=22)])])
    assert unavailable_pins(AcquireKvSnapshotLeaseResponse.decode(resp.encode())) == (
        {1: {0: 10}}, {2: {5: {1: 20}, 6: {0: 22}}})


class Coordinator:
    """Answers ACQUIRE with nothing refused (as Fluss 0.9.1 does) and knows the snapshots
    ``existing`` ((table, partition, bucket, snapshot) tuples)."""

    def __init__(self, existing: set[tuple]):
        self.existing = existing
        self.sent: list = []
        self.kept: dict = {}

    def snapshot_answered(self, snapshot, answer):
        self.kept[snapshot] = answer

    def call_coordinator(self, request):
        self.sent.append(request)
        if isinstance(request, GetKvSnapshotMetadataRequest):
            key = (request.table_id, request.partition_id, request.bucket_id,
                   request.snapshot_id)
            if key not in self.existing:
                raise KvSnapshotNotExist(f"no snapshot {key}")
            return GetKvSnapshotMetadataResponse(log_offset=0)
        if isinstance(request, AcquireKvSnapshotLeaseRequest):
            return AcquireKvSnapshotLeaseResponse()
        return None

    def call_coordinator_many(self, requests):
        """Each answer, or its error in its place (as FlussWireConnection's)."""
        answers = []
        for request in requests:
            try:
                answers.append(self.call_coordinator(request))
            except KvSnapshotNotExist as e:
                answers.append(e)
        return answers


def test_a_granted_pin_of_a_snapshot_that_is_gone_is_reported_with_its_partition():
    coordinator = Coordinator({(1, None, 0, 10), (2, 5, 0, 21)})
    leases = FlussLeases(coordinator)                      # type: ignore[arg-type]
    refused = leases.acquire("job-1", 1000, {1: {0: 10, 1: 11}}, {2: {5: {0: 21, 1: 20}}})
    assert refused == ({1: {1: 11}}, {2: {5: {1: 20}}})
    asked = {(r.table_id, r.partition_id, r.bucket_id) for r in coordinator.sent
             if isinstance(r, GetKvSnapshotMetadataRequest)}
    assert asked == {(1, None, 0), (1, None, 1), (2, 5, 0), (2, 5, 1)}
    # The files of the snapshots found are kept, for the splits that read them.
    assert set(coordinator.kept) == {(1, None, 0, 10), (2, 5, 0, 21)}


def _checks(coordinator: Coordinator) -> list[tuple]:
    checks = [(r.table_id, r.partition_id, r.bucket_id, r.snapshot_id) for r in coordinator.sent
              if isinstance(r, GetKvSnapshotMetadataRequest)]
    coordinator.sent.clear()
    return sorted(checks, key=str)


def test_a_pin_held_without_a_gap_since_its_check_is_not_checked_again():
    coordinator = Coordinator({(1, None, 0, 10), (1, None, 1, 11), (1, None, 1, 12)})
    now = [0]
    leases = FlussLeases(coordinator, clock=lambda: now[0])    # type: ignore[arg-type]
    leases.acquire("job-1", 1000, {1: {0: 10, 1: 11}})
    assert _checks(coordinator) == [(1, None, 0, 10), (1, None, 1, 11)]
    now[0] = 999                        # renewed before the grant can have run out: no checks
    assert leases.acquire("job-1", 1000, {1: {0: 10, 1: 11}}) == ({}, {})
    assert _checks(coordinator) == []
    # A new snapshot of a bucket is checked; another lease's pins are its own.
    leases.acquire("job-1", 1000, {1: {0: 10, 1: 12}})
    assert _checks(coordinator) == [(1, None, 1, 12)]
    leases.acquire("job-2", 1000, {1: {0: 10}})
    assert _checks(coordinator) == [(1, None, 0, 10)]
    now[0] = 999 + 1000                 # the grant may have expired meanwhile: checked again
    leases.acquire("job-1", 1000, {1: {0: 10}})
    assert _checks(coordinator) == [(1, None, 0, 10)]
    leases.release("job-1", {1: [1]})   # after a release (or a drop) every pin is checked
    leases.acquire("job-1", 1000, {1: {0: 10}})
    assert _checks(coordinator) == [(1, None, 0, 10)]
    coordinator.existing.discard((1, None, 0, 10))
    leases.drop("job-1")
    assert leases.acquire("job-1", 1000, {1: {0: 10}}) == ({1: {0: 10}}, {})


def test_the_checks_of_a_grant_go_out_together_and_other_errors_are_raised():
    coordinator = Coordinator({(1, None, b, 10) for b in range(16)})
    windows: list[int] = []
    answer = coordinator.call_coordinator_many

    def pipelined(requests):
        windows.append(len(requests))
        return answer(requests)
    coordinator.call_coordinator_many = pipelined          # type: ignore[method-assign]
    leases = FlussLeases(coordinator)                      # type: ignore[arg-type]
    assert leases.acquire("job-1", 1000, {1: {b: 10 for b in range(16)}}) == ({}, {})
    assert windows == [16]          # one call for every bucket's check, not one each
    coordinator.call_coordinator_many = lambda requests: [   # type: ignore[method-assign]
        AuthorizationFailed("no DESCRIBE on table 1") for _ in requests]
    with pytest.raises(AuthorizationFailed, match="no DESCRIBE"):
        FlussLeases(coordinator).acquire("job-2", 1000, {1: {0: 10}})  # type: ignore[arg-type]
