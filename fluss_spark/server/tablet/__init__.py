"""The tablet server: per-bucket changelog, KV state, KV snapshots, scan sessions, log fetch."""
