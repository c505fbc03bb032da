"""The device of an event record and of a synchronization row is the device of its context's ops in its
process (METRICS.md, Stalls, Inputs), not the ``deviceId`` that nsys leaves at 0 on those rows; on
exports built with known answers, to the nanosecond, and on the real exports that showed it."""

from __future__ import annotations

from profiler.runs.result import analyze
from profiler.synthetic.export import ExportBuilder
from profiler.trace import open_trace
from tests.helpers.costs_runs import launched

MIB = 1 << 20


def two_gpus_one_process(b: ExportBuilder, sync_device: int = 0) -> None:
    """GPU 0 (context 1) and GPU 1 (context 2) both have a stream 22; GPU 1's kernel waits for its H2D.

    host:  50 launch K0 on GPU 0 s22    55 launch A on GPU 1 s22    100 launch H2D on GPU 1 s30
           150 record e5 on s30 (context 2)    160 wait e5 on s22 (context 2, t_w 170)
           300 launch K0' on GPU 0 s22        310 launch B on GPU 1 s22
    GPU 0  s22  K0 [60,400)  K0' [400,450)
    GPU 1  s22  A [60,500)   B [1210,1500)      s30  H2D [200,1200) 8 MiB
    B: ready = max(A.end 500, launch 310) = 500; dep = H2D.end 1200 -> stall = min(1210, 1200) - 500 = 700.
    Every record and sync row says deviceId *sync_device*, as nsys writes them (0).
    """
    b.gpu(0)
    b.gpu(1)
    launched(b, 50, "kernel", 60, 400, "k0", device=0, stream=22, context=1)
    launched(b, 55, "kernel", 60, 500, "a", device=1, stream=22, context=2)
    launched(b, 100, "copy", 200, 1200, "h2d", 8 * MIB, device=1, stream=30, context=2)
    b.event_record(150, 5, device=sync_device, stream=30, context=2)
    b.stream_wait(160, 5, device=sync_device, stream=22, context=2)
    launched(b, 300, "kernel", 400, 450, "k0b", device=0, stream=22, context=1)
    launched(b, 310, "kernel", 1210, 1500, "b", device=1, stream=22, context=2)


def test_a_wait_on_device_0_of_gpu_1s_context_stalls_gpu_1(build):
    doc = analyze(open_trace(build(_built(two_gpus_one_process))))
    gpu0, gpu1 = doc["devices"]["0"]["stalls"], doc["devices"]["1"]["stalls"]
    assert gpu1["waits"] == {"total": 1, "resolved": 1, "unresolved": 0}
    assert gpu1["by_blocker"]["h2d"] == {"count": 1, "stall_ns": 700}
    assert gpu1["compute_stalled_by_offload_ns"] == 700
    assert gpu0["waits"] == {"total": 0, "resolved": 0, "unresolved": 0}
    assert gpu0["by_blocker"]["offload"] == {"count": 0, "stall_ns": 0}  # GPU 0's stream 22 waited for nothing


def test_the_rows_own_device_is_kept_where_the_context_says_nothing(build):
    # one context for both GPUs (ops of several devices): the rows' own deviceId, 1, decides
    def shared_context(b: ExportBuilder) -> None:
        b.gpu(0)
        b.gpu(1)
        launched(b, 50, "kernel", 60, 400, "k0", device=0, stream=22)
        launched(b, 55, "kernel", 60, 500, "a", device=1, stream=22)
        launched(b, 100, "copy", 200, 1200, "h2d", 8 * MIB, device=1, stream=30)
        b.event_record(150, 5, device=1, stream=30)
        b.stream_wait(160, 5, device=1, stream=22)
        b.stream_wait(165, 6, device=1, stream=22, context=9)  # a context with no op: its own device, 1
        launched(b, 310, "kernel", 1210, 1500, "b", device=1, stream=22)

    trace = open_trace(build(_built(shared_context)))
    assert trace.syncs["device"].to_list() == [1, 1]
    st = analyze(trace)["devices"]["1"]["stalls"]
    assert st["waits"] == {"total": 2, "resolved": 1, "unresolved": 1}
    assert st["by_blocker"]["h2d"] == {"count": 1, "stall_ns": 700}


def test_contexts_are_matched_within_their_process(build):
    # process 200's context 2 runs on GPU 0; process 100's context 2 on GPU 1
    def two_processes(b: ExportBuilder) -> None:
        two_gpus_one_process(b)
        launched(b, 70, "kernel", 80, 90, "other", device=0, stream=22, context=2, pid=200)
        b.stream_wait(80, 5, stream=22, context=2, pid=200)

    trace = open_trace(build(_built(two_processes)))
    got = trace.syncs.select("pid", "device").sort("pid").rows()
    assert got == [(100, 1), (200, 0)]
    assert trace.event_records.select("pid", "device").rows() == [(100, 1)]


def _built(scenario) -> ExportBuilder:
    b = ExportBuilder()
    scenario(b)
    return b


def test_real_2026_export_puts_each_gpus_waits_on_its_gpu(shared_traces):
    doc = analyze(open_trace(shared_traces / "nsysai__h100_2gpu_1s.sqlite"))
    waits = {d: v["stalls"]["waits"]["total"] for d, v in doc["devices"].items()}
    assert waits == {"0": 118, "1": 118}  # not 236 on device 0


def test_real_2023_export_waits_on_the_gpus_of_their_contexts(shared_traces):
    trace = open_trace(shared_traces / "alpa__report2.sqlite")
    waits = trace.syncs.filter(trace.syncs["stream"].is_not_null() & trace.syncs["event_id"].is_not_null())
    assert sorted(waits["device"].to_list()) == [1, 2]  # deviceId 0 in the export
    doc = analyze(trace)
    assert {d: v["stalls"]["waits"]["total"] for d, v in doc["devices"].items()} == {"1": 1, "2": 1}
