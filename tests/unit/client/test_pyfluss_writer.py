"""Fluss's writer options as pyfluss takes them
(``fluss_spark/client/apache_fluss/pyfluss_writer.py``); the writes themselves run against a real
cluster in tests/spark/test_sink_apache_fluss.py."""

from __future__ import annotations

import fluss
import pytest

from fluss_spark.client.apache_fluss.pyfluss_writer import pyfluss_config
from fluss_spark.errors import ConfigError


def test_fluss_writer_names_become_pyfluss_properties_it_accepts():
    props = pyfluss_config("h:1", {"client.writer.batch-size": "1mb",
                                   "client.writer.batch-timeout": "5ms",
                                   "client.writer.retries": "3"}, ("alice", "pw"))
    assert props == {"bootstrap.servers": "h:1", "writer.batch-size": str(1 << 20),
                     "writer.batch-timeout-ms": "5", "writer.acks": "all",
                     "writer.retries": "3", "writer.enable-idempotence": "true",
                     "security.protocol": "SASL", "security.sasl.mechanism": "PLAIN",
                     "security.sasl.username": "alice", "security.sasl.password": "pw"}
    config = fluss.Config(props)          # pyfluss refuses names it does not know
    assert config.writer_batch_size == 1 << 20 and config.writer_batch_timeout_ms == 5


def test_idempotence_follows_fluss_defaults():
    assert pyfluss_config("h:1", {"client.writer.acks": "1"}, None)[
        "writer.enable-idempotence"] == "false"
    assert pyfluss_config("h:1", {"client.writer.retries": 0}, None)[
        "writer.enable-idempotence"] == "false"
    # Partition creation is the writer's own (pyfluss has no such property).
    assert not any("partition" in k for k in pyfluss_config(
        "h:1", {"client.writer.dynamic-create-partition.enabled": "true"}, None))
    with pytest.raises(ConfigError, match="unknown client writer option 'client.writer.lingr'"):
        pyfluss_config("h:1", {"client.writer.lingr": "1"}, None)
