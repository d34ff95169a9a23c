"""LeaseRecord: compact pin encodings, chunking across znodes, versions, and 1,000,000 buckets."""

import time
import zlib

import pytest

from fluss_spark.errors import CorruptMessage
from fluss_spark.metadata import layout
from fluss_spark.metadata.layout import LeaseRecord, decode_lease_pins, encode_lease_pins
from fluss_spark.metadata.store import MetadataStore
from fluss_spark.protocol.codec import packb


def test_dense_table_is_stored_as_one_array_with_minus_one_holes():
    entries = encode_lease_pins({3: {0: 5, 1: 5, 3: 6}})
    assert entries == [{"t": 3, "e": "dense", "s": [5, 5, -1, 6]}]
    assert decode_lease_pins(entries) == {3: {0: 5, 1: 5, 3: 6}}


def test_sparse_table_is_stored_as_parallel_arrays():
    entries = encode_lease_pins({3: {1000: 5, 70000: 6}})
    assert entries == [{"t": 3, "e": "sparse", "b": [1000, 70000], "s": [5, 6]}]
    assert decode_lease_pins(entries) == {3: {1000: 5, 70000: 6}}


def test_close_snapshot_ids_over_many_buckets_are_packed_into_fixed_width_bytes():
    tables = {1: {b: 70_000 + b % 300 for b in range(2000) if b != 7}}
    (entry,) = encode_lease_pins(tables)
    assert (entry["e"], entry["base"], entry["w"], len(entry["d"])) == ("packed", 70_000, 2, 4000)
    assert decode_lease_pins([entry]) == tables


def test_packed_bytes_of_v1_still_decode():
    # little-endian uint16 values 0 (no pin), 1, 3 with base 10 -> buckets 1 and 2 pinned.
    entry = {"t": 9, "e": "packed", "base": 10, "w": 2, "d": b"\x00\x00\x01\x00\x03\x00"}
    assert decode_lease_pins([entry]) == {9: {1: 10, 2: 12}}


def test_each_table_picks_its_own_encoding():
    tables = {1: {b: 2 for b in range(100)}, 2: {5000: 1}}
    entries = encode_lease_pins(tables)
    assert [e["e"] for e in entries] == ["dense", "sparse"]
    assert decode_lease_pins(entries) == tables


def test_inline_round_trip():
    rec = LeaseRecord("job-1", created_ms=5, expires_at_ms=99, tables={1: {0: 3, 2: 4}})
    header, chunks = rec.encode_parts(generation=1)
    assert chunks == []
    assert LeaseRecord.decode(header) == rec
    assert rec.pin_count() == 2


def test_chunked_round_trip_and_damage_is_detected():
    rec = LeaseRecord("big", 1, 2, tables={7: {b: b % 300 for b in range(5000)}})
    header, chunks = rec.encode_parts(generation=4, max_inline_bytes=1000)
    assert len(chunks) > 5
    assert LeaseRecord.decode_header(header)["generation"] == 4
    assert LeaseRecord.decode(header, chunks) == rec
    with pytest.raises(CorruptMessage, match="missing or damaged"):
        LeaseRecord.decode(header, chunks[:-1])


def test_v1_lease_bytes_still_decode():
    # Bytes as a v1 writer produced them: this pins the stored format.
    data = packb({"v": 1, "lease_id": "x", "created_ms": 1, "expires_at_ms": 2, "state": "ok",
                  "pins": [{"t": 4, "e": "dense", "s": [-1, 9]},
                           {"t": 5, "e": "sparse", "b": [10], "s": [11]}],
                  "generation": 1, "chunks": 0, "payload_bytes": 0, "payload_crc": 0})
    assert LeaseRecord.decode(data) == LeaseRecord("x", 1, 2, {4: {1: 9}, 5: {10: 11}})


def test_a_v1_header_without_holders_decodes_with_none_inline_or_chunked():
    # v1 headers built by hand, as a v1 writer stored them: no "holders" key at all.
    inline = packb({"v": 1, "lease_id": "old", "created_ms": 3, "expires_at_ms": 4, "state": "ok",
                    "pins": [{"t": 7, "e": "sparse", "b": [2], "s": [5]}],
                    "generation": 1, "chunks": 0, "payload_bytes": 0, "payload_crc": 0})
    rec = LeaseRecord.decode(inline)
    assert (rec.tables, rec.holders) == ({7: {2: 5}}, {})
    payload = packb([{"t": 7, "e": "dense", "s": [5, 6]}])
    chunked = packb({"v": 1, "lease_id": "old", "created_ms": 3, "expires_at_ms": 4,
                     "state": "ok", "pins": None, "generation": 2, "chunks": 2,
                     "payload_bytes": len(payload), "payload_crc": zlib.crc32(payload)})
    rec = LeaseRecord.decode(chunked, [payload[:4], payload[4:]])
    assert (rec.tables, rec.holders) == ({7: {0: 5, 1: 6}}, {})
    # Re-encoding a v1 record writes the current version.
    assert LeaseRecord.decode_header(rec.encode_parts(generation=3)[0])["v"] == LeaseRecord.VERSION


def test_v2_keeps_each_tables_holder_inline_and_chunked():
    rec = LeaseRecord("job-1", 5, 99, tables={1: {0: 3}, 2: {0: 4}}, holders={1: "q-a", 2: "q-b"})
    header, _ = rec.encode_parts(generation=1)
    assert LeaseRecord.decode_header(header)["v"] == LeaseRecord.VERSION
    back = LeaseRecord.decode(header)
    assert back == rec and back.holders == {1: "q-a", 2: "q-b"}
    big = LeaseRecord("big", 1, 2, tables={7: {b: b % 300 for b in range(5000)}}, holders={7: "q"})
    header, chunks = big.encode_parts(generation=2, max_inline_bytes=1000)
    assert chunks and LeaseRecord.decode(header, chunks).holders == {7: "q"}


def test_v3_records_the_owner_and_a_v2_header_decodes_without_one():
    rec = LeaseRecord("job-2", 5, 99, tables={1: {0: 3}}, holders={1: "q"}, owner="alice")
    header, _ = rec.encode_parts(generation=1)
    assert LeaseRecord.decode(header).owner == "alice"
    v2 = packb({"v": 2, "lease_id": "old", "created_ms": 1, "expires_at_ms": 2, "state": "ok",
                "holders": {1: "q"}, "pins": [], "generation": 1, "chunks": 0})
    back = LeaseRecord.decode(v2)
    assert back.owner is None and back.holders == {1: "q"}


def test_newer_lease_version_is_refused():
    with pytest.raises(CorruptMessage, match="newer than this software"):
        LeaseRecord.decode(packb({"v": LeaseRecord.VERSION + 1, "lease_id": "x"}))


def test_unknown_pin_encoding_is_refused():
    with pytest.raises(CorruptMessage, match="unknown encoding"):
        decode_lease_pins([{"t": 1, "e": "bitmap"}])


@pytest.fixture
def store(zk_address):
    s = MetadataStore(zk_address).start()
    yield s
    s.close()


def test_store_switches_between_inline_and_chunked_and_removes_old_chunks(store):
    small = LeaseRecord("l", 1, 2, {1: {0: 1}})
    store.save_lease(small)
    assert store.load_lease("l") == small
    big = LeaseRecord("l", 1, 3, {1: {b: 100_000 + b for b in range(300_000)}})
    store.save_lease(big)
    children = store.zk.get_children(layout.lease_path("l"))
    assert len(children) >= 2 and all(c.startswith("chunk-2-") for c in children)
    assert store.load_lease("l") == big
    bigger = LeaseRecord("l", 1, 4, {1: {b: 200_000 + b for b in range(400_000)}})
    store.save_lease(bigger)
    children = store.zk.get_children(layout.lease_path("l"))
    assert children and all(c.startswith("chunk-3-") for c in children)
    assert store.load_lease("l") == bigger
    store.save_lease(small)
    assert store.zk.get_children(layout.lease_path("l")) == []
    assert store.load_lease("l") == small


def test_orphan_chunks_of_an_interrupted_write_are_ignored(store):
    rec = LeaseRecord("l", 1, 2, {1: {0: 1}})
    store.save_lease(rec)
    # A writer died after creating next-generation chunks but before switching the header.
    store.zk.create(layout.lease_path("l") + "/" + layout.lease_chunk_name(2, 0), b"garbage")
    assert store.load_lease("l") == rec
    rec2 = LeaseRecord("l", 1, 5, {1: {0: 2}})
    store.save_lease(rec2)
    assert store.load_lease("l") == rec2
    assert store.zk.get_children(layout.lease_path("l")) == []


def test_a_first_write_that_never_finished_is_discarded_on_load(store):
    store.zk.create(layout.lease_path("half"), packb({
        "v": 1, "lease_id": "half", "created_ms": 1, "expires_at_ms": 2, "state": "writing",
        "pins": None, "generation": 0, "chunks": 0}))
    store.save_lease(LeaseRecord("ok", 1, 2, {}))
    assert [r.lease_id for r in store.load_leases()] == ["ok"]
    assert store.lease_ids() == ["ok"]


def test_a_lease_of_one_million_buckets_stores_and_reloads(store):
    tables = {1: {b: b % 1000 for b in range(1_000_000)}}
    rec = LeaseRecord("million", 1, 2, tables)
    t0 = time.monotonic()
    written = store.save_lease(rec)
    loaded = store.load_lease("million")
    elapsed = time.monotonic() - t0
    assert loaded.pin_count() == 1_000_000
    assert loaded.tables == tables
    assert written == store.lease_stored_bytes("million")
    assert written < 2_100_000          # about 2 bytes per pinned bucket (packed uint16)
    assert elapsed < 60
