"""The coordinator: tables, bucket assignment, KV snapshot registry and GC, lease manager."""
