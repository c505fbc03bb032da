"""The change a finding asks the replay for (``findings/changes.py``; METRICS.md "Savings"), derived by
hand: the copies of an XLA instruction, a link given in the configuration, the pinned rate of the
smallest copies, synchronous calls that do not copy, eight kernel groups, the steps' edges.
Written from the mutation run of ``findings_savings`` (docs/testing.md)."""

from __future__ import annotations

from profiler.analysis.breakdown import Breakdown
from profiler.analysis.findings import run_findings
from profiler.analysis.findings.config import FindingsConfig
from profiler.analysis.links import LINKS
from profiler.stored.folder import manifest_of
from profiler.synthetic.export import PAGEABLE, ExportBuilder
from profiler.trace import open_trace
from tests.helpers.findings_runs import (
    H100,
    MIB,
    TID,
    edges_case,
    findings_of,
    fired,
    launched,
    median_group,
    steps,
    waited_copy,
    write_run,
)


def test_a_stall_hotspot_on_an_xla_instruction_drops_the_waits_on_its_copies(tmp_path):
    b = ExportBuilder()
    b.domain(2, "TSL", tid=TID)  # XLA's NVTX domain
    for i, stall in enumerate([10_000, 70_000]):  # test_findings_saving.py's two layers, as XLA instructions
        t = i * 1_000_000
        # the instruction's range covers its copy's launch
        b.nvtx(t + 50, t + 120, f"Thunk:#name=jit(step)/x,hlo_op=copy-start.{i}#", tid=TID, domain_id=2)
        launched(b, t + 100, "copy", t + 1000, t + 200_000, "h2d", MIB, stream=20)
        b.event_record(t + 150, 10 + i, stream=20, tid=TID)
        b.stream_wait(t + 160, 10 + i, stream=7, tid=TID)
        launched(b, t + 200_000 - stall, "kernel", t + 200_000, t + 210_000, "consumer")
    (f,) = fired(findings_of(write_run(tmp_path, b)), "stall-hotspot")
    # copy-start.1's copy stalls the second kernel 70 us of the 80 us: the hotspot.  Without the wait on
    # it, that kernel starts at its launch, 1130 us, and ends at 1140 us; the window [1 us, 1210 us) then
    # ends with that copy at 1200 us: 10 us given back (the waits on copy-start.0's copy give back none:
    # the last kernel still ends the window)
    assert f["where"] == {"op": "copy-start.1"} and f["attributed_ns"] == 70_000
    assert f["replay"]["change"] == "the waits on the copies of XLA operation copy-start.1 dropped"
    assert (f["saving_ns"], f["saving_basis_ns"]) == (10_000, 1_209_000)


def test_a_link_given_in_the_configuration(tmp_path):
    b = ExportBuilder()
    b.gpu(0, H100)  # by the GPU's model, PCIe Gen5 x16 (63 GB/s); the configuration says PCIe Gen4
    waited_copy(b, (1_000, 1_001_000), (1_001_000, 1_011_000), launch=2_000, host=PAGEABLE)
    trace = open_trace(write_run(tmp_path, b))
    found = run_findings(trace, manifest_of(trace.path), FindingsConfig(), Breakdown(trace), link=LINKS["pcie4"])
    (f,) = fired(found, "pageable-copies")
    assert f["replay"]["change"].endswith(
        "(0 at the trace's own pinned rate, 1 at the link's: PCIe Gen4 x16 at 31.5 GB/s, given)"
    )
    # 1048576 / 31.5 = 33288.1 -> 33288 ns (at 63 GB/s it would be 16644 ns): the copy ends at 34288 ns,
    # the kernel after it (slack 0) at 44288 ns; the window ended at 1011 us
    assert f["saving_ns"] == 1_011_000 - 44_288


def test_the_pinned_rate_of_the_smallest_copies(tmp_path):
    b = ExportBuilder()
    b.gpu(0, H100)
    b.copy(0, 10, "h2d", 1, stream=21)  # pinned, 1 B in 10 ns: size class 2^0
    b.copy(40, 40, "h2d", 1, stream=21)  # pinned, 1 B in 0 ns: no rate (a copy that took no time)
    b.copy(50, 51, "h2d", 2, stream=21)  # pinned, 2 B in 1 ns: size class 2^1
    b.copy(30, 40, "h2d", 0, stream=22, host=PAGEABLE)  # 0 B: size class 2^0, as 1 B
    b.copy(100, 1_000_100, "h2d", 1, stream=20, host=PAGEABLE)  # 1 B, alone on its stream
    (f,) = fired(findings_of(write_run(tmp_path, b)), "pageable-copies")
    assert f["replay"]["change"] == (
        "the 2 pageable copies of GPU 0 at pinned speed (2 at the trace's own pinned rate, 0 at the link's: "
        "PCIe Gen5 x16 at 63 GB/s, by the GPU's model)"
    )
    # class 2^0's rate is 1 B / 10 ns (the 0 ns copy left out; the 2 B copy is class 2^1): the 1 B copy
    # takes 10 ns, [100, 110) ns, the 0 B one 0 ns; no launches, each keeps its start.  The window
    # [0, 1000100) ns ends at 110 ns
    assert f["saving_ns"] == 1_000_100 - 110


def test_synchronous_calls_that_do_not_copy_are_not_changed(tmp_path):
    b = ExportBuilder()
    steps(b, [(100_000, 200_000)])
    corr = b.copy(151_000, 159_000, "d2h", MIB)
    b.runtime(150_000, 160_000, corr, name="cudaMemcpy_v3020", tid=TID)
    b.sync(170_000, "stream_sync", stream=7, tid=TID, duration=5_000)  # inside the step, copies nothing
    (f,) = fired(findings_of(write_run(tmp_path, b)), "sync-copies")
    # the one synchronous copy call inside the step; the stream synchronize is not a copy call
    assert f["evidence"]["calls"] == 1
    assert f["replay"]["change"] == "the 1 synchronous copy calls returning at once"


def test_as_many_kernel_groups_as_the_groups_table_has_columns(tmp_path):
    b = ExportBuilder()
    for j in range(8):  # 8 groups: as many as the table of groups has columns (name, grid, block, median)
        median_group(b, f"k{j}", j * 100_000)  # test_findings_saving.py's group, 100 us apart
    (f,) = fired(findings_of(write_run(tmp_path, b)), "kernels-slowed-by-copies")
    # each group's three kernels beside copies at its median alone, 1 us; no launches: each keeps its
    # start.  The last, k7's at [730, 731.5) us, ends the window at 731 us: 500 ns given back
    assert f["replay"]["change"] == "the 24 kernels of 8 group(s) on GPU 0 at their median alone"
    assert f["saving_ns"] == 500


def test_copies_at_the_steps_edges_by_a_stall_of_one_ns_and_from_row_0(tmp_path):
    b = ExportBuilder()
    # test_findings_saving.py's edges case, the h2d copy alone on stream 3 (stream order: the ops' row 0)
    edges_case(b, k0_stream=5, h2d_stream=3)
    launched(b, 9_500, "copy", 100_000, 100_010, "d2h", 1024, stream=23)  # just after the first edge
    b.event_record(9_600, 3, stream=23, tid=TID)
    b.stream_wait(9_700, 3, stream=24, tid=TID)
    launched(b, 99_999, "kernel", 100_010, 100_020, "k3", stream=24)  # stalled over [99999, 100010) ns
    (f,) = fired(findings_of(write_run(tmp_path, b)), "exposed-at-boundaries")
    # the step's GPU span is [0, 1000) us, its edges [0, 100) and [900, 1000) us.  Removed: the h2d copy
    # (row 0 of the ops: K stands stalled by it from 5 us, inside the first edge), the 1 ns copy (inside
    # the edge), and the copy just after the edge (k3 stands stalled by it from 99999 ns: 1 ns inside the
    # edge); not the one in the middle.  k3's stall lies inside K's: the cost is the edges case's, 95 of
    # 189 us at the edges; K starts at its launch, 5 us, and ends at 815 us: 185 us given back
    assert (f["evidence"]["at_boundaries_ns"], f["evidence"]["exposed_or_stalled_ns"]) == (95_000, 189_000)
    assert f["replay"]["change"] == "the 3 h2d/d2h copies at the steps' edges removed"
    assert (f["saving_ns"], f["saving_basis_ns"]) == (185_000, 1_000_000)


def test_an_op_without_a_launch_waits_for_no_copy_at_the_edges(tmp_path):
    b = ExportBuilder()
    steps(b, [(0, 1_000_000)])
    launched(b, 1_000, "kernel", 50_000, 1_000_000, "K")
    launched(b, 2_000, "copy", 0, 50_000, "h2d", MIB, stream=20)  # exposed, in the first edge
    launched(b, 3_000, "copy", 500_000, 500_010, "d2h", 1024, stream=21)  # in the middle, beside K
    b.event_record(4_000, 1, stream=21, tid=TID)
    b.stream_wait(5_000, 1, stream=22, tid=TID)
    b.kernel(500_010, 500_020, "k1", stream=22)  # waits for it; no launch call (made before the capture)
    (f,) = fired(findings_of(write_run(tmp_path, b)), "exposed-at-boundaries")
    # the step's GPU span is [0, 1000) us, its edges 100 us.  A wait applies to the first op on its stream
    # launched at or after it (METRICS.md "Stalls"): k1, without a launch, waits for nothing and stands
    # stalled by no copy (the reason a stall with no ready time never reaches at_edges); only the h2d
    # copy, inside the first edge, is removed
    assert f["replay"]["change"] == "the 1 h2d/d2h copies at the steps' edges removed"
