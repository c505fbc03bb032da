"""Steps and warm-up from XLA's module executions, with known answers."""

from __future__ import annotations

import polars as pl
import pytest

from profiler.analysis.breakdown import Breakdown, scan_family
from profiler.analysis.whatif import trace_whatif
from profiler.runs.result import analyze, run_summary
from profiler.synthetic.export import ExportBuilder
from profiler.trace import open_trace
from tests.helpers.cli import run_cli
from tests.helpers.xla_steps import PS, TSL, A, B, execution, new


def compile_range(b: ExportBuilder, t0: int, t1: int, module: str, pid_: int | None, tid: int = A) -> None:
    fields = f"module={module}" + (f",program_id={pid_}" if pid_ is not None else "")
    b.nvtx(t0, t1, f"XlaCompile:#{fields}#", tid=tid, domain_id=TSL)
    b.nvtx(t0 + 1, t1 - 1, f"XlaPass:#name=triton-autotuner,{fields}#", tid=tid, domain_id=TSL)


def steps_of(path) -> dict:
    return Breakdown(open_trace(path)).by_step()


def test_the_dominant_module_by_gpu_time_and_its_warmup(build):
    b = new()
    compile_range(b, 0, 10_000, "jit_train_step", 7)
    # the autotuner's trial run inside the compilation: heavy on the GPU, never a step
    execution(b, 2_000, "extracted", None, (2_000, 9_000))
    for i in range(4):  # the train step: 1 us of GPU per execution
        t = 20_000 + i * 10_000
        execution(b, t, "jit_train_step", 7, (t + 100, t + 1_100))
    for i in range(10):  # a small, frequent module: more executions, less GPU time
        t = 21_000 + i * 3_000
        execution(b, t, "jit_metrics", 9, (t + 200, t + 300))
    steps = steps_of(build(b))
    assert steps["source"] == "the executions of jit_train_step (program 7)"
    assert [s["name"] for s in steps["steps"]] == [f"jit_train_step#{i}" for i in range(4)]
    assert steps["excluded"] == [
        {"name": "jit_train_step#0", "reason": "warm-up: first execution after its compilation"}
    ]
    assert [s["duration_ns"] for s in steps["steps"]] == [1000] * 4  # projected onto the GPU
    assert steps["median_included_step_ns"] == 1000
    assert steps["source_note"] == (
        "jit_train_step (program 7): ran 4 times, the most GPU time of the programs that ran more than once "
        "(jit_metrics ran 10 times)"
    )


def test_an_execution_overlapping_its_modules_compilation_is_warmup(build):
    b = new()
    compile_range(b, 0, 5_000, "jit_step", 1, tid=B)  # compiled on another thread, while ...
    execution(b, 4_000, "jit_step", 1, (4_100, 4_600))  # ... this one already runs
    execution(b, 10_000, "jit_step", 1, (10_100, 10_600))
    compile_range(b, 11_000, 12_000, "jit_other", 3, tid=B)  # another module's compilation: no effect
    execution(b, 11_500, "jit_step", 1, (11_600, 12_100))
    steps = steps_of(build(b))
    assert [s["excluded"] for s in steps["steps"]] == ["warm-up: runs while jit_step compiles or autotunes", None, None]


def test_without_the_compilation_in_the_recording_every_execution_is_a_step(build):
    """Recorded after warm-up (a window, or nsys's own capture range): nothing says compile."""
    b = new()
    for i in range(3):
        execution(b, i * 1_000, "jit_step", 1, (i * 1_000 + 100, i * 1_000 + 600))
    steps = steps_of(build(b))
    assert [s["excluded"] for s in steps["steps"]] == [None, None, None]


def test_a_recompiled_program_is_its_own_group(build):
    """The same jitted function compiled again (new shapes): a new program_id, a new first run."""
    b = new()
    compile_range(b, 0, 1_000, "jit_step", None)  # XlaCompile with no program_id: by module name
    for i in range(2):
        execution(b, 2_000 + i * 1_000, "jit_step", 1, (2_100 + i * 1_000, 2_300 + i * 1_000))
    compile_range(b, 5_000, 6_000, "jit_step", 2)
    for i in range(3):
        execution(b, 7_000 + i * 1_000, "jit_step", 2, (7_100 + i * 1_000, 7_600 + i * 1_000))
    steps = steps_of(build(b))
    assert steps["source"] == "the executions of jit_step (program 2)"  # 3 x 500 ns of GPU against 2 x 200 ns
    assert [s["excluded"] is not None for s in steps["steps"]] == [True, False, False]
    assert steps["source_note"] == (
        "jit_step (program 2): ran 3 times (5 times with its other program), the most GPU time of its programs; "
        "jit_step also ran as another program twice: not the step"
    )


def test_annotations_win(build):
    b = new()
    for i in range(3):
        b.nvtx(i * 1_000, i * 1_000 + 900, f"step={i}", tid=A, domain_id=PS)
        execution(b, i * 1_000 + 10, "jit_step", 1, (i * 1_000 + 100, i * 1_000 + 600))
    path = build(b)
    assert steps_of(path)["source"] == "profile-step step=N ranges"
    bd = Breakdown(open_trace(path), step_range=r"^XlaModule:")
    assert bd.by_step()["source"] == "--step-range ^XlaModule:"
    assert len(bd.by_step()["steps"]) == 3


def test_no_xla_ranges_says_so(build):
    """A CPU run: XLA:CPU writes no NVTX, the user's own ranges are not steps."""
    b = new()
    for i in range(3):
        b.nvtx(i * 1_000, i * 1_000 + 900, f"train_step {i}", tid=A)
    path = build(b)
    steps = analyze(open_trace(path), by="step")["steps"]
    assert steps["steps"] == [] and steps["source"] is None
    assert "no XLA module ranges" in steps["source_note"] and "XLA:CPU emits no NVTX" in steps["source_note"]
    text = run_cli("analyze", "--by", "step", str(path)).stdout
    assert "No steps in this trace: no step=N ranges, no --step-range; no XLA module ranges" in text
    summary = run_summary(open_trace(path))
    assert summary["steps"] == 0 and summary["median_step_ns"] is None and summary["step_source"] is None


@pytest.mark.parametrize("kinds", [("copy",), ()])
def test_every_view_finds_the_same_steps(build, kinds):
    """Run summaries and rank tasks attribute fewer ops: the steps (and their spans) are the same."""
    b = new()
    compile_range(b, 0, 1_000, "jit_step", 1)
    for i in range(4):
        execution(b, 2_000 + i * 1_000, "jit_step", 1, (2_100 + i * 1_000, 2_400 + i * 1_000 + 10 * i))
    path = build(b)
    full = Breakdown(open_trace(path)).by_step(copies=False)
    less = Breakdown(open_trace(path), kinds=kinds).by_step(copies=False)
    assert less == full
    assert full["median_included_step_ns"] == 320


def test_scan_repeats_numbered_with_the_peeled_iteration(build):
    """Under a scan with double buffering, XLA peels the first iteration: ``fusion.3.peeled_double_buffer``
    is layer 0 of the same instruction, and the rest number on from it."""
    b = new()
    b.nvtx(0, 10_000, "XlaModule:#hlo_module=jit_step,program_id=1#", tid=A, domain_id=TSL)
    path = "jit(step)/jvp(decoder)/while/body/mlp"
    for i, op in enumerate(["fusion.3.peeled_double_buffer", "fusion.3", "fusion.3"]):
        t = 100 + i * 1_000
        b.nvtx(t, t + 500, f"Thunk:#name={path},hlo_op={op}#", tid=A, domain_id=TSL)
        corr = b.copy(t + 50, t + 450, "d2h", 100 * (i + 1))
        b.runtime(t + 10, t + 20, corr, name="cudaMemcpyAsync", tid=A)
    rows = {r["name"]: r for r in Breakdown(open_trace(build(b))).by_layer()}
    assert {n: r["copies"]["d2h"]["bytes"] for n, r in rows.items()} == {
        "decoder[0]": 100,
        "decoder[1]": 200,
        "decoder[2]": 300,
    }


def test_one_process_driving_two_gpus(build):
    """Each step runs once per GPU (one thread each): the k-th executions together are step k."""
    b = new()
    b.gpu(1)
    compile_range(b, 0, 1_000, "jit_step", 1)
    for i in range(3):
        for dev, tid, lag in ((0, A, 0), (1, B, 50)):
            t = 2_000 + i * 1_000 + lag
            b.nvtx(t, t + 100, "XlaModule:#hlo_module=jit_step,program_id=1#", tid=tid, domain_id=TSL)
            corr = b.copy(t + 100, t + 400 + 10 * dev, "d2h", 1000 * (dev + 1), device=dev)
            b.runtime(t + 10, t + 15, corr, name="cudaMemcpyAsync", tid=tid)
    path = build(b)
    steps = steps_of(path)
    assert [s["name"] for s in steps["steps"]] == ["jit_step#0", "jit_step#1", "jit_step#2"]
    assert [s["excluded"] is not None for s in steps["steps"]] == [True, False, False]  # both GPUs' first run
    s1 = steps["steps"][1]
    assert (s1["start_ns"], s1["end_ns"]) == (3_100, 3_460)  # from device 0's first op to device 1's last
    assert {d: c["d2h"]["bytes"] for d, c in s1["devices"].items()} == {"0": 1000, "1": 2000}
    # the what-if replays the same steps, per device
    doc = trace_whatif(open_trace(path), 0.5)
    assert [s["name"] for s in doc["devices"]["1"]["steps"]] == ["jit_step#0", "jit_step#1", "jit_step#2"]
    assert [s["measured_ns"] for s in doc["devices"]["1"]["steps"]] == [360, 360, 360]


MAXTEXT = "jit(train_step)/jvp(Transformer)"


def scanned_step(b: ExportBuilder, t0: int, trips: int) -> int:
    """One execution of a scanned decoder as MaxText's names it: the loop body's thunks name the scan
    by ``while/body``, ``decoder`` or ``decoder/layers``; forward iteration k moves 100*(k+1) bytes to
    the host, backward iteration j (layer trips-1-j) 10*(trips-j) back; the final norm after the loop
    (``decoder/decoder_norm``, once) moves 7 bytes and belongs to no layer."""
    b.nvtx(t0, t0 + 100_000, "XlaModule:#hlo_module=jit_train_step,program_id=3#", tid=A, domain_id=TSL)
    t = t0 + 100

    def thunk(path: str, op: str, copy: tuple[str, int] | None = None) -> None:
        nonlocal t
        b.nvtx(t, t + 80, f"Thunk:#name={path},hlo_op={op}#", tid=A, domain_id=TSL)
        if copy:
            corr = b.copy(t + 20, t + 70, copy[0], copy[1])
            b.runtime(t + 5, t + 10, corr, name="cudaMemcpyAsync", tid=A)
        else:
            corr = b.kernel(t + 20, t + 70, op)
            b.runtime(t + 5, t + 10, corr, name="cuLaunchKernel", tid=A)
        t += 100

    thunk(f"{MAXTEXT}/embed/take", "gather_fusion.1")
    b.nvtx(t, t + 80, "Thunk:#hlo_op=wrapped_slice.10#", tid=A, domain_id=TSL)  # no path, before the loop
    t += 100
    for k in range(trips):
        op = "dynamic_slice_fusion.2" + (".peeled_double_buffer" if k == 0 else "")
        thunk("jit(train_step)/while/body/dynamic_slice", op)
        thunk(f"{MAXTEXT}/decoder/while/body/layers/self_attention/query_proj", "gemm_fusion_dot.3")
        thunk(f"{MAXTEXT}/decoder/layers/mlp/wi", "gemm_fusion_dot.4")
        thunk(f"{MAXTEXT}/decoder/while/body/layers/mlpwi", "copy-start.5", ("d2h", 100 * (k + 1)))
        for _ in range(3):  # a loop inside the layer (chunked attention): 3 runs per iteration
            thunk(f"{MAXTEXT}/decoder/while/body/layers/attention/while/body/dot", "gemm_fusion_dot.13")
        # no op path, as a third of real thunks: the iteration it runs in is its layer
        b.nvtx(t, t + 80, "Thunk:#name=,hlo_op=copy-start.11#", tid=A, domain_id=TSL)
        corr = b.copy(t + 20, t + 70, "h2d", 1000 * (k + 1))
        b.runtime(t + 5, t + 10, corr, name="cudaMemcpyAsync", tid=A)
        t += 100
    thunk(f"{MAXTEXT}/decoder/decoder_norm/mul", "loop_multiply_fusion.6", ("d2h", 7))
    b.nvtx(t, t + 80, "Thunk:#hlo_op=wrapped_slice.12#", tid=A, domain_id=TSL)  # no path, after the loop body
    corr = b.copy(t + 20, t + 70, "h2d", 5)
    b.runtime(t + 5, t + 10, corr, name="cudaMemcpyAsync", tid=A)
    t += 100
    back = "jit(train_step)/transpose(jvp(Transformer))/decoder/while/body/layers"
    for j in range(trips):
        thunk(f"{back}/mlp/wi", "gemm_fusion_dot.7")
        thunk(f"{back}/mlpwi", "copy-start.8", ("h2d", 10 * (trips - j)))
    return t


@pytest.mark.parametrize("trips", [2, 5])
def test_a_scanned_decoder_is_one_family_of_its_iterations(build, trips):
    b = new()
    scanned_step(b, 0, trips)
    scanned_step(b, 200_000, trips)
    rows = {r["name"]: r for r in Breakdown(open_trace(build(b))).by_layer()}
    assert sorted(rows) == [f"decoder[{k}]" for k in range(trips)]  # not decoder, layers and while/body
    for k in range(trips):
        c = rows[f"decoder[{k}]"]["copies"]
        assert rows[f"decoder[{k}]"]["inferred_index"]
        assert (c["d2h"]["count"], c["d2h"]["bytes"]) == (2, 2 * 100 * (k + 1)), "outside the loop: no layer"
        # backward numbered in reverse; the unnamed copy of forward iteration k in layer k
        assert (c["h2d"]["count"], c["h2d"]["bytes"]) == (4, 2 * 10 * (k + 1) + 2 * 1000 * (k + 1))


def test_plain_lax_scan_in_a_jitted_loss(build):
    """``jax.lax.scan`` in plain JAX: ``jit(step)/jvp(loss)/while/body/...`` forward and
    ``transpose(jvp(loss))/while/body`` backward name no layer: one family ``scan`` of 3."""
    b = new()
    b.nvtx(0, 100_000, "XlaModule:#hlo_module=jit_step,program_id=1#", tid=A, domain_id=TSL)
    t = 100
    for direction, path, op in (
        ("d2h", "jit(step)/jvp(loss)/while/body/dot_general", "fusion.1"),
        ("h2d", "jit(step)/transpose(jvp(loss))/while/body/dot_general", "fusion.2"),
    ):
        for k in range(3):
            b.nvtx(t, t + 80, f"Thunk:#name={path},hlo_op={op}#", tid=A, domain_id=TSL)
            corr = b.copy(t + 20, t + 70, direction, 10 * (k + 1) if direction == "d2h" else 10 * (3 - k))
            b.runtime(t + 5, t + 10, corr, name="cudaMemcpyAsync", tid=A)
            t += 100
    rows = {r["name"]: r["copies"] for r in Breakdown(open_trace(build(b))).by_layer()}
    assert {n: (c["d2h"]["bytes"], c["h2d"]["bytes"]) for n, c in rows.items()} == {
        "scan[0]": (10, 10),
        "scan[1]": (20, 20),
        "scan[2]": (30, 30),
    }


def test_plain_lax_scan_without_a_layer_name():
    assert scan_family(pl.Series("layer", ["while/body", "while/body"])) == "scan"
    assert scan_family(pl.Series("layer", ["while/body", "decoder/layers", "layers", "decoder"])) == "layers"


# --- executions recorded by profile-step's start-up hook (profiler.capture.startup) ----------------


def hook_execution(b: ExportBuilder, t: int, dur: int, module: str) -> None:
    """One execution as the start-up hook records it: host time only, in profile-step's domain."""
    b.nvtx(t, t + dur, f"XlaModule:#hlo_module={module}#", tid=A, domain_id=PS)


def test_hook_executions_on_a_cpu_the_init_is_not_the_step(build):
    """No GPU, no XLA ranges: init runs once (long), the step and a helper 5 times each."""
    b = ExportBuilder()
    b.domain(PS, "profile-step", tid=A)
    hook_execution(b, 0, 90_000, "jit_init")
    for i in range(5):
        t = 100_000 + i * 10_000
        hook_execution(b, t, 2_000, "jit_update")
        hook_execution(b, t + 5_000, 500, "jit__reduce_sum")  # as often, less time: not the step
    steps = steps_of(build(b))
    assert steps["source"] == "the executions of jit_update, recorded by profile-step's start-up hook"
    assert [s["name"] for s in steps["steps"]] == [f"jit_update#{i}" for i in range(5)]
    assert [s["duration_ns"] for s in steps["steps"]] == [2_000] * 5  # host time: no GPU ops
    assert steps["source_note"] == (
        "jit_update: ran 5 times, as often as another, with the most host time "
        "(jit__reduce_sum ran 5 times, jit_init ran once)"
    )


def test_the_module_that_ran_most_often_on_a_cpu(build):
    b = ExportBuilder()
    b.domain(PS, "profile-step", tid=A)
    hook_execution(b, 0, 90_000, "jit_eval")
    hook_execution(b, 95_000, 1_000, "jit_eval")
    for i in range(3):
        hook_execution(b, 100_000 + i * 10_000, 2_000, "jit_update")
    steps = steps_of(build(b))
    assert steps["source"].startswith("the executions of jit_update,")  # 3 executions beat 2 longer ones
    assert steps["source_note"] == "jit_update: ran 3 times, the program that ran most often (jit_eval ran twice)"


def test_xla_module_ranges_win_over_the_hooks(build):
    """On a GPU both exist for the same executions: XLA's own count once, the hook's not at all."""
    b = new()
    hook_execution(b, 1_000, 5_000, "jit_init")  # init on the hook only: no XLA range, never a step
    for i in range(4):
        t = 20_000 + i * 10_000
        hook_execution(b, t - 5, 110, "jit_train_step")
        execution(b, t, "jit_train_step", 3, (t + 100, t + 1_100))
    steps = steps_of(build(b))
    assert steps["source"] == "the executions of jit_train_step (program 3)"
    assert len(steps["steps"]) == 4 and steps["source_note"] is None


def test_the_step_program_s_numbers_come_from_that_program_only():
    """Two programs of one name in the dump: the numbers are those of the program whose executions
    are the steps (by id), never the other's; a program the dump lacks gives none, and says so."""
    from profiler.analysis.policies import step_compiled
    from profiler.xla.step_program import StepProgram

    compiled = {
        "modules": [
            {"name": "jit_init", "id": 2, "label": "module_0002.jit_init", "cost": {"flops": 9e8}},
            {"name": "jit_update", "id": 7, "label": "module_0007.jit_update", "cost": {"flops": 2e6}},
            {"name": "jit_update", "id": 9, "label": "module_0009.jit_update", "cost": {"flops": 3e6}},
        ],
        "step_module": "module_0002.jit_init",
        "chosen_by": "the largest module in the dump",
    }
    step = StepProgram("jit_update", 7, 5, "jit_update (program 7): ran 5 times, the only program that ran")
    got = step_compiled(compiled, step)
    assert got["module"] == "module_0007.jit_update" and got["cost"] == {"flops": 2e6}
    assert got["chosen_by"] == step.sentence and got["step_program"] == "jit_update (program 7)"
    got = step_compiled(compiled, StepProgram("jit_update", 11, 5, "x"))
    assert got["module"] is None and got["cost"] is None
    assert "the run folder's XLA dump holds no module of jit_update (program 11)" in got["notes"]
    # no executions in the trace: the capture's choice (compiled.json's step_module, an older file)
    assert step_compiled(compiled)["module"] == "module_0002.jit_init"


def test_a_step_known_by_name_only_is_its_last_compiled_program_as_at_capture():
    """An older hook's ranges carry no program id: the step is matched by name to the last compiled
    program of that name (the highest id), as the capture matched it (step_module._dump_module),
    whatever the order of compiled.json's modules (the largest kept first, the programs that ran after)."""
    from profiler.analysis.policies import step_compiled
    from profiler.xla.step_program import StepProgram

    modules = [
        {"name": "jit_init", "id": 2, "label": "module_0002.jit_init", "cost": {"flops": 9e8}},
        {"name": "jit_update", "id": 9, "label": "module_0009.jit_update", "cost": {"flops": 3e6}},
        {"name": "jit_update", "id": 7, "label": "module_0007.jit_update", "cost": {"flops": 2e6}},
    ]
    got = step_compiled({"modules": modules}, StepProgram("jit_update", None, 5, "jit_update: ran 5 times"))
    assert got["module"] == "module_0009.jit_update" and got["cost"] == {"flops": 3e6}


def test_a_handed_over_step_that_never_ran_as_one_program_keeps_its_numbers():
    """examples/train.py --dispatch per-layer: it hands the fused step (jit_step, 49.4 M FLOPs) to
    annotate.compiled_step and runs it layer by layer (jit__lambda programs, one layer's backward
    14.2 M): the step's numbers are the handed-over program's, and the sentence says why."""
    from profiler.analysis.policies import step_compiled
    from profiler.xla.step_program import StepProgram

    modules = [
        {"name": "jit_step", "id": 32, "label": "module_0032.jit_step", "cost": {"flops": 49_437_664}},
        {"name": "jit__lambda", "id": 40, "label": "module_0040.jit__lambda", "cost": {"flops": 14_172_419}},
    ]
    compiled = {"modules": modules, "handed_over": {"module": "jit_step"}}
    ran = StepProgram("jit__lambda", 40, 6, "jit__lambda (program 40): ran 6 times, the program that ran most often")
    got = step_compiled(compiled, ran)
    assert got["module"] == "module_0032.jit_step" and got["cost"] == {"flops": 49_437_664}
    assert got["step_program"] == "jit_step (program 32)"
    assert got["chosen_by"] == (  # the same sentence for every run of the script: a note said once
        "jit_step (program 32): the step the script handed to annotate.compiled_step, which never ran as one program"
    )
    assert got["programs_ran"] == "jit__lambda (program 40): ran 6 times, the program that ran most often"
    # the handed-over name ran: the rule narrowed to it, and its own program's numbers stand
    got = step_compiled(compiled, StepProgram("jit_step", 32, 3, "jit_step (program 32): ran 3 times, x"))
    assert got["module"] == "module_0032.jit_step" and got["chosen_by"] == "jit_step (program 32): ran 3 times, x"
