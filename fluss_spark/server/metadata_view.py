"""The GET_METADATA answer, built from ZooKeeper; served by coordinator and tablets alike."""

from __future__ import annotations

from fluss_spark.metadata.store import MetadataStore


def table_info(table, assignment) -> dict:
    return {
        "table_id": table.table_id, "name": table.name, "schema": table.schema,
        "primary_key": list(table.primary_key), "bucket_key": list(table.bucket_key),
        "num_buckets": table.num_buckets, "properties": dict(table.properties),
        "created_ms": table.created_ms,
        "assignment": {b: t for b, t in enumerate(assignment.buckets)} if assignment else {},
    }


def build_metadata(store: MetadataStore, names: list[str] | None) -> dict:
    """Coordinator address, live tablets, and the requested tables (all when ``names`` is None)."""
    from fluss_spark.errors import TableNotExist
    coord = store.active_coordinator()
    tables = []
    for name in (names if names is not None else store.table_names()):
        rec = store.table(name)
        if rec is None:
            if names is not None:
                raise TableNotExist(f"table {name} does not exist")
            continue
        tables.append(table_info(rec, store.assignment(name)))
    return {
        "coordinator": {"host": coord.host, "port": coord.port} if coord else None,
        "tablets": [{"id": t.id, "host": t.host, "port": t.port}
                    for t in store.tablets().values()],
        "tables": tables,
    }
