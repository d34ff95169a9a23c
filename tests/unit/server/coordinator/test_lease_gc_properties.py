"""Property test: random snapshot/acquire/renew/release/drop/expire/restart sequences never
delete a pinned snapshot, and never leave an unpinned snapshot outside retention behind."""

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from fluss_spark.errors import LeaseNotFound
from fluss_spark.testing.coordinator import LeaseHarness

TABLES = (0, 1)          # table slots; dropping a table puts a new table id in its slot
BUCKETS = (0, 1)
RETAINED = {0: 2, 1: 1}  # per slot
LEASES = ("a", "b", "c")


def make_machine(zk_hosts: str, base_dir):
    class LeaseGcMachine(RuleBasedStateMachine):
        """The model: committed ids per bucket and each lease's pins and expiry."""

        def __init__(self):
            super().__init__()
            name = uuid.uuid4().hex[:10]
            self.h = LeaseHarness(f"{zk_hosts}/fluss-prop-{name}", base_dir / name)
            self.slots = {slot: slot + 1 for slot in TABLES}      # slot -> current table id
            self.h.retained.update({slot + 1: RETAINED[slot] for slot in TABLES})
            self.committed = {(t, b): [] for t in self.slots.values() for b in BUCKETS}
            self.dropped: set[int] = set()
            self.leases: dict[str, dict] = {}   # id -> {"expires": ms, "pins": {(t, b): s}}

        def teardown(self):
            self.h.close()

        # -- the model's view -----------------------------------------------------------------
        def pinned(self):
            return {(t, b, s) for lease in self.leases.values()
                    for (t, b), s in lease["pins"].items()}

        def expected_stored(self, t, b):
            if t in self.dropped:
                return set()
            ids = self.committed[(t, b)]
            keep = set(sorted(ids)[-self.h.retained[t]:])
            return keep | {s for (pt, pb, s) in self.pinned() if (pt, pb) == (t, b)}

        # -- rules ------------------------------------------------------------------------------
        @rule(t=st.sampled_from(TABLES), b=st.sampled_from(BUCKETS))
        def snapshot(self, t, b):
            t = self.slots[t]
            ids = self.committed[(t, b)]
            s = (ids[-1] + 1) if ids else 0
            self.h.snapshot(t, b, s)
            ids.append(s)

        @rule(lease=st.sampled_from(LEASES), duration=st.integers(1, 5000),
              picks=st.lists(st.tuples(st.sampled_from(TABLES), st.sampled_from(BUCKETS),
                                       st.integers(-1, 3)), min_size=1, max_size=4))
        def acquire(self, lease, duration, picks):
            # The id is picked relative to the bucket's newest: 0 = newest, 1 = the one before
            # (maybe already collected), ..., -1 = an id that was never committed.
            request: dict = {}
            for slot, b, back in picks:
                t = self.slots[slot]
                ids = self.committed[(t, b)]
                newest = ids[-1] if ids else -1
                request.setdefault(t, {})[b] = newest - back
            unavailable, expires = self.h.leases.acquire(lease, duration, request)
            state = self.leases.setdefault(lease, {"pins": {}})
            state["expires"] = self.h.clock() + duration
            expected_unavailable: dict = {}
            for t, pins in request.items():
                for b, s in pins.items():
                    if s in self.expected_stored(t, b):
                        state["pins"][(t, b)] = s
                    else:
                        expected_unavailable.setdefault(t, {})[b] = s
            assert unavailable == expected_unavailable
            assert expires == state["expires"]

        @rule(lease=st.sampled_from(LEASES), duration=st.integers(1, 5000))
        def renew(self, lease, duration):
            if lease in self.leases:
                assert self.h.leases.renew(lease, duration) == self.h.clock() + duration
                self.leases[lease]["expires"] = self.h.clock() + duration
            else:
                with pytest.raises(LeaseNotFound):
                    self.h.leases.renew(lease, duration)

        @rule(lease=st.sampled_from(LEASES),
              buckets=st.lists(st.tuples(st.sampled_from(TABLES), st.sampled_from(BUCKETS)),
                               max_size=4))
        def release(self, lease, buckets):
            request: dict = {}
            buckets = [(self.slots[slot], b) for slot, b in buckets]
            for t, b in buckets:
                request.setdefault(t, []).append(b)
            remaining = self.h.leases.release(lease, request)
            if lease not in self.leases:
                assert remaining == 0
                return
            pins = self.leases[lease]["pins"]
            removed = [pins.pop((t, b)) for t, b in set(buckets) if (t, b) in pins]
            assert remaining == len(pins)
            if removed and not pins:
                del self.leases[lease]      # a release that leaves no pins removes the lease

        @rule(lease=st.sampled_from(LEASES))
        def drop(self, lease):
            assert self.h.leases.drop(lease) == (lease in self.leases)
            self.leases.pop(lease, None)

        @rule(ms=st.integers(0, 3000))
        def advance_and_expire(self, ms):
            self.h.clock.advance(ms)
            self.h.leases.expire_once()
            now = self.h.clock()
            for lease in [i for i, s in self.leases.items() if s["expires"] <= now]:
                del self.leases[lease]

        @rule()
        def restart(self):
            self.h.restart()

        @rule(t=st.sampled_from(TABLES))
        def drop_table(self, t):
            slot, t = t, self.slots[t]
            self.h.leases.drop_table_pins(t)
            self.h.registry.drop_table(t)
            self.dropped.add(t)
            new_id = max(self.committed)[0] + 1
            self.slots[slot] = new_id
            self.h.retained[new_id] = RETAINED[slot]
            self.committed.update({(new_id, b): [] for b in BUCKETS})
            for lease in list(self.leases):
                pins = self.leases[lease]["pins"]
                had = any(pt == t for pt, _ in pins)
                for key in [k for k in pins if k[0] == t]:
                    del pins[key]
                if had and not pins:
                    del self.leases[lease]

        # -- invariants ---------------------------------------------------------------------------
        @invariant()
        def no_pinned_snapshot_is_deleted(self):
            for t, b, s in self.pinned():
                assert self.h.alive(t, b, s), f"pinned snapshot {(t, b, s)} was deleted"

        @invariant()
        def stored_is_exactly_retention_plus_pins(self):
            for t in {t for t, _ in self.committed}:
                for b in BUCKETS:
                    stored = set(self.h.stored_ids(t, b))
                    assert stored == self.expected_stored(t, b), (t, b)

        @invariant()
        def leases_agree_with_the_model(self):
            live = {r.lease_id: {(t, b): s for t, p in r.tables.items() for b, s in p.items()}
                    for r in self.h.leases.live()}
            assert live == {i: s["pins"] for i, s in self.leases.items()}

    return LeaseGcMachine


TABLE, BUCKET = st.sampled_from(TABLES), st.sampled_from(BUCKETS)
LEASE, DURATION = st.sampled_from(LEASES), st.integers(1, 10_000)
ARGUMENTS = {
    "snapshot": st.fixed_dictionaries({"t": TABLE, "b": BUCKET}),
    "acquire": st.fixed_dictionaries({
        "lease": LEASE, "duration": DURATION,
        "picks": st.lists(st.tuples(TABLE, BUCKET, st.integers(-1, 3)), min_size=1,
                          max_size=4)}),
    "renew": st.fixed_dictionaries({"lease": LEASE, "duration": DURATION}),
    "release": st.fixed_dictionaries({"lease": LEASE,
                                      "buckets": st.lists(st.tuples(TABLE, BUCKET), max_size=4)}),
    "drop": st.fixed_dictionaries({"lease": LEASE}),
    "advance_and_expire": st.fixed_dictionaries({"ms": st.integers(0, 2000)}),
    "restart": st.just({}),
    "drop_table": st.fixed_dictionaries({"t": TABLE}),
}
# Snapshots and acquires are listed several times: the interesting interleavings need many.
NAMES = ["snapshot"] * 4 + ["acquire"] * 3 + ["renew", "release", "release", "drop",
                                              "advance_and_expire", "restart", "drop_table"]
OPERATIONS = st.sampled_from(NAMES).flatmap(lambda n: st.tuples(st.just(n), ARGUMENTS[n]))


def test_random_lease_and_snapshot_sequences_keep_the_gc_invariants(zookeeper, tmp_path):
    """Random operation sequences; the invariants are checked after every step."""
    machine_class = make_machine(zookeeper.address, tmp_path)
    invariants = [machine_class.no_pinned_snapshot_is_deleted,
                  machine_class.stored_is_exactly_retention_plus_pins,
                  machine_class.leases_agree_with_the_model]

    @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(OPERATIONS, min_size=20, max_size=50))
    def run(operations):
        machine = machine_class()
        try:
            for name, args in operations:
                getattr(machine, name)(**args)
                for check in invariants:
                    check(machine)
        finally:
            machine.teardown()

    run()
