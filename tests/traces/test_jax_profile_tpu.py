"""A TPU's JAX profiler trace read as an nsys export (profiler/trace/jax_profile.py): a built trace
with a known answer (host transfers as copies, their done waits as the exposed time, a while's body
ops as the kernels and the while itself as none), and the prediction's reading of it on the device's clock
(profiler/predict/tpu_trace.py, over jax_profile's) finding the same host transfers."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiler.predict import tpu_trace
from profiler.runs.result import analyzed
from profiler.trace import jax_profile, load_trace, nsys_schema
from tests.helpers.cli import run_cli
from tests.helpers.sqlite_rows import rows
from tests.helpers.tpu_traces import SLICE_BYTES, TPU_PID, built_events, meta, write_trace


@pytest.fixture
def built(tmp_path: Path) -> Path:
    src = write_trace(
        tmp_path / "t" / "plugins" / "profile" / "2026_12_06_01_52_32" / "vm.trace.json.gz", built_events()
    )
    out = tmp_path / "built.sqlite"
    jax_profile.convert(src, out, gpu_name="TPU v5 lite", program_id=266)
    return out


def test_kernels_are_the_ops_but_the_whiles_and_the_host_transfers_waits(built):
    sql = "SELECT s.value, k.start, k.end, k.streamId FROM CUPTI_ACTIVITY_KIND_KERNEL k "
    sql += "JOIN StringIds s ON s.id = k.shortName ORDER BY k.start"
    one = jax_profile.TPU_COMPUTE_STREAM
    assert rows(built, sql) == [
        ("fusion.1", 0, 10_000, one),
        ("dynamic-update-slice-start", 10_000, 11_000, one),
        ("fusion.2", 11_000, 31_000, one),  # the while's body, each trip; the while itself is none
        ("fusion.2", 31_000, 51_000, one),
        ("dynamic-slice-start", 60_000, 61_000, one),
        ("fusion.3", 61_000, 70_000, one),
        ("copy-start.5", 70_000, 71_000, one),
        ("copy-done.5", 71_000, 80_000, one),  # a VMEM prefetch's done: not a host transfer, a kernel
    ]


def test_host_transfers_are_copies_from_the_start_to_the_end_of_the_done(built):
    sql = (
        "SELECT start, end, streamId, copyKind, srcKind, dstKind, bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY start"
    )
    dev, pinned = nsys_schema.DEVICE, nsys_schema.PINNED
    assert rows(built, sql) == [
        (10_000, 60_000, jax_profile.TPU_D2H_STREAM, 2, dev, pinned, SLICE_BYTES),
        (60_000, 100_000, jax_profile.TPU_H2D_STREAM, 1, pinned, dev, SLICE_BYTES),
    ]
    assert rows(built, "SELECT name FROM TARGET_INFO_GPU") == [("TPU v5 lite",)]
    meta = dict(rows(built, "SELECT name, value FROM META_DATA_EXPORT"))
    assert meta[jax_profile.DEVICE_KIND_KEY] == "TPU" and meta[jax_profile.SOURCE_KEY] == jax_profile.SOURCE


def test_the_module_and_every_op_are_xla_ranges_and_the_waits_stream_waits(built):
    nvtx = rows(built, "SELECT start, end, text FROM NVTX_EVENTS WHERE eventType = 59 ORDER BY start, end DESC")
    assert nvtx[0] == (0, 100_000, "XlaModule:#hlo_module=jit_step,program_id=266#")
    assert (11_000, 51_000, "Thunk:#hlo_op=while.1#") in nvtx  # around its body's ranges, as a GPU's while thunk
    # the op after a wait issued when the core reached the wait: its range from there
    assert (51_000, 61_000, "Thunk:#hlo_op=dynamic-slice-start#") in nvtx
    assert len(nvtx) == 1 + 9  # the module and each op but the two waits
    kernel_calls = "SELECT r.start, k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
    kernel_calls += "ON r.correlationId = k.correlationId ORDER BY k.start"
    assert [launch for launch, start in rows(built, kernel_calls) if launch != start] == [51_000]
    # each copy's record just after its start; the core's stream waits from its wait on to the copy's end
    records = "SELECT e.streamId, e.eventId, r.start FROM CUPTI_ACTIVITY_KIND_CUDA_EVENT e "
    records += "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = e.correlationId ORDER BY r.start"
    assert rows(built, records) == [(jax_profile.TPU_D2H_STREAM, 1, 10_001), (jax_profile.TPU_H2D_STREAM, 2, 60_001)]
    waits = "SELECT start, end, streamId, eventId FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION "
    one, unset = jax_profile.TPU_COMPUTE_STREAM, nsys_schema.UNSET
    assert rows(built, waits + f"WHERE streamId != {unset} ORDER BY start") == [
        (51_000, 60_000, one, 1),
        (80_000, 100_000, one, 2),
    ]
    # and the sequencer (the ranges' thread) blocked in each wait, as a host blocked in an event synchronize
    assert rows(built, waits + f"WHERE streamId = {unset} ORDER BY start") == [
        (51_000, 60_000, unset, 1),
        (80_000, 100_000, unset, 2),
    ]
    blocked = "SELECT start, end FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
    blocked += f"WHERE s.value = '{jax_profile.TPU_BLOCKED}' ORDER BY start"
    assert rows(built, blocked) == [(51_000, 60_000), (80_000, 100_000)]


def test_the_exposed_copy_time_is_the_waits_and_the_step_is_the_module(built):
    run = analyzed(load_trace(built), findings=None)
    dev = run.devices["0"]
    d2h, h2d = dev["copies"]["d2h"], dev["copies"]["h2d"]
    assert (d2h["busy_ns"], d2h["exposed_ns"], d2h["bytes"]) == (50_000, 9_000, SLICE_BYTES)  # the wait 51..60 us
    assert (h2d["busy_ns"], h2d["exposed_ns"], h2d["bytes"]) == (40_000, 20_000, SLICE_BYTES)  # the wait 80..100 us
    assert [(s.duration_ns) for s in run.steps.rows] == [100_000]
    # the stalls are the waits: the op after each stood still until its copy ended
    by = dev["stalls"]["by_blocker"]
    assert (by["d2h"]["count"], by["d2h"]["stall_ns"], by["h2d"]["count"], by["h2d"]["stall_ns"]) == (1, 9_000, 0, 0)
    assert dev["stalls"]["waits"] == {"total": 2, "resolved": 2, "unresolved": 0}
    assert run.steps.source.startswith("the executions of jit_step (program 266)")


def test_without_a_program_id_each_fingerprint_is_numbered_as_it_first_ran(tmp_path):
    src = write_trace(tmp_path / "a.trace.json.gz", built_events())
    jax_profile.convert(src, tmp_path / "a.sqlite")
    texts = [t for (t,) in rows(tmp_path / "a.sqlite", "SELECT text FROM NVTX_EVENTS") if t.startswith("XlaModule")]
    assert texts == ["XlaModule:#hlo_module=jit_step,program_id=1#"]
    assert rows(tmp_path / "a.sqlite", "SELECT name FROM TARGET_INFO_GPU") == [(jax_profile.TPU_NAME,)]


def test_the_copy_free_replay_gives_back_the_waits(built, tmp_path):
    """Without its copies the step runs its ops back to back: 100 us less the 9 us wait in the middle and
    the 20 us wait that ends it."""
    proc = run_cli("whatif", str(built), env={"PROFILE_STEP_CACHE": str(tmp_path / "c")})
    assert proc.returncode == 0, proc.stderr
    step = next(ln.split() for ln in proc.stdout.splitlines() if ln.startswith("jit_step#0"))
    assert step[1:4] == ["0.100", "0.071", "0.029"]


def test_a_wait_that_ends_an_execution_stalls_nothing_in_the_next(tmp_path):
    """Two executions back to back: the h2d wait that ends the first is not a stall of the second's first op
    (its ops are issued in their own execution); each execution's d2h wait stalls the op after it."""
    first = built_events()
    again = [e | {"ts": e["ts"] + 100.0} for e in first if e["ph"] == "X"]
    src = write_trace(tmp_path / "two.trace.json.gz", first + again)
    out = tmp_path / "two.sqlite"
    jax_profile.convert(src, out, program_id=7)
    run = analyzed(load_trace(out), findings=None)
    by = run.devices["0"]["stalls"]["by_blocker"]
    assert (by["d2h"]["count"], by["d2h"]["stall_ns"], by["h2d"]["count"]) == (2, 18_000, 0)
    assert [s.duration_ns for s in run.steps.rows] == [100_000, 100_000]
    assert run.devices["0"]["copies"]["offload"]["exposed_ns"] == 2 * (9_000 + 20_000)


def _device_timed(events: list[dict], skew_ps: int = 0) -> list[dict]:
    """*events* with the device clock libtpu writes beside ts/dur (``device_offset_ps``, ``device_duration_ps``),
    the offsets *skew_ps* later than ts says."""

    def timed(e: dict) -> dict:
        ps = {"device_offset_ps": round(e["ts"] * 1e6) + skew_ps, "device_duration_ps": round(e["dur"] * 1e6)}
        return e | {"args": e["args"] | ps}

    return [timed(e) if e["ph"] == "X" and e["pid"] == TPU_PID else e for e in events]


def test_the_prediction_reads_a_tpu_trace_as_the_conversion_does_on_the_device_clock(tmp_path):
    """The built step of tests/helpers/tpu_traces.py in a run folder's jax.profiler.trace folder: found one
    folder down, its host transfers the conversion's two copies (the VMEM prefetch none), each with the
    core's wait for it, timed by the device's clock (7 ns later than ts here), the while's own time 0."""
    trace = write_trace(tmp_path / "run" / "jax" / "plugins" / "profile" / "2026_12_06" / "vm.trace.json.gz",
                        _device_timed(built_events(), skew_ps=7_000))  # fmt: skip
    write_trace(tmp_path / "gpu" / "trace.json.gz", [meta(TPU_PID, "/device:GPU:0")])
    assert jax_profile.find_tpu(tmp_path / "run") == trace and jax_profile.find_tpu(tmp_path / "gpu") is None
    t = tpu_trace.read(trace)
    assert t.transfers.rows() == [(0, "d2h", SLICE_BYTES, 10_007, 60_007, 9_000.0),
                                  (0, "h2d", SLICE_BYTES, 60_007, 100_007, 20_000.0)]  # fmt: skip
    assert dict(zip(t.ops["hlo_op"], t.ops["self_ns"], strict=False))["while.1"] == 0
    spans, execs, _ = tpu_trace.spans(t)
    assert execs.rows() == [(0, "jit_step", 7, 100_007, 100_000.0)]
    assert int((spans["end"] - spans["start"]).sum()) == 100_000
