"""The analysis window: a whole recorded run, read only where the profile-step:capture range or the
cudaProfilerStart/Stop span says, gives the numbers of a recording of that part alone."""

from __future__ import annotations

import json

import pytest

from profiler.analysis.steps import step_summary
from profiler.runs.result import analyze, collect
from profiler.synthetic.export import ExportBuilder
from profiler.trace import load_trace, open_trace
from profiler.trace.loader import EVENT_TABLE, KERNEL_TABLE, MEMCPY_TABLE, SYNC_TABLE
from tests.helpers.cli import run_cli

T = 100  # the training loop's thread
W0, W1 = 1_000_000, 9_000_000  # the window


def launch(b: ExportBuilder, t: int, gpu: tuple[int, int], kind: str = "kernel", nbytes: int = 1 << 20) -> None:
    """A CUDA call at *t* on thread T launching a kernel or a copy that runs at *gpu*."""
    if kind == "kernel":
        corr = b.kernel(*gpu, f"fusion_{t % 7}")
        b.runtime(t, t + 5, corr, tid=T)
    else:
        corr = b.copy(*gpu, kind, nbytes)
        b.runtime(t, t + 5, corr, name="cudaMemcpyAsync_v3020", tid=T)


def recording(marker: str | None, outside: bool) -> ExportBuilder:
    """A run: warm-up before W0, three annotated steps in [W0, W1), more work after W1.

    *marker*: ``nvtx`` (annotate.capture()), ``cuda`` (cudaProfilerStart/Stop) or None.
    *outside*: whether the work before and after the window is recorded too.
    """
    b = ExportBuilder()
    b.gpu(0)
    b.domain(1, "profile-step", tid=T)
    if marker == "nvtx":
        b.nvtx(W0, W1, "profile-step:capture", tid=T, domain_id=1, registered=True)
    elif marker == "cuda":
        b.runtime(W0, W0 + 50, b.next_correlation(), name="cudaProfilerStart_v4000", tid=T)
        b.runtime(W1 - 1000, W1, b.next_correlation(), name="cudaProfilerStop_v4000", tid=T)
    # a range that encloses the whole loop: cut to the window when it reaches beyond it
    b.nvtx(0 if outside else W0, 20_000_000 if outside else W1, "train", tid=T)
    if outside:
        b.nvtx(10_000, 600_000, "warmup=0", tid=T, domain_id=1)
        launch(b, 20_000, (30_000, 500_000))  # compile-time work
        launch(b, 30_000, (40_000, 90_000), "d2h")
        launch(b, 900_000, (W0 + 100, W0 + 40_000))  # launched before the window, runs inside it
        launch(b, 9_500_000, (9_600_000, 9_700_000), "h2d")  # after the window
        b.nvtx(9_400_000, 9_800_000, "step=99", tid=T, domain_id=1)
    for s in range(3):
        t0 = W0 + 1000 + s * 2_000_000
        b.nvtx(t0, t0 + 1_000_000 + 1000 * s, f"step={s}", tid=T, domain_id=1)
        for i in range(2):
            lt = t0 + 10_000 + i * 200_000
            b.nvtx(lt, lt + 150_000, f"layer={i}", tid=T, domain_id=1)
            launch(b, lt + 10, (lt + 1000, lt + 101_000), "d2h", 4 << 20)
            launch(b, lt + 30, (lt + 1000, lt + 90_000))
    launch(b, W1 - 2000, (W1 + 500, W1 + 100_000), "h2d")  # launched inside, runs past the end: kept
    return b


def views(path, window: str | None = None) -> dict:
    trace = open_trace(path, window)
    out = {by or "devices": analyze(trace, by=by) for by in (None, "range", "step", "layer", "op")}
    for doc in out.values():
        del doc["trace"]
    out["run"] = {k: v for k, v in collect(open_trace(path, window)).items() if k not in ("trace", "window")}
    return out


@pytest.mark.parametrize("marker", ["nvtx", "cuda"])
def test_whole_recording_reads_as_the_window_alone(build, marker):
    whole = build(recording(marker, outside=True), "whole.sqlite")
    part = build(recording(marker, outside=False), "part.sqlite")
    assert open_trace(whole).window.active
    got, want = views(whole), views(part)
    assert got == want
    dev = got["devices"]["devices"]["0"]
    assert dev["copies"]["d2h"]["count"] == 6 and dev["copies"]["h2d"]["count"] == 1
    assert dev["window_ns"][1] == W1 + 100_000  # launched inside, ran past the window: counted
    assert dev["compute"]["count"] == 6  # the kernel launched before the window is not
    assert [s["name"] for s in got["step"]["steps"]["steps"]] == ["step=0", "step=1", "step=2"]
    (train,) = [r for r in got["range"]["ranges"] if r["name"] == "train"]
    assert train["copies"]["h2d"]["count"] == 1


def test_window_facts_and_text(build):
    path = build(recording("nvtx", outside=True))
    doc = analyze(open_trace(path))
    assert doc["trace"]["window"] == {
        "mode": "auto",
        "source": "profile-step:capture range",
        "start_ns": W0,
        "end_ns": W1,
        "duration_ns": W1 - W0,
        "note": None,
    }
    text = run_cli("analyze", str(path)).stdout
    assert "analysis window: profile-step:capture range, 8.00 ms" in text
    cuda = analyze(open_trace(build(recording("cuda", outside=True))))["trace"]["window"]
    assert (cuda["source"], cuda["start_ns"], cuda["end_ns"]) == ("cudaProfilerStart/Stop span", W0, W1)


def test_warmup_outside_the_window_is_not_seen(build):
    path = build(recording("nvtx", outside=True))
    assert step_summary(open_trace(path).nvtx)["warmup_steps"] == 0
    assert step_summary(open_trace(path, "all").nvtx)["warmup_steps"] == 1


def test_all_reads_everything_as_without_a_marker(build):
    """``all`` (or a manifest that says so) gives the numbers of the same run with no marker."""
    marked = build(recording("nvtx", outside=True), "marked.sqlite")
    plain = build(recording(None, outside=True), "plain.sqlite")
    assert not open_trace(plain).window.active
    got, want = views(marked, "all"), views(plain)
    # the marked recording has one more range: the capture range itself (innermost for some ops)
    got["range"]["ranges"] = [r for r in got["range"]["ranges"] if r["name"] != "profile-step:capture"]
    for view in ("range", "step", "layer"):
        got[view]["attribution"]["ranges"] -= 1
    del got["op"], want["op"], got["run"]["copy_ops"], want["run"]["copy_ops"]  # per innermost range
    assert got == want
    (marked.parent / "manifest.json").write_text(json.dumps({"capture": {"analysis_window": "all"}}))
    assert not load_trace(marked).window.active
    assert not open_trace(marked).window.active
    assert open_trace(marked, "auto").window.active  # asked for explicitly: wins over the manifest


def test_named_range_window(build):
    path = build(recording(None, outside=True))
    # read as nsys's --nvtx-capture reads it: NAME in the default domain, NAME@DOMAIN, NAME@*
    w = open_trace(path, "nvtx:step=1@profile-step").window
    assert (w.source, w.start, w.end) == ("NVTX range step=1@profile-step", W0 + 2_001_000, W0 + 3_002_000)
    assert open_trace(path, "nvtx:step=1@*").window.start == w.start
    assert not open_trace(path, "nvtx:step=1").window.active  # not in the default domain
    assert open_trace(path, "nvtx:train").window.start == 0
    dev = analyze(open_trace(path, "nvtx:step=1@profile-step"))["devices"]["0"]
    assert dev["copies"]["d2h"]["count"] == 2
    missing = open_trace(path, "nvtx:nope").window
    assert not missing.active and missing.note == "no NVTX range nope in the recording"
    with pytest.raises(ValueError):
        open_trace(path, "range:x")


def test_without_cuda_the_reason_is_given(build):
    b = ExportBuilder()
    b.domain(1, "profile-step", tid=T)
    b.nvtx(0, 100, "train_step 0", tid=T)
    w = analyze(open_trace(build(b)))["trace"]["window"]
    assert w["start_ns"] is None
    assert w["note"] == (
        "no profile-step:capture range; no CUDA runtime: the recording holds no CUDA API calls, "
        "so no cudaProfilerStart/Stop"
    )


def test_open_ends(build):
    """A capture range never closed (the script crashed inside it), a start with no stop."""
    b = recording(None, outside=True)
    b.nvtx(W0, None, "profile-step:capture", tid=T, domain_id=1)
    trace = open_trace(build(b))
    assert (trace.window.start, trace.window.end) == (W0, None)
    assert analyze(trace)["devices"]["0"]["copies"]["h2d"]["count"] == 2  # the one after W1 too
    c = recording(None, outside=True)
    c.runtime(W0, W0 + 50, c.next_correlation(), name="cuProfilerStart", tid=T)
    w = open_trace(build(c)).window
    assert (w.source, w.start, w.end) == ("cudaProfilerStart/Stop span", W0, None)
    assert "never called" in w.note


@pytest.mark.parametrize("outside", [False, True])
def test_window_around_everything_reads_without_the_search(build, outside):
    """A window in which every CUDA call and every row of a table started: the table is read with no
    search of each row's call (the cost of reading a capture recorded inside its own range), and
    gives the rows the search gives."""
    path = build(recording("nvtx", outside=outside))
    fast, slow = open_trace(path), open_trace(path)
    slow._all_in_window = lambda table: False  # the search, always
    for frame in ("kernels", "copies", "memsets", "event_records", "syncs"):
        assert getattr(fast, frame).equals(getattr(slow, frame)), frame
    # without work outside: every call and kernel started in [W0, W1), so the kernels need no
    # condition; the last copy started after W1 (launched inside): the copies keep the search
    assert (fast._launched_in_window(KERNEL_TABLE) == "") is (not outside)
    assert fast._launched_in_window(MEMCPY_TABLE) != ""
    assert fast.kernels.height == 6  # the 6 of the steps (with work outside: not the one launched before W0)


def with_events(outside: bool) -> ExportBuilder:
    """``recording("nvtx", outside)`` with event records and synchronization rows of every kind of
    window membership: a call inside, a call outside (with work outside), no call at all, a start
    inside or outside the window."""
    b = recording("nvtx", outside=outside)
    b.event_record(W0 + 5000, 1)  # its call inside: kept
    b.event_record(W1 - 500, 2, correlation=900_001)  # no call at all (its runtime row added below)
    b.rows["CUPTI_ACTIVITY_KIND_RUNTIME"].pop()  # a record with no CUDA call: the event table has no start
    b.stream_wait(W0 + 6000, 1, stream=8)  # its call inside: kept
    b.sync(W0 + 7000, "stream_sync", stream=7, runtime=False)  # no call, started inside: kept
    b.sync(W1 + 7000, "device_sync", runtime=False)  # no call, started after the window: left out
    if outside:
        b.event_record(W1 + 9000, 3)  # its call after the window: left out
        b.stream_wait(500, 3, stream=8)  # its call before the window: left out
    return b


@pytest.mark.parametrize("outside", [False, True])
def test_records_and_waits_kept_by_the_calls_at_hand(build, outside):
    """The event records and synchronization rows read with the runtime rows at hand (the stalls'
    pass reads them anyway) are the rows SQL's search of every call keeps; the runtime rows
    decide them only when every call started in the window (else SQL searches, as before)."""
    path = build(with_events(outside))
    fast, slow = open_trace(path), open_trace(path)
    runtime = fast.read_runtime()
    assert (fast._call_keys(EVENT_TABLE, runtime) is not None) is (not outside)
    assert (fast._call_keys(SYNC_TABLE, runtime) is not None) is (not outside)
    records, syncs = fast.event_records_given(runtime), fast.syncs_given(runtime)
    assert records.equals(slow.event_records) and syncs.equals(slow.syncs)
    assert records["event_id"].to_list() == [1]  # the record without a call is left out
    assert syncs["sync_type"].len() == 2  # the wait and the stream sync inside
    assert fast.event_records is records and fast.syncs is syncs  # kept: read once
