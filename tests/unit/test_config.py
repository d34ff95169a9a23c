"""Option parsing: durations, sizes, unknown keys and bounds."""

import pytest

from fluss_spark.config import (parse_duration_ms, parse_server_options, parse_size_bytes,
                                validate_table_properties)
from fluss_spark.errors import ConfigError


@pytest.mark.parametrize("text, ms", [("500ms", 500), ("30s", 30_000), ("10min", 600_000),
                                      ("1h", 3_600_000), ("1d", 86_400_000), ("250", 250)])
def test_durations(text, ms):
    assert parse_duration_ms(text) == ms


def test_sizes():
    assert parse_size_bytes("10mb") == 10 * 1024 * 1024 and parse_size_bytes("64kb") == 65536


def test_bad_duration_names_the_key():
    with pytest.raises(ConfigError, match="kv.snapshot.interval"):
        validate_table_properties({"kv.snapshot.interval": "soon"})


def test_unknown_table_property_lists_known_ones():
    with pytest.raises(ConfigError, match="unknown table property 'kv.snapshot.intervall'"):
        validate_table_properties({"kv.snapshot.intervall": "1s"})


def test_server_options_defaults_and_minimums():
    opts = parse_server_options(["kv.scanner.ttl=2s"])
    assert opts["kv.scanner.ttl"] == 2000 and opts["kv.scanner.max-per-bucket"] == 8
    with pytest.raises(ConfigError, match="at least 1"):
        parse_server_options(["kv.scanner.max-per-server=0"])


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "99999999999999999999d", "3651d"])
def test_durations_are_bounded(value):
    with pytest.raises(ConfigError, match="not a number|longer than the maximum, 3650d"):
        parse_duration_ms(value, "kv.snapshot.interval")
