"""profile-step's cache: one folder (resolution order), keyed per trace, never beside a trace, and
``profile-step cache`` that shows it and clears only a folder it made."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from profiler import cache_dir
from profiler.errors import InputError
from profiler.runs.store import CacheFiles
from tests.helpers.cli import run_cli
from tests.helpers.paths import ROOT

H200_NONE = ROOT / "sample_traces" / "h200-example" / "20261204T170006-none-8c28dc"  # a JAX trace, 128 KiB


def listing(folder: Path) -> dict[Path, tuple[int, int]]:
    """Every file under *folder*, with its size and modification time."""
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


def test_the_folder_is_the_variable_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PROFILE_STEP_CACHE", str(tmp_path / "own"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir.root() == tmp_path / "own"
    monkeypatch.delenv("PROFILE_STEP_CACHE")
    assert cache_dir.root() == tmp_path / "xdg" / "profile-step"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir.root() == tmp_path / "home" / ".cache" / "profile-step"
    made = cache_dir.cache_dir("exports")
    assert made == tmp_path / "home" / ".cache" / "profile-step" / "exports" and made.is_dir()
    assert cache_dir.is_tagged(made.parent)
    with pytest.raises(ValueError, match="unknown cache"):
        cache_dir.cache_dir("elsewhere")


def test_two_traces_of_one_name_never_share_an_entry(tmp_path):
    a, b = tmp_path / "a" / "trace.sqlite", tmp_path / "b" / "trace.sqlite"
    fa, fb = CacheFiles.of(a), CacheFiles.of(b)
    assert len({fa.db, fb.db, fa.ops, fb.ops}) == 4
    assert fa.db.parent == cache_dir.root() / "dashboard" and fa.db.name.endswith("-trace.sqlite.profile-step.db")


def test_clear_refuses_a_folder_without_the_tag(tmp_path, monkeypatch):
    mine = tmp_path / "mine"
    (mine / "dashboard").mkdir(parents=True)
    (mine / "dashboard" / "notes.txt").write_text("mine")
    proc = run_cli("cache", "--clear", "--cache-dir", str(mine))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"profile-step: error: {mine}: holds no profile-step CACHEDIR.TAG: not a cache profile-step made, left as it is"
    ]
    assert (mine / "dashboard" / "notes.txt").read_text() == "mine"
    # a folder that already holds files is used as it is, never tagged: clear never empties it
    monkeypatch.setenv("PROFILE_STEP_CACHE", str(mine))
    assert cache_dir.cache_dir("exports") == mine / "exports" and not cache_dir.is_tagged(mine)
    with pytest.raises(InputError, match=r"holds no profile-step CACHEDIR\.TAG"):
        cache_dir.clear()
    assert (mine / "dashboard" / "notes.txt").is_file()


@pytest.mark.skipif(not H200_NONE.is_dir(), reason="no sample_traces/h200-example")
def test_analyze_writes_its_conversion_into_the_cache_dir_and_cache_clears_it(tmp_path):
    run = tmp_path / H200_NONE.name
    shutil.copytree(H200_NONE, run)
    before = listing(tmp_path)
    cache = tmp_path.parent / f"{tmp_path.name}-cache"
    proc = run_cli("analyze", "--no-findings", "--cache-dir", str(cache), str(run))
    assert proc.returncode == 0, proc.stderr
    assert listing(tmp_path) == before, "nothing written beside the trace"
    shown = json.loads(run_cli("cache", "--json", "--cache-dir", str(cache)).stdout)
    assert shown["folder"] == str(cache) and shown["tagged"]
    assert shown["kinds"]["exports"]["files"] == 1 and shown["bytes"] == shown["kinds"]["exports"]["bytes"] > 0
    cleared = run_cli("cache", "--clear", "--cache-dir", str(cache))
    assert cleared.returncode == 0 and cleared.stdout.startswith(f"{cache}: cleared 1 file(s), ")
    assert json.loads(run_cli("cache", "--json", "--cache-dir", str(cache)).stdout)["files"] == 0
    assert sorted(p.name for p in cache.iterdir()) == ["CACHEDIR.TAG"]


@pytest.mark.shared
def test_nothing_is_written_beside_a_copied_shared_trace(shared_traces, tmp_path, monkeypatch):
    from dashboards.data import RunStore

    monkeypatch.setenv("PROFILE_STEP_CACHE", str(tmp_path / "cache"))
    traces = tmp_path / "traces"
    traces.mkdir()
    shutil.copy2(shared_traces / "gpu4__nsys_vectorAdd_normal_10000000__7498cc2.sqlite", traces / "vector.sqlite")
    before = listing(traces)
    assert run_cli("analyze", "--json", str(traces / "vector.sqlite")).returncode == 0
    store = RunStore([traces])
    (rid,) = store.refs
    store.get(rid)
    assert listing(traces) == before
    files = CacheFiles.of(traces / "vector.sqlite")
    assert files.db.is_file() and files.ops.is_file() and files.ranges.is_file()
    assert files.db.is_relative_to(tmp_path / "cache" / "dashboard")


CPU_RUN = ROOT / "sample_traces" / "cpu-example" / "20261130T012257-none-42aa66"  # trace.nsys-rep and its export


@pytest.mark.skipif(not CPU_RUN.is_dir(), reason="no sample_traces/cpu-example")
def test_a_report_read_through_the_export_beside_it_makes_no_cache(tmp_path, monkeypatch):
    from profiler.trace.nsys import export_report

    monkeypatch.setenv("PROFILE_STEP_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "run"
    shutil.copytree(CPU_RUN, run)  # mtimes kept: trace.sqlite is still the report's export
    assert export_report(run / "trace.nsys-rep", nsys_path="/nonexistent/nsys") == run / "trace.sqlite"
    assert not (tmp_path / "cache").exists()
