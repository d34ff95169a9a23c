"""The compiled decode of KV snapshots (native/src/lib.rs); see ``compiled``."""

from typing import Any

class Memory:
    """Read-only bytes (buffer protocol), kept for reuse when dropped (native/src/memory.rs)."""

    def __len__(self) -> int: ...
    def __buffer__(self, flags: int) -> memoryview: ...

class SstStream:
    """The live values of SST files, a page at a time (native/src/sst.rs)."""

    def __init__(self, files: list[Any], blocks: list[tuple[list[int], list[int]]],
                 entries: list[int], checksums: list[int], mapped: list[bool]) -> None: ...
    def page(self, max_rows: int, max_bytes: int, overhead: int, ahead: bool
             ) -> tuple[Memory, Memory, Memory]: ...
    def skip(self, n: int) -> int: ...
    @property
    def done(self) -> bool: ...

def decode_rows(data: Any, starts: Any, ends: Any, skip: int, schema_id: int, fields: int,
                layouts: list[int], wanted: list[bool], threads: int
                ) -> list[tuple[int, bytes | None, Memory, Memory]]: ...
