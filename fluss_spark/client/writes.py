"""Writing Arrow rows to a table: the interface both backends' writers implement."""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

import pyarrow as pa


@runtime_checkable
class RowWriter(Protocol):
    """Appends (log tables), upserts and deletes (PK tables) of one table's rows.

    ``data`` is an Arrow table whose columns are named as the table's (``delete``: at least the
    primary key). A call may return before the rows are acknowledged; ``flush`` returns once
    every row written before it is, or raises what went wrong.
    """

    def append(self, data: pa.Table) -> Any:
        """Append rows to a log table."""
        ...

    def upsert(self, data: pa.Table) -> Any:
        """Insert or replace rows of a primary-key table by key."""
        ...

    def delete(self, data: pa.Table) -> Any:
        """Delete rows of a primary-key table by key (a missing key writes nothing)."""
        ...

    def flush(self) -> None:
        """Wait until everything written so far is acknowledged."""
        ...

    def close(self) -> None:
        """Release the writer's connections; unflushed rows may be lost."""
        ...


@runtime_checkable
class TableWrites(Protocol):
    """A cluster that writes tables: both backends' clusters implement it (the Spark sink, the
    CLI's ``produce``)."""

    def table_writer(self, table: str, options: Mapping[str, Any] | None = None, *,
                     columns: Sequence[str] | None = None) -> RowWriter:
        """A writer of ``table`` (``TableNotExist`` when there is none) with client writer
        options (``fluss_spark.config.CLIENT_WRITER_OPTIONS``, by key). ``columns``: the
        columns its upserts give (the primary key among them), the others keeping their values
        (only where ``Capabilities.partial_updates``)."""
        ...


__all__ = ["RowWriter", "TableWrites"]
