"""The local cluster a directory holds, of whichever engine started it."""

from __future__ import annotations

from pathlib import Path
from typing import Union

from fluss_spark.local import apache_fluss, embedded

#: A local cluster of either engine.
AnyLocalCluster = Union[embedded.EmbeddedProcesses, apache_fluss.ApacheFlussProcesses]


def load_local_cluster(directory: Path) -> AnyLocalCluster | None:
    """The cluster whose state file ``directory`` holds (None: no cluster there)."""
    if apache_fluss.read_state(directory) is not None:
        return apache_fluss.ApacheFlussProcesses.load(directory)
    if embedded.read_state(directory) is not None:
        return embedded.EmbeddedProcesses.load(directory)
    return None
