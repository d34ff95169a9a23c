"""Local processes: ZooKeeper and the servers of a cluster on one machine, as the CLI and the
tests run them (``EmbeddedProcesses``: this project's servers; ``ApacheFlussProcesses``: an Apache
Fluss release). They start and stop processes; clients reach the cluster through ``client``."""
