"""Test support: fakes with the real interfaces' contracts, harnesses and process helpers."""
