"""Partition keys, specs and names, as Fluss forms them."""

import datetime

import pytest

from fluss_spark.errors import ConfigError
from fluss_spark.protocol.partitions import (check_partition_keys, parse_spec, partition_name,
                                             resolve, spec_text, value_text, values_of)
from fluss_spark.protocol.types import parse_schema

SCHEMA = parse_schema("id BIGINT NOT NULL, dt STRING NOT NULL, region STRING, v DOUBLE")


def test_spec_text_parses_in_order_and_names_join_values_with_dollar():
    spec = parse_spec("region=eu, dt=2026-11-25")
    assert spec == {"region": "eu", "dt": "2026-11-25"}
    values = resolve("db.t", ["dt", "region"], spec)
    assert values == ("2026-11-25", "eu")
    assert partition_name(values) == "2026-11-25$eu"
    assert values_of("2026-11-25$eu") == values
    assert spec_text(["dt", "region"], values) == "dt=2026-11-25,region=eu"


@pytest.mark.parametrize("text, message", [
    ("dt", "expected key=value"), ("=x", "expected key=value"), ("dt=1,dt=2", "twice"),
])
def test_malformed_specs(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_spec(text)


@pytest.mark.parametrize("keys, spec, message", [
    ([], {"dt": "1"}, "db.t is not partitioned"),
    (["dt"], {"region": "eu"}, "does not match the partition keys of db.t"),
    (["dt", "region"], {"dt": "1"}, "does not match"),
    (["dt"], {"dt": "a/b"}, "invalid"),
    (["dt"], {"dt": ""}, "invalid"),
    (["dt"], {"dt": "__x"}, "not starting with '__'"),
    (["dt"], {"dt": "a$b"}, "invalid"),
])
def test_specs_that_do_not_fit_the_table(keys, spec, message):
    with pytest.raises(ConfigError, match=message):
        resolve("db.t", keys, spec)


def test_pk_table_partition_keys_must_be_in_the_primary_key():
    assert check_partition_keys("db.t", SCHEMA, ["id", "dt"], [], ["dt"]) == ["id"]
    assert check_partition_keys("db.t", SCHEMA, [], [], ["dt"]) == []
    assert check_partition_keys("db.t", SCHEMA, ["id"], [], []) == ["id"]
    with pytest.raises(ConfigError, match=r"partition key\(s\) dt must be part of the primary "
                                          r"key \(id\)"):
        check_partition_keys("db.t", SCHEMA, ["id"], [], ["dt"])
    with pytest.raises(ConfigError, match="besides the partition keys"):
        check_partition_keys("db.t", SCHEMA, ["dt"], [], ["dt"])
    with pytest.raises(ConfigError, match="'nope' is not a column"):
        check_partition_keys("db.t", SCHEMA, [], [], ["nope"])
    with pytest.raises(ConfigError, match="has type double"):
        check_partition_keys("db.t", SCHEMA, [], [], ["v"])
    with pytest.raises(ConfigError, match="twice"):
        check_partition_keys("db.t", SCHEMA, [], [], ["dt", "dt"])


def test_values_of_rows_print_as_fluss_prints_them():
    assert value_text(datetime.date(2026, 11, 25)) == "2026-11-25"
    assert [value_text(v) for v in ("eu", 7, True)] == ["eu", "7", "true"]
    with pytest.raises(ConfigError, match="holds null"):
        value_text(None)
