"""compare's two sides analysed at once (``parallel.load_sides``): the same runs, the same report, and a
bad side's own one-line error, as when they are loaded one after the other."""

from __future__ import annotations

import pytest

from profiler import parallel
from profiler.errors import ProfilerError
from profiler.runs.result import load_runs
from tests.conftest import run_cli
from tests.training_traces import training_export


@pytest.fixture
def pair(build):
    return build(training_export(exposed={1: 10_000}), "base.sqlite"), build(training_export(), "head.sqlite")


def test_two_sides_in_two_processes_are_the_runs_loaded_one_by_one(pair, tmp_path, monkeypatch):
    monkeypatch.setattr(parallel, "usable_cores", lambda: 2)
    made = []
    real = parallel._on_pool
    monkeypatch.setattr(parallel, "_on_pool", lambda *a, **k: made.append(a[0]) or real(*a, **k))
    db = tmp_path / "none.db"
    sides = parallel.load_sides([str(pair[0]), str(pair[1])], db)
    assert made == [[str(pair[0]), str(pair[1])]]  # both sides through the pool
    assert sides == [load_runs(str(p), db) for p in pair]
    assert [r.to_json() for r in sides[1]] == [r.to_json() for r in load_runs(str(pair[1]), db)]
    # one core, or one side naming traces: in this process
    monkeypatch.setattr(parallel, "usable_cores", lambda: 1)
    assert parallel.load_sides([str(pair[0]), str(pair[1])], db) == sides and len(made) == 1


def test_a_bad_side_fails_on_its_own_line(pair, tmp_path, monkeypatch):
    corrupt = tmp_path / "c.sqlite"
    corrupt.write_bytes(b"junk" * 100)
    monkeypatch.setattr(parallel, "usable_cores", lambda: 2)
    for sides in ([str(pair[0]), str(corrupt)], [str(corrupt), str(pair[1])]):
        with pytest.raises(ProfilerError, match=r"c\.sqlite.*not an SQLite database") as exc:
            parallel.load_sides(sides, tmp_path / "none.db")
        assert exc.value.exit_code == 2
    # base's error first, as when base is loaded before head
    with pytest.raises(ProfilerError, match="missing"):
        parallel.load_sides([str(tmp_path / "missing"), str(corrupt)], tmp_path / "none.db")


def test_compare_through_the_cli(pair, tmp_path):
    proc = run_cli("compare", str(pair[0]), str(tmp_path / "c.sqlite"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    corrupt = tmp_path / "c.sqlite"
    corrupt.write_bytes(b"junk" * 100)
    proc = run_cli("compare", str(pair[0]), str(corrupt))
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"profile-step: error: {corrupt}: " + proc.stderr.split(f"{corrupt}: ", 1)[1].strip()
    ]
    assert "Traceback" not in proc.stderr and "not an SQLite database" in proc.stderr
