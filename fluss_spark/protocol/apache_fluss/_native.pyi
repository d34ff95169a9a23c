"""The compiled decode of KV snapshots (native/src/lib.rs); see ``compiled``."""

from typing import Any

class Memory:
    """Read-only bytes (buffer protocol), kept for reuse when dropped (native/src/memory.rs)."""

    def __len__(self) -> int: ...
    def __buffer__(self, flags: int) -> memoryview: ...

def sst_live_values(files: list[Any], blocks: list[tuple[list[int], list[int]]],
                    entries: list[int], checksums: list[int], max_bytes: int, threads: int
                    ) -> tuple[Memory, Memory, Memory]: ...

def decode_rows(data: Any, starts: Any, ends: Any, skip: int, schema_id: int, fields: int,
                layouts: list[int], wanted: list[bool], threads: int
                ) -> list[tuple[int, bytes | None, Memory, Memory]]: ...
