"""A command buffer's kernels go to the instructions that ran them (XLA's ``command_buffer_N``: one
CUDA graph of many instructions under one thunk range), so that the replay with a recording's own
durations places them instead of listing the whole graph as unplaced."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from profiler.analysis import instruction_times as it
from profiler.predict.from_recording import from_recording
from tests.helpers.paths import ROOT

H200 = ROOT / "sample_traces" / "h200-example"

# the program's ops in schedule order: (name, launches GPU work)
OPS = [
    ("p0", False),
    ("fusion.1", True),
    ("custom-call.2", True),  # a cuBLAS GEMM
    ("custom-call.2#0", False),
    ("fusion.3", True),  # the same computation as fusion.1: XLA runs it with fusion_1's kernel
    ("copy-start.4", True),  # a thunk of its own between the two command buffers
    ("fusion.5", True),  # its kernel named fusion_1 too, in the second command buffer
    ("custom-call.6", True),
    ("fusion.7", True),
    ("copy.8", True),  # a copy on the device: XLA's memcpy kernel
]
ORDER = it.ProgramOrder(
    names=[n for n, _ in OPS],
    position={n: i for i, (n, _) in enumerate(OPS)},
    launchers=np.array([i for i, (_, k) in enumerate(OPS) if k], dtype=np.int64),
)


def own_ops(executions: int = 1) -> pl.DataFrame:
    """export_ops' frame: two command buffers around a copy's thunk, each kernel as the graph ran it."""
    ranges = [
        ("command_buffer_1", ["fusion_1", "nvjet_gemm_a", "nvjet_gemm_b", "fusion_1", None]),
        ("copy-start.4", [None]),
        ("command_buffer_2", ["fusion_1", "nvjet_gemm_c", "fusion_7", "memcpy128"]),
    ]
    rows = []
    t, op_id, range_id = 0, 0, 0
    for execution in range(executions):
        for thunk, kernels in ranges:
            r_start = t
            for name in kernels:
                kind = "copy" if thunk.startswith("copy") else "kernel" if name else "memset"
                rows.append((op_id, range_id, execution, thunk, False, r_start, t, t + 10, kind, name))
                op_id, t = op_id + 1, t + 20
            range_id += 1
    return pl.DataFrame(
        rows,
        schema=["op_id", "range_id", "execution", "hlo_op", "parent", "r_start", "start", "end", "kind", "name"],
        orient="row",
    ).with_columns(pl.lit(None, pl.String).alias("cls"), pl.lit(None, pl.Int64).alias("bytes"))


def test_each_kernel_of_a_command_buffer_goes_to_its_instruction():
    out = it.inside_command_buffers(own_ops(), ORDER)
    assert out.columns == [*own_ops().columns, "_outside"]
    assert out["op_id"].to_list() == list(range(10))  # the rows as given
    assert out["hlo_op"].to_list() == [
        "fusion.1",  # named for it
        "custom-call.2",  # a library kernel: the custom call
        "custom-call.2",  # its second kernel: left over, with the op before
        "fusion.3",  # fusion_1's kernel again, after the GEMM: the next op in order, not fusion.1
        "command_buffer_1",  # a memset keeps the thunk
        "copy-start.4",  # an op of the program: untouched
        "fusion.5",  # after the copy's thunk: not back to fusion.1
        "custom-call.6",
        "fusion.7",
        "copy.8",  # a memcpy kernel: the copy, not a library call
    ]
    assert out["_outside"].to_list() == [True] * 5 + [False] + [True] * 4


def test_every_execution_is_aligned_on_its_own():
    one = it.inside_command_buffers(own_ops(), ORDER)["hlo_op"].to_list()
    assert it.inside_command_buffers(own_ops(3), ORDER)["hlo_op"].to_list() == one * 3


def test_spans_with_the_order_are_per_instruction_and_per_kernel():
    spans = it.spans_of(own_ops(), ORDER)
    per = dict(it.instruction_times(spans).select("hlo_op", "median_ns").iter_rows())
    assert per == {
        "fusion.1": 10.0,
        "custom-call.2": 20.0,  # two kernels of 10 ns, not the 30 ns from the first's start to the second's end
        "fusion.3": 10.0,
        "command_buffer_1": 10.0,  # the memset alone, not the graph from its first kernel to its last
        "copy-start.4": 10.0,
        "fusion.5": 10.0,
        "custom-call.6": 10.0,
        "fusion.7": 10.0,
        "copy.8": 10.0,
    }
    # without the order (no module at hand), a command buffer is one span from its first op to its last
    plain = dict(it.instruction_times(it.spans_of(own_ops())).select("hlo_op", "median_ns").iter_rows())
    assert plain == {"command_buffer_1": 90.0, "copy-start.4": 10.0, "command_buffer_2": 70.0}


RUNS = sorted(H200.glob("2026*-??????")) if H200.is_dir() else []


@pytest.mark.skipif(not RUNS, reason="no sample_traces/h200-example")
@pytest.mark.parametrize("run", RUNS, ids=[r.name.split("-", 1)[1].rsplit("-", 1)[0] for r in RUNS])
def test_the_h200_steps_replay_to_their_measured_step(run, tmp_path, monkeypatch):
    """The example's real H200 steps: the unrolled ones ran as command buffers (the whole step of
    `none` is command_buffer_1), once replayed as nothing (-100%) and now within 2%, every op placed."""
    monkeypatch.setenv("PROFILE_STEP_CACHE", str(tmp_path))
    doc = from_recording(run)
    replay = doc["replay"]
    assert abs(replay["error"]) < 0.02, replay["error"]
    assert replay["unplaced_ns"] < 0.02 * doc["measured_step_ns"]
    assert not any(u["name"].startswith("command_buffer") and u["ns"] > 1e6 for u in replay["unplaced"])


def test_a_loop_bodys_thunk_is_no_command_buffer():
    """A thunk of an instruction inside a loop's body (an instruction of the module, not an op of the
    entry) keeps its kernels, whatever they are called."""
    order = it.ProgramOrder(ORDER.names, ORDER.position, ORDER.launchers, frozenset({"body.fusion.9"}))
    own = own_ops().with_columns(
        pl.when(pl.col("hlo_op") == "command_buffer_2")
        .then(pl.lit("body.fusion.9"))
        .otherwise("hlo_op")
        .alias("hlo_op")
    )
    out = it.inside_command_buffers(own, order)
    assert out["hlo_op"].to_list()[-4:] == ["body.fusion.9"] * 4
    assert not any(out["_outside"].to_list()[-4:])


def test_kernels_and_thunks_go_by_time_not_by_their_ids():
    """Found by mutation testing: the same ops with their ids and their thunks' ids counted backwards
    (and the rows given last first) are aligned as they ran, each kernel to the same instruction."""
    own = own_ops()
    flipped = own.with_columns(
        (100 - pl.col("op_id")).alias("op_id"), (100 - pl.col("range_id")).alias("range_id")
    ).reverse()
    out = it.inside_command_buffers(flipped, ORDER)
    assert out["op_id"].to_list() == flipped["op_id"].to_list()  # the rows as given
    want = dict(zip(own["op_id"], it.inside_command_buffers(own, ORDER)["hlo_op"], strict=True))
    assert dict(zip(100 - out["op_id"], out["hlo_op"], strict=True)) == want


def test_without_a_command_buffer_nothing_changes():
    """Every thunk an op of the program (profile-step's own captures: command buffers off): the rows
    as given, each with its thunk's name."""
    own = own_ops().filter(pl.col("hlo_op") == "copy-start.4")
    out = it.inside_command_buffers(own, ORDER)
    assert out.drop("_outside").equals(own) and out["_outside"].to_list() == [False]


def test_a_command_buffer_with_nothing_to_align_keeps_its_name():
    """A program with no launching op to align with: every kernel keeps its command buffer's name."""
    order = it.ProgramOrder(ORDER.names, ORDER.position, np.array([], dtype=np.int64))
    out = it.inside_command_buffers(own_ops(), order)
    assert out["hlo_op"].to_list() == own_ops()["hlo_op"].to_list()


def test_a_kernel_before_the_first_match_keeps_its_command_buffers_name():
    """A kernel that runs before anything it could be (named for fusion.7, which comes later) keeps its
    thunk's name; the others are aligned as before (found by mutation testing: unaligned kernels given
    the window's second op)."""
    own = own_ops()
    early = own.filter(pl.col("op_id") == 0).with_columns(
        pl.lit(-1, pl.Int64).alias("op_id"), pl.lit("fusion_7").alias("name"), pl.lit(-5, pl.Int64).alias("start")
    )
    out = it.inside_command_buffers(pl.concat([early, own]), ORDER)
    assert out["hlo_op"].to_list() == ["command_buffer_1", *it.inside_command_buffers(own, ORDER)["hlo_op"]]


def test_an_op_that_ran_no_kernel_in_the_buffer_is_passed_over():
    """The second command buffer without its GEMM's kernel: custom-call.6 is skipped and the kernels
    after it still go to fusion.7 and copy.8 (found by mutation testing: alignment stopped there)."""
    own = own_ops().filter(pl.col("name").ne_missing("nvjet_gemm_c"))
    out = it.inside_command_buffers(own, ORDER)
    assert out["hlo_op"].to_list()[-3:] == ["fusion.5", "fusion.7", "copy.8"]


def test_a_lone_library_kernel_goes_to_the_custom_call_not_the_op_before_it():
    """A command buffer of one cuBLAS kernel, first in the step: its op is the custom call, though a
    fusion comes before it in the schedule (a library kernel's token is the custom call's)."""
    own = own_ops().filter(pl.col("op_id") == 1)
    assert it.inside_command_buffers(own, ORDER)["hlo_op"].to_list() == ["custom-call.2"]


def test_a_lone_memcpy_kernel_goes_to_the_device_copy():
    """A command buffer of one ``memcpy`` kernel after the copy's thunk: its op is the device copy, not
    the fusion first in its window (a memcpy kernel's token is a copy's)."""
    own = own_ops().filter(pl.col("hlo_op").eq("copy-start.4") | pl.col("name").eq("memcpy128"))
    assert it.inside_command_buffers(own, ORDER)["hlo_op"].to_list() == ["copy-start.4", "copy.8"]
