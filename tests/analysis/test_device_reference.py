"""analyze's per-device and per-stream numbers (METRICS.md "Per device") against the plain reference
``tests/reference_devices.py``, to the nanosecond: on random exports (many devices and streams, so that
the union's path for more than 8 groups runs, large ids, nested, touching and zero-length intervals,
invalid ops).  ``test_real_traces.test_analyze_json_on_real_export`` checks the CLI's JSON of every real
export of ../shared/traces against the same reference (``check_devices``)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiler.runs.result import analyze
from profiler.runs.result import build as build_result
from profiler.synthetic.export import PAGEABLE, PINNED, ExportBuilder
from profiler.trace import open_trace
from tests.helpers import reference_costs as ref_costs
from tests.helpers.device_checks import check_devices

EPOCH = 1_700_000_000_000_000_000  # absolute epoch ns, as some exports hold


def check_contexts(path: Path, got: dict) -> None:
    """The h2d, d2h and offload copies of 1 MiB or more by context (METRICS.md "Copy bandwidth by
    context"), per device and per stream, in *got* equal ``tests/reference_costs.contexts``, the
    stalls' reference."""
    model = ref_costs.load(path)
    expected, by_stream = ref_costs.contexts(model), ref_costs.contexts(model, per_stream=True)
    for dev, d in got.items():
        for s in d["streams"]:
            mine = {name: {k: v[k] for k in ("count", "bytes", "duration_sum_ns")} for name, v in s["contexts"].items()}
            assert {n: v for n, v in mine.items() if v["count"]} == by_stream.get((int(dev), s["stream"]), {}), (
                path.name,
                dev,
                s["stream"],
            )
        for cls in ("h2d", "d2h", "offload"):
            mine = {
                name: {k: v[k] for k in ("count", "bytes", "duration_sum_ns")}
                for name, v in d["copies"][cls]["contexts"].items()
                if v["count"]
            }
            assert mine == expected.get(int(dev), {}).get(cls, {}), (path.name, dev, cls)


def check(path: Path, contexts: bool = True) -> None:
    got = analyze(open_trace(path))["devices"]
    check_devices(path, got)
    if contexts:
        check_contexts(path, got)


# --- hand-made: more than 8 streams and more than 8 devices ------------------------------------------------


def test_twelve_streams_do_not_leak_into_each_other(build):
    # Streams 1..12 on device 0.  Stream 1 holds [0, 1000); every later stream k holds one copy
    # [100 k, 100 k + 10): 10 ns each.  Busy per stream is 1000, then 10 each (derivation: one
    # interval per stream, nothing to merge); a union that let stream 1's running end reach into
    # the next streams would count 0 for them (covered) or their gap to 1000.
    b = ExportBuilder()
    b.kernel(0, 2000, "fusion", stream=7)  # the device window [0, 2000): span 2000
    b.copy(0, 1000, "h2d", 1000, stream=1)
    for k in range(2, 13):
        b.copy(100 * k, 100 * k + 10, "d2h", 10, stream=k)
    path = build(b)
    streams = analyze(open_trace(path))["devices"]["0"]["streams"]
    assert [(s["stream"], s["busy_ns"]) for s in streams] == [(1, 1000)] + [(k, 10) for k in range(2, 13)]
    assert streams[0]["occupancy"] == 1000 / 2000
    check(path)


def test_ten_devices_each_with_their_own_window(build):
    # Device d (1..9) runs a kernel [1000 d, 1000 d + 500) and an h2d copy [1000 d + 400, 1000 d + 900):
    # 100 ns of the copy under the kernel, 400 exposed, span 900.  Device 0's kernel runs [0, 5000),
    # over its copy [400, 900): hidden, span 5000.  (Derivation: two intervals per device.)  A union
    # that carried device 0's end into the next devices would find their kernels 5000 long.
    b = ExportBuilder()
    for d in range(10):
        b.kernel(1000 * d, 5000 if d == 0 else 1000 * d + 500, "fusion", device=d)
        b.copy(1000 * d + 400, 1000 * d + 900, "h2d", 5000, device=d)
    path = build(b)
    devs = analyze(open_trace(path))["devices"]
    for d in range(10):
        h2d, want = devs[str(d)]["copies"]["h2d"], (5000, 500, 500, 0) if d == 0 else (900, 500, 100, 400)
        assert (devs[str(d)]["span_ns"], h2d["busy_ns"], h2d["overlap_any_ns"], h2d["exposed_ns"]) == want
        assert devs[str(d)]["compute"]["busy_ns"] == (5000 if d == 0 else 500)
    check(path)
    assert analyze(open_trace(path), device=3)["devices"] == {"3": devs["3"]}  # --device: the same numbers


def test_missing_times_and_bytes(build):
    # An export whose memset table has no end column and whose memcpy table has no bytes column: the
    # memset [5, ?) is invalid (METRICS.md: a missing time), the window is the kernel's and the copy's
    # [0, 30); the copy moved 0 known bytes (gbps 0 / 20 ns = 0.0).
    b = ExportBuilder(omit={"CUPTI_ACTIVITY_KIND_MEMSET.end", "CUPTI_ACTIVITY_KIND_MEMCPY.bytes"})
    b.kernel(0, 10, "k")
    b.copy(10, 30, "h2d", 4096)
    b.memset(5, 6)
    path = build(b)
    dev = analyze(open_trace(path))["devices"]["0"]
    assert (dev["invalid_ops"], dev["window_ns"], dev["span_ns"]) == (1, [0, 30], 30)
    assert (dev["copies"]["h2d"]["bytes"], dev["copies"]["h2d"]["gbps"]) == (0, 0.0)
    check(path, contexts=False)  # the contexts' reference reads the bytes column


def test_peak_memory_of_one_event_and_of_rows_out_of_time_order(build):
    # Peak memory (METRICS.md "memory", not in the reference): a running sum in time order.
    # One allocation of 4096 B, the trace's only memory event: peak 4096 over 1 event.
    b = ExportBuilder()
    b.kernel(0, 10, "k")
    b.memory(5, 4096)
    assert analyze(open_trace(build(b)))["devices"]["0"]["memory"] == {"peak_allocated_bytes": 4096, "events": 1}
    # Rows written out of time order: +70 at t=4, -100 at t=3, +100 at t=1, +50 at t=2.  In time
    # order the bytes held are 100, 150, 50, 120: peak 150 (in the file's order 70, -30, 70, 120: 120).
    b = ExportBuilder()
    b.kernel(0, 10, "k")
    for t, nbytes, free in ((4, 70, False), (3, 100, True), (1, 100, False), (2, 50, False)):
        b.memory(t, nbytes, free=free)
    assert analyze(open_trace(build(b)))["devices"]["0"]["memory"] == {"peak_allocated_bytes": 150, "events": 4}


def test_the_per_rank_document_has_no_streams(build):
    # detail=False (the per-rank task) leaves out the per-stream numbers and peak memory; the
    # per-device numbers stay the reference's.
    b = ExportBuilder()
    b.kernel(0, 100, "fusion")
    b.copy(50, 150, "h2d", 4096, stream=3)
    b.memory(5, 4096)
    path = build(b)
    dev = build_result(open_trace(path), detail=False).devices["0"]
    assert dev["streams"] == [] and "memory" not in dev
    assert (dev["copies"]["h2d"]["busy_ns"], dev["copies"]["h2d"]["exposed_ns"]) == (
        100,
        50,
    )  # [50, 150), [100, 150) bare


# --- random exports against the reference -----------------------------------------------------------------

DEVICES = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 70_001, 1_048_581]  # 12 devices, two far off, one past 2^20
STREAMS = [7, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 4_294_967_294]  # 12 streams, one near 2^32
KERNEL_NAMES = ["fusion", "ncclKernel_AllReduce", "void ncclDevKernel", "NCCLbig", "void  nccl", "gemm_nccl"]
COPY_KINDS = ["h2d", "h2d", "d2h", "d2h", "d2d", "p2p", 3]  # 3: a memcpy kind that is "other"

event = st.tuples(
    st.sampled_from(["kernel", "kernel", "copy", "copy", "copy", "memset"]),
    st.integers(0, len(DEVICES) - 1),  # device (index)
    st.integers(0, len(STREAMS) - 1),  # stream (index)
    st.one_of(st.integers(0, 400), st.integers(0, 40).map(lambda x: 10 * x)),  # start (on a grid: ties)
    st.one_of(st.integers(-3, 80), st.sampled_from([0, 10, 10, 20, 50])),  # duration (< 0: invalid)
    st.integers(0, len(KERNEL_NAMES) - 1),
    st.integers(0, len(COPY_KINDS) - 1),
    st.sampled_from([PINNED, PAGEABLE]),
    st.sampled_from([0, 1, 4096, 1 << 20]),  # bytes
)


def build_random(events: list[tuple], base: int, path: Path) -> Path:
    b = ExportBuilder()
    for kind, dev, stream, start, dur, name, copy_kind, host, nbytes in events:
        s = base + start
        d, st_ = DEVICES[dev], STREAMS[stream]
        if kind == "kernel":
            b.kernel(s, s + dur, KERNEL_NAMES[name], device=d, stream=st_)
        elif kind == "copy":
            b.copy(s, s + dur, COPY_KINDS[copy_kind], nbytes, device=d, stream=st_, host=host)
        else:
            b.memset(s, s + dur, nbytes, device=d, stream=st_)
    return b.write(path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(event, min_size=1, max_size=80), st.sampled_from([0, 5_000, EPOCH]))
def test_random_exports_match_the_reference(tmp_path_factory, events, base):
    check(build_random(events, base, tmp_path_factory.mktemp("dev") / "r.sqlite"))
