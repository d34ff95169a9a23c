"""Name rules shared by clients and servers, so a name one side accepts the other accepts too."""

from __future__ import annotations

import re

#: Lease ids (and lease holders) become znode names: 1 to 128 of these characters.
_LEASE_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")

LEASE_ID_RULE = "1 to 128 characters of letters, digits, '.', '_' and '-' (not '.' or '..')"


def is_valid_lease_id(value) -> bool:
    """Whether ``value`` may name a KV snapshot lease (or a lease holder)."""
    return (isinstance(value, str) and _LEASE_ID.fullmatch(value) is not None
            and value not in (".", ".."))
