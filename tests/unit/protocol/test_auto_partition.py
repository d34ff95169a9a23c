"""Auto-partition properties and the partition values they give at a moment."""

import datetime

import pytest

from fluss_spark.errors import ConfigError
from fluss_spark.protocol.auto_partition import AutoPartition

#: 2026-11-25 23:30 UTC.
NOW = int(datetime.datetime(2026, 11, 25, 23, 30, tzinfo=datetime.timezone.utc).timestamp()
          * 1000)


def strategy(keys=("dt",), **props):
    base = {"table.auto-partition.enabled": "true"}
    base.update({f"table.auto-partition.{k.replace('_', '-')}": str(v) for k, v in props.items()})
    return AutoPartition.of("db.t", base, list(keys))


@pytest.mark.parametrize("unit, now, later, earlier", [
    ("HOUR", "2026112523", "2026112600", "2026112522"),
    ("DAY", "20261125", "20261126", "20261124"),
    ("MONTH", "202611", "202612", "202610"),
    ("QUARTER", "20264", "20271", "20263"),
    ("YEAR", "2026", "2027", "2025"),
])
def test_values_per_time_unit(unit, now, later, earlier):
    s = strategy(time_unit=unit)
    assert (s.value(NOW), s.value(NOW, 1), s.value(NOW, -1)) == (now, later, earlier)


def test_precreate_retention_and_time_zone():
    s = strategy(num_precreate=3, num_retention=2)
    assert s.wanted(NOW) == ["20261125", "20261126", "20261127"]
    assert [v for v in ("20261122", "20261123", "20261124", "hand-made")
            if s.expired(NOW, v)] == ["20261122"]
    assert strategy(time_zone="Asia/Tokyo").value(NOW) == "20261126"


@pytest.mark.parametrize("props, keys, message", [
    ({"time_unit": "WEEK"}, ("dt",), "not one of YEAR, QUARTER, MONTH, DAY, HOUR"),
    ({"num_precreate": "x"}, ("dt",), "expected an integer"),
    ({"num_retention": "-1"}, ("dt",), "at least 0"),
    ({"time_zone": "Mars/Base"}, ("dt",), "unknown time zone"),
    ({"key": "region"}, ("dt",), "'region' is not a partition key"),
    ({}, ("dt", "region"), "name the time key"),
    ({"key": "dt"}, ("dt", "region"), "only drops expired partitions; set "
                                      "table.auto-partition.num-precreate=0 \\(got 2\\)"),
    ({}, (), "needs partition keys"),
])
def test_malformed_properties_are_refused(props, keys, message):
    with pytest.raises(ConfigError, match=message):
        strategy(keys, **props)


def test_disabled_by_default():
    assert not AutoPartition.of("db.t", {}, ["dt"]).enabled
