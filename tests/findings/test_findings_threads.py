"""The savings' replays side by side (``profiler/threads.py``, ``findings/saving.savings``): the pool
runs its pieces at once, in the order given back, and the findings are the same bytes with one
thread as with several; a bad ``PROFILE_STEP_THREADS`` is one line and exit 2."""

from __future__ import annotations

import threading

import pytest

from profiler.analysis.breakdown import Breakdown
from profiler.analysis.findings import FindingsConfig, evaluate
from profiler.analysis.findings.evidence import Evidence
from profiler.errors import ProfilerError
from profiler.threads import THREADS_ENV, map_in_threads, thread_count
from profiler.trace import open_trace
from tests.helpers.cli import run_cli
from tests.helpers.paths import ROOT

TWO_GPUS = ROOT / "sample_traces" / "public" / "nsysai__h100_2gpu_1s.sqlite"  # 6 findings, each replayed
OFFLOAD = ROOT / "sample_traces" / "demo-synthetic" / "synthetic-4-offload_all" / "synthetic-trace.sqlite"


def test_two_threads_run_at_once_and_results_keep_their_order(monkeypatch):
    monkeypatch.setenv(THREADS_ENV, "2")
    barrier = threading.Barrier(2, timeout=20)  # broken (an exception) unless two items run at once
    names: list[str] = []

    def piece(x: int) -> int:
        names.append(threading.current_thread().name)
        if x < 2:
            barrier.wait()
        return x * 10

    assert map_in_threads(piece, range(5)) == [0, 10, 20, 30, 40]
    assert all(n.startswith("profile-step") for n in names)


def test_one_thread_runs_everything_here_in_order(monkeypatch):
    monkeypatch.setenv(THREADS_ENV, "1")
    seen: list[tuple[int, str]] = []
    got = map_in_threads(lambda x: seen.append((x, threading.current_thread().name)) or -x, [3, 1, 2])
    assert got == [-3, -1, -2]
    assert seen == [(3, "MainThread"), (1, "MainThread"), (2, "MainThread")]


def test_the_first_failure_in_order_is_raised(monkeypatch):
    monkeypatch.setenv(THREADS_ENV, "2")

    def piece(x: int) -> int:
        if x in (1, 3):
            raise ValueError(f"item {x}")
        return x

    with pytest.raises(ValueError, match="item 1"):
        map_in_threads(piece, range(4))


@pytest.mark.parametrize("raw", ["0", "two", "-1", "1.5"])
def test_a_bad_thread_count_is_refused(monkeypatch, raw):
    monkeypatch.setenv(THREADS_ENV, raw)
    with pytest.raises(ProfilerError, match=f"{THREADS_ENV}='{raw}': give a whole number"):
        thread_count()


def test_the_default_is_one_thread(monkeypatch):
    monkeypatch.delenv(THREADS_ENV, raising=False)
    assert thread_count() == 1


def _findings(path, monkeypatch, threads: str) -> dict:
    monkeypatch.setenv(THREADS_ENV, threads)
    trace = open_trace(path)
    return evaluate(Evidence(trace, None, Breakdown(trace), FindingsConfig()))


@pytest.mark.parametrize("path", [TWO_GPUS, OFFLOAD], ids=["2gpu", "offload"])
def test_findings_are_the_same_with_one_thread_and_with_three(path, monkeypatch):
    one = _findings(path, monkeypatch, "1")
    three = _findings(path, monkeypatch, "3")
    replayed = [f for f in one["findings"] if f["replay"] is not None]
    assert len(replayed) >= 2 and one["copy_free"]["devices"]  # several replays, and the copy-free one
    assert three == one


def test_a_bad_thread_count_is_one_line_and_exit_2():
    proc = run_cli("findings", "--json", str(TWO_GPUS), env={THREADS_ENV: "many"})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"profile-step: error: {THREADS_ENV}='many': give a whole number of threads, 1 or more"
    ]


def _threads_seen(arg: str) -> dict[str, str | None]:
    """A pool task: the thread setting its process runs the analysis with."""
    import os

    return {"arg": arg, "threads": os.environ.get(THREADS_ENV)}


def test_the_rank_pool_runs_each_analysis_on_one_thread_and_puts_it_back(monkeypatch):
    from profiler.parallel import _on_pool

    monkeypatch.delenv(THREADS_ENV, raising=False)
    seen: list[dict[str, str | None]] = []
    _on_pool(["a", "b", "c"], 2, _threads_seen, seen.append, lambda arg, exc: {"arg": arg, "threads": repr(exc)})
    assert sorted(r["arg"] for r in seen) == ["a", "b", "c"]
    assert {r["threads"] for r in seen} == {"1"}  # this process's share and the spawned worker's
    assert THREADS_ENV not in __import__("os").environ
