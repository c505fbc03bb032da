"""Savings on a real TPU v5e run (sample_traces/tpu-v5e-h200-shape, offload_qkv unrolled): what the
late-copies-back finding's replay gives back, why it is small, and how the verdict says so."""

from __future__ import annotations

import numpy as np
import pytest

from profiler.analysis.breakdown import Breakdown
from profiler.analysis.dependencies import D2H, H2D
from profiler.analysis.findings import evaluate
from profiler.analysis.findings.changes import stalls_of
from profiler.analysis.findings.config import FindingsConfig
from profiler.analysis.findings.evidence import Evidence
from profiler.report.verdict_text import render_verdict
from profiler.runs.result import build
from profiler.runs.verdict import verdict
from profiler.stored import folder
from profiler.trace import load_trace
from tests.helpers.paths import ROOT

SHAPE = ROOT / "sample_traces" / "tpu-v5e-h200-shape"
RUN = next(iter(sorted(SHAPE.glob("*-offload_qkv-baa357"))), None)
pytestmark = pytest.mark.skipif(RUN is None, reason="no sample_traces/tpu-v5e-h200-shape offload_qkv run")


@pytest.fixture(scope="module")
def ev() -> Evidence:
    trace = load_trace(RUN / "trace.json.gz")
    return Evidence(trace, folder.manifest_of(RUN / "trace.json.gz"), Breakdown(trace))


def test_the_launches_do_not_pin_the_replay(ev):
    """The conversion's launch calls move with the core's done waits: dropping the waits on every
    copy gives back what the copy-free replay gives back, per step; on the h2d copies alone, less."""
    r = ev.replays
    ops = r.deps.ops
    every = r.saving(stalls_of(ev, np.flatnonzero((ops.kind == H2D) | (ops.kind == D2H)), "every copy"))
    free = r.copy_free_saving
    assert every.step_ns["0"] == free.step_ns["0"] > 30_000_000  # 33.4 ms per step
    h2d = r.saving(stalls_of(ev, np.flatnonzero(ops.kind == H2D), "the h2d copies"))
    assert 0 < h2d.step_ns["0"] < free.step_ns["0"]


def test_late_copies_back_says_what_holds_the_tpu(ev):
    """Its replay gives back next to nothing: the core's later done waits on the copies the change
    leaves keep their recorded ends.  The sentence says so, on a TPU, never that a host paces a GPU."""
    (f,) = [f for f in evaluate(ev)["findings"] if f["id"] == "late-copies-back"]
    assert f["saving_ns"] < 1_000
    v = f["verdict"]
    assert "GPU" not in v and "host-bound" not in v
    assert "late copies back of TPU 0 dropped" in v
    assert "follows its done wait on an h2d copy the change leaves" in v


def test_a_saving_under_the_steps_spread_is_no_measurable_saving(tmp_path, monkeypatch):
    monkeypatch.setenv("PROFILE_STEP_CACHE", str(tmp_path))
    trace = load_trace(RUN / "trace.json.gz")
    res = build(trace, folder.manifest_of(RUN / "trace.json.gz"), findings=FindingsConfig())
    v = verdict([res.brief()])
    (s,) = v["savings"]
    assert s["rule"] == "late-copies-back" and 0 < s["saving_ns"] < s["noise_ns"]
    assert s["measurable"] is False
    text = render_verdict(v, wide=True)
    assert "late-copies-back (TPU 0) no measurable saving (" in text
    assert "saves" not in text.split("late-copies-back", 1)[1].split("\n")[0]


def test_late_copies_back_says_when_its_waits_overlap(ev):
    """The unrolled step has several copies back in flight together: each one's wait (its transfer less
    the compute beside it) counts the same idle time again, 92.4 ms per step summed, where the core
    stood idle beside them 33.4 ms (the run's stalled time); the message says both. On the H200's
    unrolled run, whose copies back run one after another on their stream, it adds nothing."""
    (f,) = [f for f in evaluate(ev)["findings"] if f["id"] == "late-copies-back"]
    msg = " ".join(f["verdict"].split())
    assert "92.4 ms waited per step" in msg
    assert "the copies were in flight together, so their waits overlap: the TPU ran no kernel beside them for" in msg
    assert "33.38" in msg.split("ran no kernel beside them for", 1)[1][:10]
    h200 = next(iter(sorted((ROOT / "sample_traces" / "h200-example").glob("*-offload_qkv-b50f27"))), None)
    if h200 is not None:
        trace = load_trace(h200 / "trace.json.gz")
        other = Evidence(trace, folder.manifest_of(h200 / "trace.json.gz"), Breakdown(trace))
        for g in evaluate(other)["findings"]:
            assert "in flight together" not in g["verdict"], g["id"]
