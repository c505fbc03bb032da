"""compare's two sides analysed at once (``parallel.load_sides``): the same runs, the same report, and a
bad side's own one-line error, as when they are loaded one after the other."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profiler import parallel
from profiler.errors import ProfilerError
from profiler.runs.result import load_runs
from tests.helpers.cli import run_cli
from tests.helpers.paths import ROOT
from tests.helpers.training_traces import training_export


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
    # two cores, but not the memory for both analyses at once: in this process too
    monkeypatch.setattr(parallel, "usable_cores", lambda: 2)
    need = parallel.PEAK_PER_EXPORT_BYTE * sum(p.stat().st_size for p in pair)
    monkeypatch.setattr(parallel, "available_memory", lambda: need - 1)
    assert parallel.load_sides([str(pair[0]), str(pair[1])], db) == sides and len(made) == 1
    monkeypatch.setattr(parallel, "available_memory", lambda: need + 1)
    assert parallel.load_sides([str(pair[0]), str(pair[1])], db) == sides and len(made) == 2


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


def test_ctrl_c_while_the_worker_starts_is_one_line(pair):
    """Ctrl-C reaches the whole process group: the spawned worker (still importing) must not print a
    traceback of its own; compare says it was interrupted, in one line, exit 130."""
    if parallel.usable_cores() < 2:
        pytest.skip("one usable core: compare runs in one process")
    for _ in range(3):  # a Ctrl-C in the few ms while a worker is being started is ignored: try again
        code, err = _interrupted_compare(pair)
        if code != 0:
            break
    # 130, or killed by SIGINT after the line (Python 3.11's exit for a KeyboardInterrupt it counts as
    # unhandled, 2 of 25 under load, cause not found): a shell shows $? = 130 for both
    assert code in (130, -signal.SIGINT) and err == "profile-step: interrupted\n", (code, err)


def _interrupted_compare(pair) -> tuple[int, str]:
    """compare of *pair*, sent SIGINT (to its process group, as a terminal does) once its worker runs."""

    def default_sigint() -> None:  # a terminal's Ctrl-C is not ignored (a background job's is)
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen(
        [sys.executable, "-m", "profiler.cli", "compare", str(pair[0]), str(pair[1])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        preexec_fn=default_sigint,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None and not _spawned_worker(proc.pid):
        time.sleep(0.02)
    if proc.poll() is not None:
        pytest.fail(f"compare ended before its worker started: {proc.stderr.read()}")
    time.sleep(0.1)  # out of the submit that started the worker; the worker is still importing
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def _spawned_worker(pid: int) -> bool:
    """Whether process *pid* has a child that is a multiprocessing worker starting up."""
    kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    for kid in kids:
        try:
            if b"spawn_main" in Path(f"/proc/{kid}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def test_ctrl_c_inside_a_class_being_made_is_one_line(monkeypatch, capsys):
    """Seen in the CI: Ctrl-C while an import made a dataclass; Python 3.11 wraps the KeyboardInterrupt
    in "RuntimeError: Error calling __set_name__ on 'Field' instance 'sql' in 'Check'", which was
    printed as an internal error (exit 3)."""
    from profiler import cli

    class Interrupted:
        def __set_name__(self, owner, name):
            raise KeyboardInterrupt

    monkeypatch.setattr(cli.cache_dir, "use", lambda _: type("Check", (), {"sql": Interrupted()}))
    assert cli.main(["compare", "a.sqlite", "b.sqlite"]) == 130
    assert capsys.readouterr().err == "profile-step: interrupted\n"
