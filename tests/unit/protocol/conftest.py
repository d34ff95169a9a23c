"""Fixtures of the protocol tests."""

from __future__ import annotations

import pytest

from fluss_spark.protocol.apache_fluss import compiled


@pytest.fixture(params=["compiled", "numpy"])
def both_decodes(request, monkeypatch):
    """Run a test with the compiled decode of KV snapshots, then with the numpy one."""
    monkeypatch.setattr(compiled, "enabled", request.param == "compiled")
    return request.param
