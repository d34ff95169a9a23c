"""Rooms stay small: no module of fluss_spark over 600 lines, no class over 400."""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2] / "fluss_spark"
MAX_FILE_LINES = 600
MAX_CLASS_LINES = 400


def test_no_module_or_class_outgrows_its_room():
    too_big = []
    for path in sorted(SOURCE.rglob("*.py")):
        text = path.read_text()
        name = path.relative_to(SOURCE.parent)
        if (lines := len(text.splitlines())) > MAX_FILE_LINES:
            too_big.append(f"{name}: {lines} lines (at most {MAX_FILE_LINES})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                size = node.end_lineno - node.lineno + 1
                if size > MAX_CLASS_LINES:
                    too_big.append(f"{name}: class {node.name} is {size} lines "
                                   f"(at most {MAX_CLASS_LINES})")
    assert not too_big, "split these along their seams:\n" + "\n".join(too_big)
