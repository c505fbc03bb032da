"""No import circles among profiler/ and dashboards/: module-level imports (those under
``TYPE_CHECKING`` included) form no cycle; and data flows one way: every package stands on a floor
(``FLOORS``) and imports nothing beside or above it, not even inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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


# The floors of the house, from the ground up: a module imports its own package and the floors below
# it, in functions too; nothing beside it on its floor, nothing above.  profiler.cache_dir is where the
# exports and analyses made from traces are kept (profiler.trace and profiler.runs write there).
# profiler.threads (an analysis's independent pieces side by side) serves the analysis and the pools.
# profiler.stored is what a stored run is (its folder, its typed summary, why it has no trace), so
# that capture, trace and analysis stand on it; runs (found, analyzed, stored in a database) and
# predict are siblings above analysis.
# profiler.xla (XLA's names, HLO text and protos) imports nothing of the trace: the trace layer reads
# HLO through it (a JAX profiler trace's thunks named from the step's HLO), and the exports built
# from code (profiler.synthetic) stand on the trace layer's schema.
# A package named on no floor stands under the commands (cli.py) and over everything else; a package's
# __main__ is a command, on no floor.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("profiler", "profiler.units", "profiler.conventions", "profiler.errors"),
    ("profiler.stored", "profiler.cache_dir", "profiler.threads"),
    ("profiler.xla",),
    ("profiler.trace",),
    ("profiler.synthetic",),
    ("profiler.analysis", "profiler.annotate"),
    ("profiler.predict", "profiler.runs"),
    ("profiler.parallel", "profiler.report"),
    ("profiler.capture", "profiler.recipes"),
    ("dashboards",),
    ("profiler.commands",),
    ("profiler.cli",),
)
_FLOOR_OF = {pkg: n for n, floor in enumerate(FLOORS) for pkg in floor}


def _package(module: str) -> str:
    """The floor entry that *module* belongs to (its longest prefix among them), else its top package."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in _FLOOR_OF and (prefix != "profiler" or module == "profiler"):
            return prefix
    return ".".join(parts[:2])


def _may_import(module: str, target: str) -> bool:
    here, there = _package(module), _package(target)
    if here == there or there == "profiler" or (here not in _FLOOR_OF and there not in _FLOOR_OF):
        return True
    unlisted = len(FLOORS) - 2.5  # a package on no floor: under the commands, over everything else
    return _FLOOR_OF.get(there, unlisted) < _FLOOR_OF.get(here, unlisted)


def layer_breaks(root: Path) -> list[str]:
    """``module -> imported`` for each import (in a function too) of a package beside or above it."""
    mods = modules(root)
    out = []
    for name, path in sorted(mods.items()):
        if name.rsplit(".", 1)[-1] == "__main__":
            continue
        tree = ast.parse(path.read_text(), str(path))
        nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
        targets = {t for n in nodes if not getattr(n, "level", 0) for t in _targets(n, mods)}
        out += [f"{name} -> {t}" for t in sorted(targets) if not _may_import(name, t)]
    return out


def test_lower_layers_import_nothing_above_them():
    assert layer_breaks(ROOT) == []


def test_a_layer_break_is_found(tmp_path: Path):
    for pkg in ("profiler", "profiler/analysis", "profiler/report", "profiler/runs", "profiler/predict", "dashboards"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "profiler/units.py").write_text("")
    (tmp_path / "profiler/report/text.py").write_text("from profiler.units import ms\n")
    body = "from profiler import units\n\n\ndef f():\n    import dashboards\n"
    (tmp_path / "profiler/analysis/a.py").write_text(body)
    (tmp_path / "profiler/analysis/b.py").write_text("from profiler.report.text import ms\n")
    (tmp_path / "profiler/runs/c.py").write_text("def g():\n    from profiler.predict import d\n")  # a sibling
    (tmp_path / "profiler/predict/d.py").write_text("from profiler.analysis import a\n")
    (tmp_path / "dashboards/__main__.py").write_text("from profiler.cli import main\n")  # a command
    (tmp_path / "profiler/cli.py").write_text("import dashboards\nimport profiler.newpkg\n")
    (tmp_path / "profiler/newpkg").mkdir()  # on no floor: under the commands, over everything else
    (tmp_path / "profiler/newpkg/__init__.py").write_text("from profiler.report import text\nimport profiler.cli\n")
    (tmp_path / "profiler/report/e.py").write_text("def h():\n    import profiler.newpkg\n")
    found = layer_breaks(tmp_path)
    assert found == [
        "profiler.analysis.a -> dashboards",
        "profiler.analysis.b -> profiler.report.text",
        "profiler.newpkg -> profiler.cli",
        "profiler.report.e -> profiler.newpkg",
        "profiler.runs.c -> profiler.predict.d",
    ]
