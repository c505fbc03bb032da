"""tune's launch key (profiler.tune.launch): a tune whose search meets only programs already in the record
does not start the script; an edited module, a new placement or a record that no longer holds does.

The script (tests/scripts/tune_lazy.py, copied with its layer module into a folder of the test's own)
appends its process id to ``$TUNE_LAZY_STARTS`` each time it starts: the tests count its starts there.
The real GPU compiler in .venv-aot (skips without it)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from profiler.tune.launch import LaunchRecord, hashes, read_files
from tests.helpers.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "scripts"
TIMINGS = {"seconds", "compile_seconds", "batch_seconds", "jobs", "launch"}


class Lazy:
    """The copied script, its record and its count of starts."""

    def __init__(self, python: str, where: Path) -> None:
        self.python, self.where = python, where
        self.script = where / "src" / "tune_lazy.py"
        self.script.parent.mkdir(parents=True)
        for name in ("tune_lazy.py", "tune_lazy_layers.py"):
            shutil.copy(SCRIPTS / name, self.script.parent / name)
        self.starts_file = where / "starts.txt"
        self.cache = where / "cache"
        self.runs = 0

    def starts(self) -> int:
        return len(self.starts_file.read_text().split()) if self.starts_file.exists() else 0

    def tune(self, link: str, *more: str, cache: Path | None = None) -> tuple[dict[str, Any], str, Path]:
        """``tune --json --no-presets`` of the copy (64 MiB), its document, stderr and folder."""
        self.runs += 1
        out = self.where / f"t{self.runs}"
        env = {"PROFILE_STEP_CACHE": str(cache or self.cache), "TUNE_LAZY_STARTS": str(self.starts_file)}
        proc = run_cli("tune", "--json", "--no-presets", "--link", link, "--memory-limit", "64MiB", "--out", str(out),
                       "--python", self.python, *more, str(self.script), env=env, timeout=900)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout), proc.stderr, out


@pytest.fixture(scope="module")
def lazy(aot_python, tmp_path_factory) -> Lazy:
    """A first tune of the copy (PCIe Gen5, the name ``up`` only, one process): it starts the script once and
    writes the launch entry."""
    it = Lazy(aot_python, tmp_path_factory.mktemp("lazy"))
    doc, _, _ = it.tune("pcie5", "--names", "up", "--jobs", "1")
    assert it.starts() == 1 and doc["compiles"] >= 4
    assert doc["record"]["launch"] == {"key": doc["record"]["launch"]["key"], "from_record": False,
                                       "script_started": True, "files": doc["record"]["launch"]["files"]}  # fmt: skip
    entry = LaunchRecord(it.cache / "tune", doc["record"]["launch"]["key"]).path
    files = json.loads(entry.read_text())["files"]
    assert str(it.script.resolve()) in files and str((it.script.parent / "tune_lazy_layers.py").resolve()) in files
    return it


def without_timings(doc: Any, out: Path, cache: Path) -> Any:
    """*doc* less its timings and its launch fields, its folder and its record's written as OUT and CACHE."""
    if isinstance(doc, dict):
        return {k: without_timings(v, out, cache) for k, v in doc.items() if k not in TIMINGS}
    if isinstance(doc, list):
        return [without_timings(v, out, cache) for v in doc]
    return doc.replace(str(out), "OUT").replace(str(cache), "CACHE") if isinstance(doc, str) else doc


def test_a_second_tune_for_another_link_does_not_start_the_script(lazy, tmp_path):
    """Everything kept: the second tune (NVLink-C2C, --jobs 2) starts no process of the script, says so in one
    line, and gives the document of a tune that started it (--start-script, on a copy of the same record)."""
    same = tmp_path / "cache"
    shutil.copytree(lazy.cache, same)
    before = lazy.starts()
    doc, err, out = lazy.tune("nvlink-c2c", "--names", "up", "--jobs", "2")
    assert lazy.starts() == before and not (out / "script").exists() and not (out / "script-2").exists()
    assert doc["compiles"] == 0 and doc["record"]["reused"] >= 4
    assert doc["record"]["launch"]["from_record"] and not doc["record"]["launch"]["script_started"]
    said = [ln for ln in err.splitlines() if "from the record without starting tune_lazy.py" in ln]
    assert len(said) == 1 and "--start-script" in said[0], err
    started, _, out2 = lazy.tune("nvlink-c2c", "--names", "up", "--jobs", "2", "--start-script", cache=same)
    assert lazy.starts() == before + 1 and (out2 / "script" / "output.log").exists()
    assert not started["record"]["launch"]["from_record"] and started["record"]["launch"]["script_started"]
    assert without_timings(doc, out, lazy.cache) == without_timings(started, out2, same)


def test_an_edited_module_starts_the_script(lazy):
    """A module the script imports changed (a comment added): the script starts, and the line says which file;
    its step is the same program, so nothing is compiled."""
    layers = lazy.script.parent / "tune_lazy_layers.py"
    layers.write_text(layers.read_text() + "# edited\n")
    before = lazy.starts()
    doc, err, _ = lazy.tune("pcie4", "--names", "up", "--jobs", "1")
    assert lazy.starts() == before + 1
    assert f"{layers.resolve()} changed since the earlier tune" in err, err
    assert not doc["record"]["launch"]["from_record"] and doc["compiles"] == 0
    again, _, _ = lazy.tune("pcie4", "--names", "up", "--jobs", "1")  # the entry now has the edited file's hash
    assert lazy.starts() == before + 1 and again["record"]["launch"]["from_record"]


def test_a_new_placement_starts_the_script_once(lazy):
    """Every name searched: placements of ``act`` the record lacks; the script starts once, when the search
    meets the first of them, and the programs it compiles join the record."""
    before = lazy.starts()
    doc, err, out = lazy.tune("nvlink-c2c", "--jobs", "1")
    assert lazy.starts() == before + 1 and doc["compiles"] >= 2
    assert doc["record"]["launch"]["from_record"] and doc["record"]["launch"]["script_started"]
    assert err.count("a placement not in the record: starting tune_lazy.py") == 1, err
    assert (out / "script" / "output.log").exists()
    again, _, _ = lazy.tune("nvlink-c2c", "--jobs", "1")
    assert lazy.starts() == before + 1 and again["compiles"] == 0


def test_a_record_that_no_longer_holds_starts_over(lazy):
    """A launch entry whose step is not the one the script traces (here: its fingerprint overwritten; in use, a
    change the launch key does not see): the started script's step is checked, the tune starts over with the
    script started, gives the right document, and the entry is written again."""
    doc, _, _ = lazy.tune("pcie5", "--names", "up", "--jobs", "1")
    entry = LaunchRecord(lazy.cache / "tune", doc["record"]["launch"]["key"]).path
    kept = json.loads(entry.read_text())
    entry.write_text(json.dumps({**kept, "found": {**kept["found"], "fingerprint": "0" * 64}}))
    before = lazy.starts()
    again, err, _ = lazy.tune("pcie5", "--names", "up", "--jobs", "1")
    assert "traced another step than the record holds for this launch" in err and "starting over" in err, err
    assert lazy.starts() == before + 2  # the lazy start that found the difference, then the fresh one
    assert again["choice"]["fingerprint"] == doc["choice"]["fingerprint"] and again["compiles"] == 0
    assert json.loads(entry.read_text())["found"]["fingerprint"] == kept["found"]["fingerprint"]


def test_launch_files_and_their_hashes(tmp_path):
    """The files a launch watches: those outside the Python's prefixes, the tune folder and /proc; the script
    always; a file gone or changed is a miss that says which."""
    prefix, out, mine = tmp_path / "venv", tmp_path / "out", tmp_path / "mine.py"
    for d in (prefix, out):
        d.mkdir()
    (prefix / "lib.py").write_text("x = 1\n")
    (out / "target.txtpb").write_text("t\n")
    mine.write_text("import lib\n")
    script = tmp_path / "train.py"
    script.write_text("import mine\n")
    cached = str(tmp_path / "__pycache__" / "mine.cpython-311.pyc")
    sources = {"files": [str(prefix / "lib.py"), str(out / "target.txtpb"), str(mine), "/proc/self/status", cached],
               "prefixes": [str(prefix)]}  # fmt: skip
    watched = read_files(sources, script, [out])
    assert watched == sorted([str(mine.resolve()), str(script.resolve())])
    rec = LaunchRecord(tmp_path / "record", "k")
    assert rec.lookup() == (None, "no earlier tune of this launch")
    up = {"shape": [2], "dtype": "float32", "count": 1, "bytes_per_step": 8}
    found = {"ok": True, "fingerprint": "f", "names": {"up": up}}
    rec.write("s", {"step": "train_step"}, {"ok": True}, hashes(watched))  # no names: not an entry to use
    assert rec.lookup() == (None, "its entry in the record cannot be read")
    rec.write("s", {"step": "train_step"}, found, hashes([*watched, str(tmp_path / "absent.cfg")]))
    entry, why = rec.lookup()
    assert entry is not None and entry["step_key"] == "s" and why == ""
    (tmp_path / "absent.cfg").write_text("now here\n")  # looked for by the first run, not found: now a change
    assert rec.lookup()[0] is None
    (tmp_path / "absent.cfg").unlink()
    mine.write_text("import lib  # edited\n")
    assert rec.lookup() == (None, f"{mine.resolve()} changed since the earlier tune")
    mine.unlink()
    assert rec.lookup() == (None, f"{mine.resolve()} gone since the earlier tune")
