"""A cluster on one machine: local ZooKeeper and server processes, as the CLI and the tests run it."""
