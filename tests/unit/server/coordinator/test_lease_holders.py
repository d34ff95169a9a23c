"""LeaseManager holders: who pinned each table, refusals, persistence and forgetting."""

import pytest

from fluss_spark.errors import InvalidRequest, LeaseHeldByOther

HOUR = 3_600_000


def test_another_holder_is_refused_as_a_whole_and_nothing_is_written(h):
    h.snapshot(1, 0, 1)
    h.snapshot(2, 0, 1)
    h.leases.acquire("job", HOUR, {1: {0: 1}}, holder="q-a")
    stored = h.store.load_lease("job")
    with pytest.raises(LeaseHeldByOther, match="fluss-spark lease drop job"):
        h.leases.acquire("job", 2 * HOUR, {2: {0: 1}, 1: {0: 1}}, holder="q-b")
    assert h.store.load_lease("job") == stored
    assert h.leases.describe("job") == stored
    assert not h.leases.is_pinned(2, 0, 1)


def test_the_same_holder_and_holderless_callers_are_granted_and_keep_the_holder(h):
    h.snapshot(1, 0, 1)
    h.snapshot(1, 0, 2)
    h.leases.acquire("job", HOUR, {1: {0: 1}}, holder="q-a")
    h.leases.acquire("job", HOUR, {1: {0: 2}}, holder="q-a")      # a restart moves its pin
    h.leases.acquire("job", HOUR, {1: {0: 1}})                    # an operator, no holder
    rec = h.store.load_lease("job")
    assert (rec.tables, rec.holders) == ({1: {0: 1}}, {1: "q-a"})


def test_release_table_drop_and_expiry_forget_the_holder(h):
    for t in (1, 2):
        h.snapshot(t, 0, 1)
        h.snapshot(t, 1, 1)
    h.leases.acquire("job", HOUR, {1: {0: 1, 1: 1}, 2: {0: 1}}, holder="q-a")
    h.leases.release("job", {1: [0]})
    assert h.store.load_lease("job").holders == {1: "q-a", 2: "q-a"}   # table 1 has a pin left
    h.leases.release("job", {1: [1]})
    assert h.store.load_lease("job").holders == {2: "q-a"}
    h.leases.acquire("job", HOUR, {1: {0: 1}}, holder="q-b")           # free again: claimed
    h.leases.drop_table_pins(2)
    assert h.store.load_lease("job").holders == {1: "q-b"}
    h.clock.advance(HOUR + 1)
    h.leases.expire_once()
    h.leases.acquire("job", HOUR, {1: {0: 1}}, holder="q-c")
    assert h.leases.describe("job").holders == {1: "q-c"}


def test_holders_survive_a_coordinator_restart(h):
    h.snapshot(1, 0, 1)
    h.leases.acquire("job", HOUR, {1: {0: 1}}, holder="q-a")
    h.leases.renew("job", HOUR)
    h.restart()
    assert h.leases.describe("job").holders == {1: "q-a"}
    with pytest.raises(LeaseHeldByOther):
        h.leases.acquire("job", HOUR, {1: {0: 1}}, holder="q-b")


@pytest.mark.parametrize("holder", ["", "a b", "x" * 129, "../etc", 7])
def test_a_bad_holder_is_an_invalid_request(h, holder):
    h.snapshot(1, 0, 1)
    with pytest.raises(InvalidRequest):
        h.leases.acquire("job", HOUR, {1: {0: 1}}, holder=holder)
    assert h.store.lease_ids() == []
