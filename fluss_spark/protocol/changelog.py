"""The changelog's own columns and change types, as every layer names them."""

from __future__ import annotations

import pyarrow as pa

#: Columns a changelog record carries after the table's columns, in this order.
CHANGE_TYPE, LOG_OFFSET, COMMIT_TIMESTAMP = "_change_type", "_log_offset", "_commit_timestamp"
CHANGELOG_FIELDS = (
    pa.field(CHANGE_TYPE, pa.string()),
    pa.field(LOG_OFFSET, pa.int64()),
    pa.field(COMMIT_TIMESTAMP, pa.timestamp("ms", tz="UTC")),
)

#: Change types: append (log tables), insert, update before, update after, delete.
APPEND, INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = "+A", "+I", "-U", "+U", "-D"
#: Change types that remove a row's current value.
RETRACTIONS = (UPDATE_BEFORE, DELETE)
