"""The tests' own house rule: no test module imports another (shared code lives in tests/helpers/)."""

from __future__ import annotations

import ast

from tests.helpers.paths import ROOT


def _imported(path) -> set[str]:
    """Every module a file imports, at its top or inside a function."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_no_test_module_imports_another():
    tests = ROOT / "tests"
    found = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted(tests.rglob("test_*.py"))
        for name in sorted(_imported(path))
        if name.split(".")[0] == "tests" and name.split(".")[-1].startswith("test_")
    ]
    assert found == []
