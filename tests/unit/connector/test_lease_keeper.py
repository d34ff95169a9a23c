"""LeaseKeeper: renews at a third of the duration, notices a lost lease."""

import time

from fluss_spark.connector.lease_keeper import LeaseKeeper


class Admin:
    """Records renewals; ``gone`` makes the lease unknown."""

    def __init__(self):
        self.renewed = []
        self.gone = False

    def renew_kv_snapshot_lease(self, lease_id, duration_ms):
        from fluss_spark.errors import LeaseNotFound
        if self.gone:
            raise LeaseNotFound(lease_id)
        self.renewed.append(lease_id)
        return 1


def test_renews_at_a_third_of_the_duration(clock):
    admin = Admin()
    k = LeaseKeeper(admin, "L", 30_000, clock=clock)
    assert not k.tick()
    clock.advance(9.9)
    assert not k.tick()
    clock.advance(0.2)
    assert k.tick() and admin.renewed == ["L"]
    assert not k.tick()
    clock.advance(10)
    assert k.tick() and k.renewals == 2


def test_lost_lease(clock):
    admin = Admin()
    admin.gone = True
    k = LeaseKeeper(admin, "L", 3_000, clock=clock)
    assert not k.tick(force=True)
    assert k.lost
    k.acquired()
    assert not k.lost


def test_thread_renews_and_stops():
    admin = Admin()
    k = LeaseKeeper(admin, "L", 300)  # renews every 100 ms
    k.start()
    deadline = time.time() + 5
    while len(admin.renewed) < 2 and time.time() < deadline:
        time.sleep(0.05)
    k.stop()
    assert len(admin.renewed) >= 2 and k.stopped
    n = len(admin.renewed)
    time.sleep(0.3)
    assert len(admin.renewed) == n
