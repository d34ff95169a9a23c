"""Root pytest configuration: make the package importable from a source checkout."""
