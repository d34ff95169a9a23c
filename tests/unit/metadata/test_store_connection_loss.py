"""A lost ZooKeeper connection reaches callers as the retriable MetadataStoreUnavailable."""

import threading
import time

import pytest
from kazoo.exceptions import (ConnectionClosedError, ConnectionLoss, NoNodeError,
                              OperationTimeoutError, SessionExpiredError)
from kazoo.handlers.threading import KazooTimeoutError

from fluss_spark.errors import MetadataStoreUnavailable
from fluss_spark.metadata import lease_codec
from fluss_spark.testing.zookeeper_faults import ConnectionDies
from fluss_spark.metadata.layout import LeaseRecord
from fluss_spark.metadata.store import MetadataStore


class BrokenZk:
    """A kazoo client stand-in whose every call raises ``error``."""

    def __init__(self, error):
        self.error = error

    def __getattr__(self, name):
        def call(*args, **kwargs):
            raise self.error
        return call


@pytest.mark.parametrize("error", [ConnectionLoss(), SessionExpiredError(), OperationTimeoutError(),
                                   ConnectionClosedError(), KazooTimeoutError()])
def test_connection_errors_become_retriable(error):
    store = MetadataStore("127.0.0.1:1/chroot")
    store.zk = BrokenZk(error)
    with pytest.raises(MetadataStoreUnavailable) as err:
        store.save_lease(LeaseRecord("job-1", 1, 2, {1: {0: 3}}))
    assert err.value.retriable and err.value.code == 1005
    message = str(err.value)
    assert "zk 127.0.0.1:1/chroot" in message and "save_lease('job-1')" in message
    assert message.endswith("retry")
    with pytest.raises(MetadataStoreUnavailable):
        store.lease_ids()


def test_other_kazoo_errors_keep_their_handling():
    store = MetadataStore("127.0.0.1:1")
    store.zk = BrokenZk(NoNodeError())
    assert store.load_lease("job-1") is None   # a missing node is an answer, not an outage


def test_a_call_that_is_never_answered_gives_up_after_the_session_timeout():
    # kazoo queues a request made while it reconnects and, left alone, waits for it forever.
    store = MetadataStore("127.0.0.1:1/chroot", session_timeout_s=0.3)
    store.zk._call = lambda request, async_object: None   # queued, never answered
    outcome = {}

    def call():
        started = time.monotonic()
        try:
            store.lease_ids()
        except Exception as e:  # noqa: BLE001 - asserted below
            outcome["error"] = e
        outcome["seconds"] = time.monotonic() - started

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "the store call hung while ZooKeeper did not answer"
    assert isinstance(outcome["error"], MetadataStoreUnavailable)
    assert "KazooTimeoutError" in str(outcome["error"])
    assert 0.25 < outcome["seconds"] < 5


@pytest.fixture
def small_chunks(monkeypatch):
    """Parts of 16 buckets, each in a child znode, at most ~64 bytes per multi: a lease of 100
    pins is then several znodes written in several steps."""
    monkeypatch.setattr(lease_codec, "LEASE_PART_BUCKETS", 16)
    monkeypatch.setattr(lease_codec, "LEASE_INLINE_PART_BYTES", 0)
    monkeypatch.setattr(lease_codec, "LEASE_MULTI_BYTES", 64)


def chunked(expires_at_ms: int, offset: int) -> LeaseRecord:
    return LeaseRecord("big", 1, expires_at_ms, {1: {b: offset + 100_003 * b for b in range(100)}})


def test_the_small_chunks_fixture_makes_several_znodes(small_chunks):
    _, children = chunked(2, 0).encode_all(generation=1)
    assert len(children) == 7


def each_failure_point(zk_address, setup, write):
    """Run ``setup(store)``, then ``write(store)`` with the connection dying at the write's 1st,
    2nd, ... request until the write completes; yields (store, failed) after each attempt, in a
    fresh chroot each time, with the connection healed."""
    for n in range(1, 200):
        store = MetadataStore(f"{zk_address}-{n}").start()
        try:
            setup(store)
            dies = ConnectionDies(store.zk, n)
            try:
                write(store)
                failed = False
            except MetadataStoreUnavailable:
                failed = True
            finally:
                dies.heal()
            yield store, failed
        finally:
            store.close()
        if not failed:
            return
    raise AssertionError("the write never completed")


def test_a_chunked_lease_overwrite_cut_off_anywhere_leaves_the_old_or_the_new(zk_address,
                                                                              small_chunks):
    old, new = chunked(2, 0), chunked(3, 1000)
    outcomes = []
    for store, failed in each_failure_point(zk_address, lambda s: s.save_lease(old),
                                            lambda s: s.save_lease(new)):
        assert store.load_lease("big") in (old, new)
        outcomes.append(failed)
        store.save_lease(new)   # the retry converges
        assert store.load_lease("big") == new
    assert len(outcomes) > 3 and all(outcomes[:-1]) and not outcomes[-1]


def test_a_lease_delete_cut_off_anywhere_leaves_the_whole_lease_or_nothing(zk_address,
                                                                           small_chunks):
    rec = chunked(2, 0)
    for store, failed in each_failure_point(zk_address, lambda s: s.save_lease(rec),
                                            lambda s: s.delete_lease("big")):
        # Never a header whose chunks are gone: every stored lease still loads.
        assert store.load_lease("big") in (rec, None)
        assert [r.lease_id for r in store.load_leases()] in (["big"], [])
        store.delete_lease("big")   # the retry converges
        assert store.lease_ids() == []


def test_a_first_chunked_write_cut_off_anywhere_is_never_loaded_half_written(zk_address,
                                                                             small_chunks):
    rec = chunked(2, 0)
    for store, failed in each_failure_point(zk_address, lambda s: None,
                                            lambda s: s.save_lease(rec)):
        assert store.load_lease("big") in (rec, None)
        store.save_lease(rec)
        assert store.load_lease("big") == rec


def test_a_one_bucket_change_cut_off_anywhere_leaves_the_old_or_the_new(zk_address,
                                                                     small_chunks):
    # The incremental path: the store knows what it wrote and sends one part and the header.
    old = chunked(2, 0)
    pins = dict(old.tables[1])
    pins[40] = 7
    new = LeaseRecord("big", 1, 3, {1: pins})
    outcomes = []
    for store, failed in each_failure_point(zk_address, lambda s: s.save_lease(old),
                                            lambda s: s.save_lease(new, changed={1: {40}})):
        assert store.load_lease("big") in (old, new)
        outcomes.append(failed)
        store.save_lease(new, changed={1: {40}})   # the retry converges
        assert store.load_lease("big") == new
    assert outcomes[-1] is False and all(outcomes[:-1])
