"""Fakes for driving the connector without a cluster: an in-memory cluster and a clock."""

from __future__ import annotations

import pytest

from fluss_spark.testing.clock import FakeClock
from fluss_spark.testing.fake_cluster import FakeCluster


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def cluster(clock):
    return FakeCluster(clock)
