"""Fixtures of the coordinator unit tests: a lease harness on a real ZooKeeper chroot."""

import pytest

from fluss_spark.testing.coordinator import LeaseHarness


@pytest.fixture
def h(zk_address, tmp_path):
    """Registry and lease manager wired as in the coordinator, with an injected clock."""
    harness = LeaseHarness(zk_address, tmp_path / "remote")
    yield harness
    harness.close()
