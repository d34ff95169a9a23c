"""LeaseRecord v5: partitions' pins in parts of their own, beside v4 bytes that still decode."""

import random

import pytest

from fluss_spark.errors import CorruptMessage
from fluss_spark.metadata import layout, lease_codec
from fluss_spark.metadata.layout import LeaseRecord
from fluss_spark.metadata.lease_codec import decode_lease_groups, encode_lease_pins
from fluss_spark.metadata.store import MetadataStore

#: A v4 header written before partition pins existed: table 3, buckets 0 and 1 -> 7 and 8,
#: inline, holder "q", owner "User:a" (LeaseRecord("old-4", 5, 99, ...).encode_all(2)).
V4_HEADER = bytes.fromhex(
    "8aa17604a86c656173655f6964a56f6c642d34aa637265617465645f6d7305ad657870697265735f61745f6d"
    "7363a57374617465a26f6ba7686f6c646572738103a171a56f776e6572a6557365723a61aa67656e6572617469"
    "6f6e02a5706172747391c41784a17403a165a6737061727365a162920001a173920708a47265667390")


@pytest.fixture
def store(zk_address):
    s = MetadataStore(zk_address).start()
    yield s
    s.close()


def test_v4_bytes_still_decode_and_a_lease_without_partitions_stays_v4():
    rec = LeaseRecord.decode(V4_HEADER)
    assert rec == LeaseRecord("old-4", 5, 99, tables={3: {0: 7, 1: 8}}, holders={3: "q"},
                              owner="User:a")
    assert rec.partitions == {}
    assert LeaseRecord.decode_header(rec.encode_all(generation=2)[0]) == \
        LeaseRecord.decode_header(V4_HEADER)


def test_partition_pins_round_trip_inline_as_v5_beside_table_pins():
    rec = LeaseRecord("p", 1, 2, tables={3: {0: 7}}, holders={3: "q", 4: "q"},
                      partitions={4: {10: {0: 5, 1: 6}, 11: {0: 9}}})
    header, children = rec.encode_all(generation=1)
    assert LeaseRecord.decode_header(header)["v"] == 5 and children == {}
    assert LeaseRecord.decode(header) == rec
    assert rec.pin_count() == 4 and rec.pinned_table_ids() == {3, 4}
    entries = encode_lease_pins(rec.tables, rec.partitions)
    assert [(e["t"], e.get("p")) for e in entries] == [(3, None), (4, 10), (4, 11)]
    assert decode_lease_groups(entries) == (rec.tables, rec.partitions)
    with pytest.raises(CorruptMessage, match="partition entries"):
        lease_codec.decode_lease_pins(entries)


def test_part_names_and_refs_of_partitions():
    name = lease_codec.lease_part_name(7, 2, 4, partition=12)
    assert name == "part-7-p12-2-4"
    assert lease_codec.parse_lease_part_name(name) == (7, 2, 4, 12)
    assert lease_codec.parse_lease_part_name("part-7-2-4") == (7, 2, 4, lease_codec.NO_PARTITION)
    ref = lease_codec.lease_ref((7, 12, 2), 4, b"xyz")
    assert len(ref) == 6 and lease_codec.ref_part_name(ref) == name
    assert lease_codec.ref_part_name(lease_codec.lease_ref((7, -1, 2), 4, b"x")) == "part-7-2-4"


def test_a_million_partition_pins_stay_within_1_5_bytes_each():
    rng = random.Random(3)
    partitions = {1: {p: {b: 5000 + rng.randrange(300) for b in range(10_000)}
                      for p in range(100)}}
    header, children = LeaseRecord("m", 1, 2, partitions=partitions).encode_all(generation=1)
    size = len(header) + sum(len(c) for c in children.values())
    assert size <= 1.5 * 1_000_000
    assert LeaseRecord.decode(header, parts=children).partitions == partitions


def test_store_writes_only_the_changed_partitions_part(store, monkeypatch):
    monkeypatch.setattr(lease_codec, "LEASE_INLINE_BYTES", 0)     # every part a child znode
    parts = {5: {b: 100 + b for b in range(50)}, 6: {b: 200 + b for b in range(50)}}
    rec = LeaseRecord("l", 1, 2, tables={1: {0: 3}}, partitions={2: parts})
    store.save_lease(rec)
    path = layout.lease_path("l")
    assert sorted(store.zk.get_children(path)) == ["part-1-0-1", "part-2-p5-0-1",
                                                   "part-2-p6-0-1"]
    moved = LeaseRecord("l", 1, 3, tables={1: {0: 3}},
                        partitions={2: {5: parts[5], 6: {**parts[6], 0: 999}}})
    store.save_lease(moved, changed={(2, 6): [0]})
    assert sorted(store.zk.get_children(path)) == ["part-1-0-1", "part-2-p5-0-1",
                                                   "part-2-p6-0-2"]
    # Dropping a partition removes its part; the record reloads from ZooKeeper as written.
    dropped = LeaseRecord("l", 1, 3, tables={1: {0: 3}}, partitions={2: {5: parts[5]}})
    store.save_lease(dropped, changed={(2, 6): None})
    assert sorted(store.zk.get_children(path)) == ["part-1-0-1", "part-2-p5-0-1"]
    fresh = MetadataStore(store.address).start()
    try:
        assert fresh.load_lease("l") == dropped
    finally:
        fresh.close()
