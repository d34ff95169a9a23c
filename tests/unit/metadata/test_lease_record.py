"""LeaseRecord: compact pin encodings, chunking across znodes, versions, and 1,000,000 buckets."""

import random
import time
import zlib

import pytest

from fluss_spark.errors import CorruptMessage
from fluss_spark.metadata import layout, lease_codec
from fluss_spark.metadata.layout import LeaseRecord
from fluss_spark.metadata.lease_codec import decode_lease_pins, encode_lease_pins
from fluss_spark.metadata.store import MetadataStore
from fluss_spark.protocol.codec import packb


def test_a_few_pins_are_stored_as_parallel_arrays():
    entries = encode_lease_pins({3: {0: 5, 1: 5, 3: 6}})
    assert entries == [{"t": 3, "e": "sparse", "b": [0, 1, 3], "s": [5, 5, 6]}]
    assert decode_lease_pins(entries) == {3: {0: 5, 1: 5, 3: 6}}


def test_pins_far_apart_fall_into_separate_parts():
    entries = encode_lease_pins({3: {1000: 5, 70000: 6}})
    assert [(e["e"], e["b"]) for e in entries] == [("sparse", [1000]), ("sparse", [70000])]
    assert decode_lease_pins(entries) == {3: {1000: 5, 70000: 6}}


def test_ids_in_a_narrow_window_are_bit_packed_from_the_table_minimum():
    rng = random.Random(3)
    pins = {b: 70_000 + rng.randrange(300) for b in range(2000)}
    (entry,) = encode_lease_pins({1: pins})
    assert (entry["e"], entry["mode"], entry["n"], entry["m"]) == ("pfor", "for", 0, 2000)
    assert entry["base"] == min(pins.values()) and entry["w"] == 9     # 300 values: 9 bits
    assert len(entry["d"]) <= 2000 * 9 // 8 + 1
    assert decode_lease_pins([entry]) == {1: pins}


def test_ids_that_follow_the_bucket_number_are_delta_coded():
    pins = {b: 1000 + (b * 7919) % 100_000 for b in range(5000)}
    (entry,) = encode_lease_pins({1: pins})
    assert (entry["e"], entry["mode"]) == ("pfor", "delta")
    assert len(packb(entry)) < 5000 // 4     # two distinct differences: zlib folds most
    assert decode_lease_pins([entry]) == {1: pins}


def test_outliers_become_exceptions_instead_of_widening_every_value():
    pins = {b: 500 + b % 7 for b in range(4000)}
    pins.update({17: 9_000_000_000, 3001: 3})
    (entry,) = encode_lease_pins({1: pins})
    assert entry["e"] == "pfor" and entry["x"] >= 1 and entry["w"] <= 4
    assert decode_lease_pins([entry]) == {1: pins}


def test_frequent_exceptions_are_marked_in_a_bitmap():
    rng = random.Random(8)
    # Two clusters of ids 70,001 apart, a third of the buckets in the upper one.
    pins = {b: 1000 + rng.randrange(50) + 70_001 * (rng.random() < 1 / 3) for b in range(6000)}
    (entry,) = encode_lease_pins({1: pins})
    assert entry["e"] == "pfor" and entry["xb"] == 1 and entry["x"] > 1000
    assert len(packb(entry)) < 1.2 * 6000  # a position list would take 1.9 bytes a bucket
    assert decode_lease_pins([entry]) == {1: pins}
    damaged = dict(entry, x=entry["x"] + 1)
    with pytest.raises(CorruptMessage, match="bitmap marks"):
        decode_lease_pins([damaged])


def test_a_pfor_entry_without_the_bitmap_flag_decodes_as_a_position_list():
    pins = {b: 500 + b % 7 for b in range(4000)}
    pins[17] = 9_000_000_000
    (entry,) = encode_lease_pins({1: pins})
    assert entry["xb"] == 0
    del entry["xb"]
    assert decode_lease_pins([entry]) == {1: pins}


def test_holes_are_kept_in_a_bitmap():
    pins = {b: 40 + b % 3 for b in range(0, 3000, 3)}
    (entry,) = encode_lease_pins({2: pins})
    assert entry["e"] == "pfor" and entry["n"] == 2998
    assert decode_lease_pins([entry]) == {2: pins}


@pytest.mark.parametrize("seed", range(6))
def test_random_pins_of_every_shape_round_trip(seed):
    rng = random.Random(seed)
    tables = {}
    for t in range(rng.randrange(1, 4)):
        n = rng.choice([1, 5, 300, 3000, 70_000])
        spread = rng.choice([1, 2, 255, 256, 3000, 65_537, 2 ** 33 + 7, 2 ** 62])
        base = rng.randrange(0, 2 ** 62 - spread)
        holes = rng.random() < 0.5
        tables[t + 100] = {b: base + rng.randrange(spread) for b in range(n)
                           if not holes or rng.random() < 0.7}
    tables = {t: p for t, p in tables.items() if p}
    assert decode_lease_pins(encode_lease_pins(tables)) == tables
    rec = LeaseRecord("r", 1, 2, tables)
    header, children = rec.encode_all(generation=3)
    assert LeaseRecord.decode(header, parts=children) == rec


def test_ids_past_int64_are_kept_as_msgpack_integers():
    pins = {b: 2 ** 64 - 1 - b for b in range(400)}
    (entry,) = encode_lease_pins({1: pins})
    assert entry["e"] == "sparse"
    assert decode_lease_pins([entry]) == {1: pins}


def test_a_negative_bucket_is_refused():
    with pytest.raises(ValueError, match="negative"):
        encode_lease_pins({1: {-1: 4}})


@pytest.mark.parametrize("damage", ["cut", "count", "mode", "bytes"])
def test_a_damaged_pfor_part_is_a_corrupt_message(damage):
    import zlib
    (entry,) = encode_lease_pins({1: {b: 10 + b % 100 for b in range(3000) if b % 5}})
    raw = zlib.decompress(entry["d"]) if entry["z"] else entry["d"]
    entry = dict(entry, z=0, d=raw)
    if damage == "cut":
        entry["d"] = raw[:-3]
    elif damage == "count":
        entry["m"] += 1
    elif damage == "mode":
        entry["mode"] = "huffman"
    else:
        entry["d"] = raw + b"\0\0"
    with pytest.raises(CorruptMessage):
        decode_lease_pins([entry])


@pytest.mark.parametrize("shape", ["window 300", "window 3000", "ids follow buckets over 100k",
                                   "3% outliers over 3M", "trend over 1M with noise",
                                   "two clusters 70,001 apart"])
def test_a_million_pins_take_at_most_1_5_bytes_each(shape):
    rng = random.Random(11)
    n = 1_000_000
    if shape == "window 300":
        pins = {b: 5000 + rng.randrange(300) for b in range(n)}
    elif shape == "window 3000":
        pins = {b: 5000 + rng.randrange(3000) for b in range(n)}
    elif shape == "ids follow buckets over 100k":
        pins = {b: 1000 + (b * 7919) % 100_000 for b in range(n)}
    elif shape == "3% outliers over 3M":
        pins = {b: 5000 + rng.randrange(200) if rng.random() < 0.97 else rng.randrange(3_000_000)
                for b in range(n)}
    elif shape == "trend over 1M with noise":
        pins = {b: b + rng.randrange(30) for b in range(n)}
    else:
        pins = {b: 1000 + rng.randrange(50) + 70_001 * (rng.random() < 1 / 3) for b in range(n)}
    header, children = LeaseRecord("m", 1, 2, {1: pins}).encode_all(generation=1)
    size = len(header) + sum(len(c) for c in children.values())
    assert size <= 1.5 * n
    assert LeaseRecord.decode(header, parts=children).tables == {1: pins}


def test_packed_bytes_of_v1_still_decode():
    # little-endian uint16 values 0 (no pin), 1, 3 with base 10 -> buckets 1 and 2 pinned.
    entry = {"t": 9, "e": "packed", "base": 10, "w": 2, "d": b"\x00\x00\x01\x00\x03\x00"}
    assert decode_lease_pins([entry]) == {9: {1: 10, 2: 12}}


def test_each_table_picks_its_own_encoding():
    tables = {1: {b: 2 for b in range(1000)}, 2: {5000: 1}}
    entries = encode_lease_pins(tables)
    assert [e["e"] for e in entries] == ["pfor", "sparse"]
    assert decode_lease_pins(entries) == tables


def test_inline_round_trip():
    rec = LeaseRecord("job-1", created_ms=5, expires_at_ms=99, tables={1: {0: 3, 2: 4}})
    header, children = rec.encode_all(generation=1)
    assert children == {}
    assert LeaseRecord.decode_header(header)["v"] == 4
    assert LeaseRecord.decode(header) == rec
    assert rec.pin_count() == 2


def test_large_parts_go_to_child_znodes_and_damage_is_detected(monkeypatch):
    monkeypatch.setattr(lease_codec, "LEASE_PART_BUCKETS", 1000)
    rng = random.Random(5)
    rec = LeaseRecord("big", 1, 2, tables={7: {b: rng.randrange(10 ** 6) for b in range(5000)},
                                          8: {0: 1}})
    header, children = rec.encode_all(generation=4)
    assert sorted(children) == [lease_codec.lease_part_name(7, k, 4) for k in range(5)]
    raw = LeaseRecord.decode_header(header)
    assert raw["generation"] == 4 and len(raw["parts"]) == 1     # table 8 is inline
    assert LeaseRecord.decode(header, parts=children) == rec
    name = lease_codec.lease_part_name(7, 2, 4)
    with pytest.raises(CorruptMessage, match="part 2 of table 7 .* missing or damaged"):
        LeaseRecord.decode(header, parts={n: d for n, d in children.items() if n != name})
    damaged = dict(children, **{name: children[name][:-1] + b"x"})
    with pytest.raises(CorruptMessage, match="missing or damaged"):
        LeaseRecord.decode(header, parts=damaged)


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
    # Re-encoding a v1 record writes the current version of a lease without partition pins.
    assert (LeaseRecord.decode_header(rec.encode_all(generation=3)[0])["v"]
            == LeaseRecord.TABLES_ONLY_VERSION)


def test_v2_keeps_each_tables_holder_inline_and_in_parts():
    rec = LeaseRecord("job-1", 5, 99, tables={1: {0: 3}, 2: {0: 4}}, holders={1: "q-a", 2: "q-b"})
    header, _ = rec.encode_all(generation=1)
    assert LeaseRecord.decode_header(header)["v"] == LeaseRecord.TABLES_ONLY_VERSION
    back = LeaseRecord.decode(header)
    assert back == rec and back.holders == {1: "q-a", 2: "q-b"}
    rng = random.Random(1)
    big = LeaseRecord("big", 1, 2, tables={7: {b: rng.randrange(10 ** 9) for b in range(5000)}},
                      holders={7: "q"})
    header, children = big.encode_all(generation=2)
    assert children and LeaseRecord.decode(header, parts=children).holders == {7: "q"}


def test_v3_records_the_owner_and_a_v2_header_decodes_without_one():
    rec = LeaseRecord("job-2", 5, 99, tables={1: {0: 3}}, holders={1: "q"}, owner="alice")
    header, _ = rec.encode_all(generation=1)
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


def children_of(store, lease_id):
    return sorted(store.zk.get_children(layout.lease_path(lease_id)))


def random_pins(n, spread, seed=0, base=100_000):
    rng = random.Random(seed)
    return {b: base + rng.randrange(spread) for b in range(n)}


def test_store_switches_between_inline_and_parts_and_removes_old_parts(store, monkeypatch):
    monkeypatch.setattr(lease_codec, "LEASE_PART_BUCKETS", 4096)
    small = LeaseRecord("l", 1, 2, {1: {0: 1}})
    store.save_lease(small)
    assert store.load_lease("l") == small and children_of(store, "l") == []
    big = LeaseRecord("l", 1, 3, {1: random_pins(20_000, 10 ** 6)})
    store.save_lease(big)
    assert children_of(store, "l") == [lease_codec.lease_part_name(1, k, 2) for k in range(5)]
    assert store.load_lease("l") == big
    bigger = LeaseRecord("l", 1, 4, {1: random_pins(20_000, 10 ** 6, seed=1)})
    store.save_lease(bigger)
    assert children_of(store, "l") == [lease_codec.lease_part_name(1, k, 3) for k in range(5)]
    assert store.load_lease("l") == bigger
    store.save_lease(small)
    assert children_of(store, "l") == []
    assert store.load_lease("l") == small


def test_a_one_bucket_change_rewrites_one_part_only(store, zk_address, monkeypatch):
    monkeypatch.setattr(lease_codec, "LEASE_PART_BUCKETS", 4096)
    pins = random_pins(20_000, 10 ** 6)
    rec = LeaseRecord("l", 1, 2, {1: pins, 2: {0: 5}})
    store.save_lease(rec)
    before = {n: store.zk.get(f"{layout.lease_path('l')}/{n}")[1].mzxid
              for n in children_of(store, "l")}
    moved = dict(pins)
    moved[9000] = 7
    changed = LeaseRecord("l", 1, 3, {1: moved, 2: {0: 5}})
    store.save_lease(changed, changed={1: {9000}})
    after = children_of(store, "l")
    new = [n for n in after if n not in before]
    assert new == [lease_codec.lease_part_name(1, 2, 2)]       # bucket 9000 is in part 2
    assert len(after) == len(before)
    for name in after:
        if name in before:      # untouched parts were not written again
            assert store.zk.get(f"{layout.lease_path('l')}/{name}")[1].mzxid == before[name]
    other = MetadataStore(zk_address).start()
    try:
        assert other.load_lease("l") == changed
    finally:
        other.close()


def test_a_write_after_someone_else_changed_the_lease_reads_it_again(store, zk_address):
    store.save_lease(LeaseRecord("l", 1, 2, {1: random_pins(3000, 10 ** 7)}))
    other = MetadataStore(zk_address).start()
    try:
        theirs = LeaseRecord("l", 1, 3, {1: random_pins(3000, 10 ** 7, seed=9)})
        other.save_lease(theirs)
        # This store's view is stale; its header version check fails and it starts over.
        mine = LeaseRecord("l", 1, 4, {1: {**theirs.tables[1], 5: 1}})
        store.save_lease(mine, changed={1: {5}})
        assert other.load_lease("l") == mine
    finally:
        other.close()


def test_orphan_parts_of_an_interrupted_write_are_ignored_then_deleted(store):
    rec = LeaseRecord("l", 1, 2, {1: {0: 1}})
    store.save_lease(rec)
    # A writer died after creating a newer generation's part but before switching the header.
    store.zk.create(layout.lease_path("l") + "/" + lease_codec.lease_part_name(1, 0, 2),
                    b"garbage")
    assert store.load_lease("l") == rec
    rec2 = LeaseRecord("l", 1, 5, {1: random_pins(5000, 10 ** 8)})
    store.save_lease(rec2)
    assert store.load_lease("l") == rec2
    assert children_of(store, "l") == [lease_codec.lease_part_name(1, 0, 3)]


def test_a_first_write_that_never_finished_is_discarded_on_load(store):
    store.zk.create(layout.lease_path("half"), packb({
        "v": 1, "lease_id": "half", "created_ms": 1, "expires_at_ms": 2, "state": "writing",
        "pins": None, "generation": 0, "chunks": 0}))
    store.save_lease(LeaseRecord("ok", 1, 2, {}))
    assert [r.lease_id for r in store.load_leases()] == ["ok"]
    assert store.lease_ids() == ["ok"]


def test_a_v3_chunked_lease_in_zookeeper_loads_and_its_next_write_is_v4(store):
    # A v3 writer's lease: the entries' msgpack list cut into chunk-<generation>-<i> znodes.
    entries = [{"t": 4, "e": "dense", "s": [7] * 3000 + [-1, 9]},
               {"t": 5, "e": "packed", "base": 10, "w": 2, "d": b"\x00\x00\x01\x00\x03\x00"}]
    payload = packb(entries)
    path = layout.lease_path("old")
    store.zk.create(path, packb({
        "v": 3, "lease_id": "old", "created_ms": 1, "expires_at_ms": 2 ** 50, "state": "ok",
        "holders": {4: "q"}, "owner": "alice", "pins": None, "generation": 6, "chunks": 3,
        "payload_bytes": len(payload), "payload_crc": zlib.crc32(payload)}))
    third = len(payload) // 3 + 1
    for i in range(3):
        store.zk.create(f"{path}/{lease_codec.lease_chunk_name(6, i)}",
                        payload[i * third:(i + 1) * third])
    expected = LeaseRecord("old", 1, 2 ** 50, {4: {**{b: 7 for b in range(3000)}, 3001: 9},
                                               5: {1: 10, 2: 12}}, holders={4: "q"},
                           owner="alice")
    assert store.load_lease("old") == expected
    renewed = LeaseRecord("old", 1, 2 ** 51, expected.tables, expected.holders, "alice")
    store.save_lease(renewed, changed={})
    assert LeaseRecord.decode_header(store.zk.get(path)[0])["v"] == 4
    assert children_of(store, "old") == []          # the v3 chunks went with the switch
    assert store.load_lease("old") == renewed


@pytest.mark.parametrize("shape", ["window 3000", "ids follow buckets over 100k"])
def test_a_lease_of_one_million_buckets_stores_and_reloads_in_1_5_bytes_each(store, shape):
    if shape == "window 3000":
        pins = random_pins(1_000_000, 3000)
    else:
        pins = {b: 1000 + (b * 7919) % 100_000 for b in range(1_000_000)}
    rec = LeaseRecord("million", 1, 2, {1: pins})
    t0 = time.monotonic()
    written = store.save_lease(rec)
    loaded = MetadataStore(store.address).start()
    try:
        back = loaded.load_lease("million")
    finally:
        loaded.close()
    elapsed = time.monotonic() - t0
    assert back.pin_count() == 1_000_000 and back.tables == {1: pins}
    assert written == store.lease_stored_bytes("million")
    assert written <= 1_500_000
    assert elapsed < 60


def test_parts_of_a_big_table_are_looked_up_with_holes_and_any_id(monkeypatch):
    from fluss_spark.metadata.lease_codec import table_parts
    monkeypatch.setattr(lease_codec, "LEASE_PART_BUCKETS", 100)
    pins = {b: b * 3 for b in range(5000) if b % 7}
    pins[250] = -(2 ** 63)         # the lookup's own "absent" marker, as a real id
    del pins[251]
    looked_up = table_parts(pins, {2})
    walked = table_parts(dict(list(pins.items())[:50]) | {b: pins[b] for b in range(200, 300)
                                                         if b in pins}, {2})
    for got in (looked_up, walked):
        buckets, snaps = got[2]
        assert list(map(int, buckets)) == [b for b in range(200, 300) if b in pins]
        assert list(map(int, snaps)) == [pins[b] for b in range(200, 300) if b in pins]
