"""Process managers for a local ZooKeeper and a local cluster, reused by the CLI and the tests."""
