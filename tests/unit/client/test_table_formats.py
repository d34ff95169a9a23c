"""Tables stored in a format the readers cannot decode are refused by name, in one line."""

import pyarrow as pa
import pytest

from fluss_spark.client.cluster import TableInfo
from fluss_spark.client.table_formats import check_readable
from fluss_spark.errors import UnsupportedVersion

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])


def _info(pk: tuple[str, ...] = ("id",), **properties: str) -> TableInfo:
    return TableInfo(table_id=1, name="db.t", schema=SCHEMA, primary_key=pk, num_buckets=1,
                     properties=properties)


def test_the_default_formats_and_their_spelled_out_names_are_read():
    check_readable(_info(), reads_kv=True)
    check_readable(_info(**{"table.log.format": "ARROW", "table.kv.format": "compacted"}),
                   reads_kv=True)


@pytest.mark.parametrize("key, value, reads_kv", [
    ("table.kv.format", "indexed", True),
    ("table.log.format", "indexed", False),
    ("table.log.format", "compacted", True),
])
def test_other_formats_are_refused_naming_table_option_and_value(key, value, reads_kv):
    with pytest.raises(UnsupportedVersion) as info:
        check_readable(_info(**{key: value}), reads_kv=reads_kv)
    message = str(info.value)
    assert "\n" not in message
    assert f"'db.t' has {key}='{value}'" in message and f"without {key}" in message


def test_kv_format_matters_only_when_kv_rows_are_read():
    check_readable(_info(**{"table.kv.format": "indexed"}), reads_kv=False)
    check_readable(_info(pk=(), **{"table.kv.format": "indexed"}), reads_kv=True)
