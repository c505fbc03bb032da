"""profiler/xla: HLO text and protos, buffer assignments, the offload plan, dump folders.

Real inputs: HLO text in XLA's syntax with host buffers (../shared/hlo), after-
optimization HLO protos of a real Pax step on A100s (../shared/traces/jax-toolbox),
and HLO text and dumps the installed jaxlib produces here.
"""

from __future__ import annotations

import json
import lzma
import subprocess
import sys
import zipfile
from pathlib import Path

import polars as pl
import pytest

from profiler.analysis.offload_plan import by_layer, label
from profiler.capture import step_module
from profiler.xla import dump
from profiler.xla.buffers import device_bytes, memory_stats, parse_buffer_assignment
from profiler.xla.compiled import agreement, cost_analysis, describe
from profiler.xla.hlo import HloError, parse_text, remat_clones
from profiler.xla.plan import offload_plan, plan_note
from profiler.xla.proto import module_from_proto, read_bytes
from profiler.xla.shapes import ShapeError, parse_shape
from profiler.xla.step_program import choose
from profiler.xla.targets import TARGETS, peak_tflops, resolve
from tests.helpers.paths import SHARED_HLO

AOT = "aot_h100__two_layer_offload_step_after_opt.hlo.txt"


@pytest.fixture(scope="session")
def shared_hlo() -> Path:
    if not (SHARED_HLO / AOT).is_file():
        pytest.skip("../shared/hlo is absent")
    return SHARED_HLO


def hlo_file(shared_hlo: Path, name: str) -> str:
    return (shared_hlo / name).read_text()


# --- shapes -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "nbytes", "host"),
    [
        ("f32[256,4096]{1,0:S(5)}", 256 * 4096 * 4, True),
        ("f32[256,4096]{1,0}", 256 * 4096 * 4, False),
        ("bf16[8,32,64]{2,1,0:S(1)}", 8 * 32 * 64 * 2, False),
        ("f32[10,32,512]{2,1,0:T(8,128)S(5)}", 10 * 32 * 512 * 4, True),
        ("s32[]{:T(128)}", 4, False),
        ("f32[<=128,64]", 128 * 64 * 4, False),
        ("pred[3]", 3, False),
        ("token[]", 0, False),
    ],
)
def test_array_shapes(text, nbytes, host):
    s = parse_shape(text)
    assert s.bytes == nbytes
    assert s.on_host is host


def test_tuple_shapes_with_index_comments():
    s = parse_shape("(f32[1024]{0:S(5)}, f32[1024]{0}, /*index=2*/u32[], (s8[4], bf16[2,2]))")
    assert s.is_tuple and len(s.tuple) == 4
    assert s.element(0).on_host and not s.element(1).on_host
    assert s.bytes == 4096 + 4096 + 4 + 4 + 8
    assert [a.dtype for a in s.arrays()] == ["f32", "f32", "u32", "s8", "bf16"]


@pytest.mark.parametrize("bad", ["f33[2]", "f32[2", "(f32[2]", "f32[a,b]", "hello"])
def test_bad_shapes_raise_shape_error(bad):
    with pytest.raises(ShapeError):
        parse_shape(bad)


# --- HLO text with host buffers in XLA's real syntax (../shared/hlo) ---------------------------


REMAT_HLO = """HloModule jit_step, is_scheduled=true

fused_computation.remat {
  p0.remat = f32[4]{0} parameter(0)
  ROOT e.1 = f32[4]{0} exponential(p0.remat)
}

ENTRY main {
  p = f32[4]{0} parameter(0)
  fusion.3 = f32[4]{0} fusion(p), kind=kLoop, calls=fused_computation.remat
  fusion.3.remat2 = f32[4]{0} fusion(p), kind=kLoop, calls=fused_computation.remat
  not.remat.copy = f32[4]{0} copy(fusion.3.remat2)
  ROOT add.7 = f32[4]{0} add(fusion.3, not.remat.copy)
}
"""


def test_remat_clones_are_the_instructions_the_pass_named():
    """Clones end in .remat or .rematN; a name with .remat inside, or a computation's name, is no clone."""
    names = [i.name for i in remat_clones(parse_text(REMAT_HLO))]
    assert names == ["p0.remat", "fusion.3.remat2"]
    assert remat_clones(parse_text(REMAT_HLO.replace(".remat2", ".copy2").replace("p0.remat", "p0"))) == []


def test_aot_h100_step_plan(shared_hlo):
    """A two-layer step compiled for an H100: each layer's activation leaves by copy-start (S(5)
    destination) and comes back by copy-start; layers from the op_name of users/producers."""
    module = parse_text(hlo_file(shared_hlo, AOT), AOT)
    assert module.name == "jit_train_step" and module.scheduled and module.entry == "main.2"
    assert not module.notes and not module.truncated
    plan = label(offload_plan(module))
    moves = {m["instruction"]: m for m in plan["movements"]}
    assert set(moves) == {"copy-start.1.0", "copy-start.2.0", "copy-start.4", "copy-start.3.0"}
    assert {n: m["direction"] for n, m in moves.items()} == {
        "copy-start.1.0": "d2h",
        "copy-start.4": "d2h",
        "copy-start.2.0": "h2d",
        "copy-start.3.0": "h2d",
    }
    assert all(m["bytes"] == 256 * 4096 * 4 and m["executions_per_step"] == 1 for m in moves.values())
    assert all(m["queue"] == "1" for m in moves.values())  # the async copy stream
    assert {n: m["layer"] for n, m in moves.items()} == {
        "copy-start.1.0": "layer_1",
        "copy-start.2.0": "layer_1",
        "copy-start.4": "layer_0",
        "copy-start.3.0": "layer_0",
    }
    assert moves["copy-start.2.0"]["brings_back"] == "copy-start.1.0"
    assert moves["copy-start.1.0"]["done"] == "copy-done.1.0"
    assert plan["d2h_bytes_per_step"] == plan["h2d_bytes_per_step"] == 2 * 4 * 2**20
    assert plan["host_buffer_bytes"] == 2 * 4 * 2**20
    rows = by_layer(plan)
    assert [(r["layer"], r["d2h_bytes"], r["h2d_bytes"]) for r in rows] == [
        ("layer_0", 4 * 2**20, 4 * 2**20),
        ("layer_1", 4 * 2**20, 4 * 2**20),
    ]
    assert plan_note(plan) is None


def test_copy_start_done_fixture_old_printing(shared_hlo):
    """Operands printed with their shapes (older XLA): two offloads out, two back, 4 KiB each."""
    plan = offload_plan(parse_text(hlo_file(shared_hlo, "openxla-xla__gpu_offloading_copy_start_done.hlo.txt")))
    assert [(m["instruction"], m["direction"], m["bytes"]) for m in plan["movements"]] == [
        ("copy-start", "d2h", 4096),
        ("copy-start.2", "d2h", 4096),
        ("copy-start.3", "h2d", 4096),
        ("copy-start.1", "h2d", 4096),
    ]
    labelled = label(plan)
    assert all(m["layer"] is None for m in labelled["movements"])  # no op_name metadata at all


def test_async_dynamic_update_slice_into_host(shared_hlo):
    """TPU-style async wrapper: counted once, at the async-start, with the update's bytes."""
    plan = offload_plan(parse_text(hlo_file(shared_hlo, "openxla-xla__hlo_ordering_tpu_async_dus_to_host.hlo.txt")))
    (m,) = plan["movements"]
    assert (m["instruction"], m["opcode"], m["moved_by"]) == (
        "dynamic-update-slice-start",
        "async-start",
        "dynamic-update-slice.1",
    )
    assert (m["direction"], m["bytes"]) == ("d2h", 1 * 32 * 512 * 4)
    assert plan["host_buffers"][0]["kind"] == "entry parameter in host memory"


def test_dynamic_update_slice_start_on_gpu(shared_hlo):
    plan = offload_plan(parse_text(hlo_file(shared_hlo, "openxla-xla__stream_annotator_async_dus_to_host.hlo.txt")))
    (m,) = plan["movements"]
    assert (m["instruction"], m["direction"], m["bytes"]) == ("dynamic-update-slice-start.2", "d2h", 128 * 128 * 4)


def test_scan_offload_repeats_by_trip_count(shared_hlo):
    """A dynamic-update-slice into a host buffer inside a while body of known trip count 2."""
    name = "openxla-xla__memory_space_propagation_jit_loss_fn_scan_fwd_bwd.hlo.txt"
    plan = offload_plan(parse_text(hlo_file(shared_hlo, name)))
    (m,) = plan["movements"]
    assert m["instruction"] == "dynamic-update-slice.4"
    assert (m["bytes"], m["executions_per_step"], m["bytes_per_step"]) == (16, 2, 32)
    assert [b["kind"] for b in plan["host_buffers"]] == ["AllocateBuffer"]
    assert plan["host_buffer_bytes"] == 2 * 2 * 2 * 4


def test_module_before_optimization_is_not_a_plan(shared_hlo):
    plan = offload_plan(parse_text(hlo_file(shared_hlo, "openxla-xla__offload_scan_output_pre_opt.hlo.txt")))
    assert plan["movements"] == []
    assert plan["offload_requests"] == {"annotate_device_placement": 1}
    assert "before optimization" in plan_note(plan)


def test_excerpt_without_a_module_is_a_clear_error(shared_hlo):
    with pytest.raises(HloError, match="no HLO module"):
        parse_text(hlo_file(shared_hlo, "maxtext-pr1484__jit_train_step_sm90_after_opt_EXCERPT.hlo.txt"), "excerpt")


@pytest.mark.parametrize("fraction", [0.05, 0.2, 0.5, 0.77, 0.93, 0.999])
def test_truncated_hlo_keeps_what_came_before(shared_hlo, fraction):
    """Text cut anywhere: never an exception, a note saying so, and the plan up to the cut."""
    text = hlo_file(shared_hlo, AOT)
    cut = text[: int(len(text) * fraction)]
    module = parse_text(cut, "cut.hlo")
    assert module.truncated or module.entry is None
    assert any("truncated" in n or "no ENTRY" in n for n in module.notes)
    plan = offload_plan(module)
    full = offload_plan(parse_text(text))
    assert len(plan["movements"]) <= len(full["movements"])


def test_damaged_instruction_lines_become_notes():
    text = (
        "HloModule m\n\nENTRY %main (p: f32[4]) -> f32[4] {\n  %p = f32[4]{0} parameter(0)\n"
        "  %x = f32[4 garbage\n  ROOT %y = f32[4]{0} add(%p, %p)\n}\n"
    )
    module = parse_text(text)
    assert module.computations["main"].instructions[-1].name == "y"
    assert any("could not be read" in n for n in module.notes)


# --- HLO and dumps from the installed jaxlib ---------------------------------------------------

COMPILE_AND_DUMP = r"""
import json, sys
import jax, jax.numpy as jnp
from functools import partial

@partial(jax.jit, donate_argnums=0)
def step(w, x):
    loss, g = jax.value_and_grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
    return w - 0.1 * g, loss

w, x = jnp.ones((128, 256)), jnp.ones((64, 128))
c = step.lower(w, x).compile()
ma = c.memory_analysis()
fields = [f for f in dir(ma) if f.endswith("_in_bytes") and f != "peak_memory_in_bytes"]
cost = c.cost_analysis()
cost = cost[0] if isinstance(cost, list) else cost
print(json.dumps({"memory": {f: getattr(ma, f) for f in fields}, "flops": cost["flops"], "text": c.as_text()}))
"""


@pytest.fixture(scope="module")
def jaxlib_dump(tmp_path_factory) -> tuple[dict, Path]:
    """A donated training step compiled by the installed jaxlib, with its XLA dump."""
    pytest.importorskip("jax")
    out = tmp_path_factory.mktemp("dump")
    env = {"XLA_FLAGS": f"--xla_dump_to={out} --xla_dump_hlo_as_text", "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin"}
    proc = subprocess.run(
        [sys.executable, "-c", COMPILE_AND_DUMP], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), out


def test_jaxlib_text_parses(jaxlib_dump):
    doc, _ = jaxlib_dump
    module = parse_text(doc["text"])
    assert module.name == "jit_step" and module.entry and module.scheduled
    assert module.instruction_count > 5 and not module.notes
    assert plan_note(offload_plan(module)).startswith("the compiler placed nothing in host memory")


def test_buffer_assignment_gives_memory_analysis(jaxlib_dump):
    """Memory read from the dump's buffer assignment equals compiled.memory_analysis()."""
    doc, folder = jaxlib_dump
    (step,) = [m for m in dump.scan(folder) if m.name == "jit_step"]
    stats = memory_stats(parse_buffer_assignment(step.files["buffers"].read_text()))
    for field, value in doc["memory"].items():
        if field.endswith("generated_code_size_in_bytes"):
            continue  # not in a dump
        assert stats[field] == value, field
    assert stats["alias_size_in_bytes"] == 128 * 256 * 4  # the donated weights
    assert device_bytes(stats) == (
        stats["argument_size_in_bytes"]
        + stats["output_size_in_bytes"]
        - stats["alias_size_in_bytes"]
        + stats["temp_size_in_bytes"]
    )


def test_cost_analysis_of_dumped_text_equals_compiled(jaxlib_dump):
    doc, folder = jaxlib_dump
    (step,) = [m for m in dump.scan(folder) if m.name == "jit_step"]
    described = describe(step)
    assert described["cost"]["flops"] == doc["flops"]
    handed = {"memory": doc["memory"], "cost": {"flops": doc["flops"]}}
    assert agreement(handed, described) == {"compared": True, "agree": True, "differences": []}
    wrong = {"memory": {**doc["memory"], "temp_size_in_bytes": doc["memory"]["temp_size_in_bytes"] + 1}}
    assert not agreement(wrong, described)["agree"]


def test_cost_analysis_of_a_gpu_module(shared_hlo):
    """The GPU-compiled module's FLOPs (compiled.cost_analysis() gives None without a GPU):
    2 layers x (2 forward + 1 recomputed + 4 backward) matmuls of 2*256*1024*4096, plus elementwise."""
    pytest.importorskip("jaxlib")
    cost, why = cost_analysis(hlo_file(shared_hlo, AOT))
    assert why is None
    matmul = 2 * 256 * 1024 * 4096
    assert 14 * matmul <= cost["flops"] < 15.1 * matmul


def test_cost_analysis_of_garbage_is_a_note():
    pytest.importorskip("jaxlib")
    cost, why = cost_analysis("HloModule x\nENTRY %e { nonsense }")
    assert cost is None and why.startswith("no cost analysis")


# --- real protos: the Pax step of NVIDIA's nsys-jax test archive --------------------------------


@pytest.fixture(scope="module")
def pax_dump(shared_traces, tmp_path_factory) -> Path:
    archive = shared_traces / "jax-toolbox" / "NVIDIA__JAX-Toolbox__pax_fsdp4_4proc_proc0.zip"
    out = tmp_path_factory.mktemp("pax")
    with zipfile.ZipFile(archive) as z:
        for name in z.namelist():
            if name.startswith("dump/") and ("module_0040" in name or "module_0038" in name):
                z.extract(name, out)
    return out / "dump"


def test_pax_after_optimization_proto(pax_dump):
    path = pax_dump / "module_0040.pjit__wrapped_step_fn.sm_8.0_gpu_after_optimizations.hlo.pb.xz"
    module, allocs = module_from_proto(read_bytes(path), path.name)
    assert module.name == "pjit__wrapped_step_fn" and module.scheduled
    assert module.entry == "main.29748_spmd"
    assert module.instruction_count > 30_000
    entry = module.computations[module.entry].instructions
    assert entry[0].opcode == "parameter"
    assert "x_layers_0" in (entry[1].op_name or "")
    stats = memory_stats(allocs)
    assert stats["temp_size_in_bytes"] > 0 and stats["argument_size_in_bytes"] > 0
    assert stats["host_temp_size_in_bytes"] == 0
    plan = offload_plan(module)
    assert plan["movements"] == [] and "nothing in host memory" in plan_note(plan)


def test_pax_before_optimization_proto(pax_dump):
    path = pax_dump / "module_0040.pjit__wrapped_step_fn.before_optimizations.hlo.pb.xz"
    module, allocs = module_from_proto(read_bytes(path), path.name)
    assert module.name == "pjit__wrapped_step_fn" and not module.scheduled and allocs == []
    assert module.instruction_count > 20_000


def test_pax_dump_step_is_the_program_the_trace_ran(shared_traces, pax_dump):
    """The trace's XlaModule ranges name the step by program_id, the dump by module number."""
    from profiler.analysis.instruction_times import projection_spans

    archive = shared_traces / "jax-toolbox" / "NVIDIA__JAX-Toolbox__pax_fsdp4_4proc_proc0.zip"
    with zipfile.ZipFile(archive) as z, z.open("nvtx_gpu_proj_trace/trace.parquet") as fh:
        proj = pl.read_parquet(fh.read())
    step = projection_spans(proj)[2]
    assert (step.name, step.program_id) == ("pjit__wrapped_step_fn", 40)
    (mod,) = [m for m in dump.scan(pax_dump) if step.is_program(m.name, m.id)]
    assert mod.id == 40 and mod.label == "module_0040.pjit__wrapped_step_fn"
    described = describe(mod, with_cost=False)
    assert described["memory_source"].startswith("buffer assignment in the HLO proto")
    assert "needs the module's text" not in " ".join(described["notes"])  # with_cost=False: not asked


def test_truncated_and_garbage_protos(pax_dump, tmp_path):
    data = read_bytes(pax_dump / "module_0038.jit__psum.sm_8.0_gpu_after_optimizations.hlo.pb.xz")
    for cut in (5, len(data) // 3, len(data) - 7):
        with pytest.raises(HloError):
            module_from_proto(data[:cut], "cut")
    with pytest.raises(HloError):
        module_from_proto(b"\xff\xfe garbage \x00\x01", "garbage")
    bad = tmp_path / "x.hlo.pb.xz"
    bad.write_bytes(lzma.compress(b"")[:5])
    with pytest.raises(HloError, match=r"not a readable \.xz"):
        read_bytes(bad)


# --- dump folders -------------------------------------------------------------------------------


def test_dump_without_a_step_module_is_a_note(tmp_path):
    """A dump folder with nothing after optimization: compiled.json says so, nothing raises."""
    run = tmp_path / "run"
    (run / "xla_dump").mkdir(parents=True)
    (run / "xla_dump" / "module_0001.jit_f.before_optimizations.txt").write_text("HloModule jit_f\n")
    (run / "xla_dump" / "notes.txt").write_text("not XLA's")
    short = step_module.record(run, run / "xla_dump", own_dump=True)
    doc = json.loads((run / "compiled.json").read_text())
    assert short["step_module"] is None
    assert doc["chosen_by"] == "no compiled program ran, and the XLA dump holds none"
    assert any("handed no step" in n for n in doc["notes"])
    empty = tmp_path / "run2"
    empty.mkdir()
    short = step_module.record(empty, empty / "xla_dump", own_dump=True)
    assert any("holds no module" in n for n in short["notes"])


def test_dump_prune_keeps_only_what_is_read(tmp_path):
    d = tmp_path / "xla_dump"
    d.mkdir()
    names = [
        "module_0003.jit_step.before_optimizations.txt",
        "module_0003.jit_step.cpu_after_optimizations.txt",
        "module_0003.jit_step.cpu_after_optimizations-buffer-assignment.txt",
        "module_0003.jit_step.cpu_after_optimizations-memory-usage-report.txt",
        "module_0003.jit_step.cpu_after_optimizations-live-range.txt",
        "module_0003.jit_step.ir-with-opt.ll",
        "module_0001.jit_small.cpu_after_optimizations.txt",
    ]
    for n in names:
        (d / n).write_text("HloModule x\n" + ("x" * (100 if "small" in n else 1000)))
    (d / "module_0003.jit_step").mkdir()
    (d / "module_0003.jit_step" / "module.mlir").write_text("mlir")
    mods = dump.scan(d)
    assert [m.label for m in mods] == ["module_0001.jit_small", "module_0003.jit_step"]
    # nothing ran: the one rule takes the largest program of the dump, or the one the script named
    step = choose(step_module._programs(mods, []))
    assert step.name == "jit_step" and "the largest program in the XLA dump" in step.how
    step = choose(step_module._programs(mods, []), declared="jit_small")
    assert step.name == "jit_small" and "handed to annotate.compiled_step" in step.how
    dump.prune(d, [m for m in mods if m.name == "jit_step"])
    assert sorted(p.name for p in d.iterdir()) == sorted(names[1:4])


# --- targets ------------------------------------------------------------------------------------


def test_targets_and_peaks(tmp_path):
    label, spec, t = resolve("h100")
    assert label == "NVIDIA H100 80GB HBM3" and t is TARGETS["h100"]
    assert "core_count: 132" in spec and "major: 9" in spec
    own = tmp_path / "mine.txtpb"
    own.write_text(spec.replace("NVIDIA H100 80GB HBM3", "My GPU"))
    assert resolve(str(own))[0] == "My GPU"
    with pytest.raises(ValueError, match="unknown target"):
        resolve("h900")
    assert peak_tflops("NVIDIA H100 80GB HBM3") == 989.4
    assert peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert peak_tflops("cpu") is None


def test_handed_over_step_without_a_dump(shared_hlo, tmp_path):
    """--no-xla-dump: the plan comes from the HLO text the script wrote, memory and cost as handed over."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "compiled_step.hlo.txt").write_text(hlo_file(shared_hlo, AOT))
    handed = {"module": "jit_train_step", "memory": {"temp_size_in_bytes": 7}, "cost": {"flops": 9.0}}
    (run / "compiled_step.json").write_text(json.dumps({**handed, "hlo_file": "compiled_step.hlo.txt"}))
    short = step_module.record(run, None, own_dump=False)
    assert short["step_module"] == "jit_train_step (handed over)"
    doc = json.loads((run / "compiled.json").read_text())
    (entry,) = doc["modules"]
    assert len(entry["plan"]["movements"]) == 4
    assert entry["memory"] == handed["memory"] and entry["cost"] == handed["cost"]
    assert any("--no-xla-dump" in n for n in doc["notes"])
