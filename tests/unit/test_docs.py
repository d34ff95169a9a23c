"""The docs name modules and options that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fluss_spark import config

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
#: A path of this project: under fluss_spark/, tests/, examples/ or bench/.
_PATH = re.compile(r"\b((?:fluss_spark|tests|examples|bench)/[A-Za-z0-9_/.-]+\.py)\b")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_module_a_doc_names_exists(doc):
    # docs/servers.md named fluss_spark/server/rpc.py long after it moved to transport/.
    missing = sorted({p for p in _PATH.findall(doc.read_text()) if not (ROOT / p).exists()})
    assert not missing, f"{doc.name} names files that do not exist: {missing}"


def test_the_server_option_table_lists_every_server_option():
    text = (ROOT / "docs" / "servers.md").read_text()
    rows = {m.group(1) for m in re.finditer(r"^\| `([a-z0-9.-]+)` \|", text, re.MULTILINE)}
    missing = sorted(o.key for o in config.SERVER_OPTIONS if o.key not in rows)
    assert not missing, f"docs/servers.md does not document the server options {missing}"
    declared = {o.key for o in config.SERVER_OPTIONS}
    unknown = sorted(rows - declared)
    assert not unknown, f"docs/servers.md documents options that do not exist: {unknown}"
