"""The lease manager names the buckets each change touched; the store writes only their parts.

Random sequences of acquire, release, renew and table drops run against a real ZooKeeper with
tiny parts (so a lease spans many part znodes and inline parts); after every step a second
store reads the lease back and must find exactly the manager's pins.
"""

import random

import pytest

from fluss_spark.testing.clock import FakeClock
from fluss_spark.metadata import layout, lease_codec
from fluss_spark.metadata.store import MetadataStore
from fluss_spark.server.coordinator.leases import LeaseManager

HOUR = 3_600_000


@pytest.fixture
def small_parts(monkeypatch):
    monkeypatch.setattr(lease_codec, "LEASE_PART_BUCKETS", 8)
    monkeypatch.setattr(lease_codec, "LEASE_INLINE_PART_BYTES", 24)
    monkeypatch.setattr(lease_codec, "LEASE_INLINE_BYTES", 200)


@pytest.mark.parametrize("seed", range(4))
def test_random_changes_are_stored_exactly(zk_address, small_parts, seed):
    rng = random.Random(seed)
    store = MetadataStore(zk_address).start()
    reader = MetadataStore(zk_address).start()
    leases = LeaseManager(store, snapshot_exists=lambda t, b, s: True, clock=FakeClock())
    seen_inline = seen_children = 0
    try:
        for step in range(60):
            lease = rng.choice(["a", "b"])
            op = rng.random()
            if op < 0.55:
                tables = {t: {rng.randrange(60): rng.randrange(10 ** rng.randrange(1, 9))
                              for _ in range(rng.randrange(1, 20))}
                          for t in rng.sample(range(1, 5), rng.randrange(1, 3))}
                leases.acquire(lease, HOUR, tables)
            elif op < 0.8:
                leases.release(lease, {rng.randrange(1, 5): [rng.randrange(60)
                                                             for _ in range(rng.randrange(1, 9))]})
            elif op < 0.9:
                try:
                    leases.renew(lease, HOUR)
                except Exception:  # noqa: BLE001 - renewing a lease not there is refused
                    pass
            else:
                leases.drop_table_pins(rng.randrange(1, 5))
            for lease_id in ("a", "b"):
                held = leases._leases.get(lease_id)
                stored = reader.load_lease(lease_id)
                assert (stored.tables if stored else None) == (held.tables if held else None), \
                    f"step {step}: lease {lease_id}"
            names = store.zk.get_children(layout.LEASES)
            for lease_id in names:   # no orphan part znodes stay behind
                header = layout.LeaseRecord.decode_header(
                    store.zk.get(layout.lease_path(lease_id))[0])
                named = {lease_codec.lease_part_name(t, k, g) for t, k, g, _, _ in header["refs"]}
                assert set(store.zk.get_children(layout.lease_path(lease_id))) == named
                seen_inline = max(seen_inline, len(header["parts"]))
                seen_children = max(seen_children, len(named))
        assert seen_inline >= 2 and seen_children >= 2     # both places were exercised
    finally:
        store.close()
        reader.close()
