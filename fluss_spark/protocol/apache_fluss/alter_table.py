"""ALTER_TABLE (API 1044) of Apache Fluss, as far as this client sends it: columns to add."""

from __future__ import annotations

import json

import pyarrow as pa

from fluss_spark.protocol.apache_fluss.api import FlussApiKey
from fluss_spark.protocol.apache_fluss.messages import EmptyResponse, FlussRequest, PbTablePath
from fluss_spark.protocol.apache_fluss.proto import (BOOL, BYTES, INT32, MESSAGE, STRING,
                                                     ProtoMessage, message, pb)
from fluss_spark.protocol.apache_fluss.table_json import fluss_type

#: ``column_position_type`` of an added column: at the end (the only one Fluss 0.9.1 takes).
POSITION_LAST = 0


@message
class PbAddColumn(ProtoMessage):
    """One column to add: its name, Fluss data-type JSON and position."""

    column_name: str = pb(1, STRING, required=True)
    data_type_json: bytes = pb(2, BYTES, required=True)
    comment: str | None = pb(3, STRING)
    column_position_type: int = pb(4, INT32, required=True)


@message
class AlterTableRequest(FlussRequest[EmptyResponse]):
    """Change a table: here, append columns (fields 3, 5-7, other changes, are not sent)."""

    API_KEY = FlussApiKey.ALTER_TABLE
    RESPONSE = EmptyResponse
    table_path: PbTablePath = pb(1, MESSAGE, required=True, message=PbTablePath)
    ignore_if_not_exists: bool = pb(2, BOOL, required=True)
    add_columns: list[PbAddColumn] = pb(4, MESSAGE, repeated=True, message=PbAddColumn)


def add_columns_request(path: PbTablePath, columns: pa.Schema) -> AlterTableRequest:
    """The ALTER_TABLE request that appends ``columns`` to the table at ``path``."""
    return AlterTableRequest(table_path=path, ignore_if_not_exists=False, add_columns=[
        PbAddColumn(column_name=f.name, column_position_type=POSITION_LAST,
                    data_type_json=json.dumps(fluss_type(f.type, f.nullable)).encode())
        for f in columns])


__all__ = ["AlterTableRequest", "PbAddColumn", "add_columns_request"]
