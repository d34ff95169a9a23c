"""Schema strings parse into Arrow schemas and print back; bad input gets a clear error."""

import pyarrow as pa
import pytest

from fluss_spark.errors import ConfigError
from fluss_spark.protocol.types import format_schema, parse_schema, validate_table_schema


def test_all_types_round_trip():
    text = ("a TINYINT, b SMALLINT, c INT, d BIGINT NOT NULL, e FLOAT, f DOUBLE, "
            "g DECIMAL(10, 2), h STRING, i BINARY, j BOOLEAN, k DATE, l TIMESTAMP, m TIMESTAMP_LTZ")
    schema = parse_schema(text)
    assert schema.field("d").type == pa.int64() and not schema.field("d").nullable
    assert schema.field("g").type == pa.decimal128(10, 2)
    assert schema.field("m").type == pa.timestamp("us", tz="UTC")
    assert parse_schema(format_schema(schema)) == schema


@pytest.mark.parametrize("text, message", [
    ("id BIGNUM", "unknown column type 'BIGNUM'"),
    ("id BIGINT, id STRING", "declared twice"),
    ("", "no columns"),
    ("x DECIMAL(50, 2)", "out of range"),
    ("just-a-word", "cannot parse column"),
    # Empty column definitions used to be skipped silently.
    ("id BIGINT,,", r"column 2 of 3 .* is empty"),
    ("id BIGINT,", r"column 2 of 2 .* is empty"),
    (", id BIGINT", r"column 1 of 2 .* is empty"),
    ("id BIGINT, , v STRING", r"column 2 of 3 .* is empty"),
    (" , ", "is empty"),
    ("x DECIMAL(10, 2", "unbalanced"),
    ("x DECIMAL)10, 2(", "unbalanced"),
])
def test_bad_schemas(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_schema(text)


def test_key_columns_must_exist_and_names_are_not_reserved():
    schema = parse_schema("id BIGINT, name STRING")
    with pytest.raises(ConfigError, match="primary key column 'nope'"):
        validate_table_schema(schema, ["nope"], [])
    with pytest.raises(ConfigError, match="reserved"):
        validate_table_schema(parse_schema("_change_type STRING"), [], [])
