"""No import circles among profiler/ and dashboards/: module-level imports (those under
``TYPE_CHECKING`` included) form no cycle."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("profiler", "dashboards")


def modules(root: Path) -> dict[str, Path]:
    out = {}
    for base in PACKAGES:
        for f in (root / base).rglob("*.py"):
            rel = f.relative_to(root).with_suffix("")
            out[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = f
    return out


def _targets(node: ast.Import | ast.ImportFrom, mods: dict[str, Path]) -> set[str]:
    """The project modules one import statement loads (``from pkg import submodule``: the submodule only)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
        names = subs if len(subs) == len(node.names) else [base, *subs]
    found = set()
    for name in names:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        if name:
            found.add(name)
    return found


def _module_level(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """Import statements run when the module is loaded (in if/try blocks too, not in functions or classes)."""
    out: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, (ast.If, ast.Try)):
            for block in (node.body, node.orelse, getattr(node, "finalbody", [])):
                out += _module_level(block)
            for handler in getattr(node, "handlers", []):
                out += _module_level(handler.body)
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    mods = modules(root)
    graph = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        absolute = [n for n in _module_level(tree.body) if not getattr(n, "level", 0)]
        graph[name] = {t for n in absolute for t in _targets(n, mods)} - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each cycle found by a depth-first walk, as the path that closes it."""
    found, done = [], set()

    def walk(node: str, path: list[str]) -> None:
        if node in path:
            found.append([*path[path.index(node) :], node])
            return
        if node in done:
            return
        for nxt in sorted(graph[node]):
            walk(nxt, [*path, node])
        done.add(node)

    for start in sorted(graph):
        walk(start, [])
    return found


def test_no_import_cycles():
    graph = import_graph(ROOT)
    assert len(graph) > 50 and "profiler.trace.loader" in graph["profiler.analysis.hostsync"]
    assert cycles(graph) == []


def test_a_cycle_is_found(tmp_path: Path):
    pkg = tmp_path / "profiler"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from profiler.b import B\n")
    (pkg / "b.py").write_text("from profiler import a\n\n\ndef f():\n    from profiler import c\n")
    (pkg / "c.py").write_text("import profiler.b\n")
    (tmp_path / "dashboards").mkdir()
    assert cycles(import_graph(tmp_path)) == [["profiler.a", "profiler.b", "profiler.a"]]
