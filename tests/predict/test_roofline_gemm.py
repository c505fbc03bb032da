"""The roofline's cost of a cuBLAS GEMM custom call: what XLA makes of most dots when it compiles on a
real GPU (autotuning picks cuBLAS), where a deviceless compile keeps Triton GEMM fusions.  Before
these were counted, the real H200 step of sample_traces/h200-example had 4.4 TFLOP where its
matmuls do 85.8 (XLA's own cost analysis says 4.59: it does not count them either)."""

from __future__ import annotations

import json

import pytest

from profiler.predict import roofline, schedule
from profiler.xla.compiled import load_module
from profiler.xla.hlo import parse_text
from profiler.xla.targets import TARGETS
from tests.helpers.paths import ROOT

# the line as jaxlib 0.11.2 compiled the example's k projection on an H200 (backend config shortened
# to the fields the cost reads and the queue)
CFG = (
    '{"operation_queue_id":"0","gemm_backend_config":{"alpha_real":1,"dot_dimension_numbers":'
    '{"lhs_batch_dimensions":[],"lhs_contracting_dimensions":["1"],"rhs_batch_dimensions":[],'
    '"rhs_contracting_dimensions":["0"]},"epilogue":"DEFAULT","selected_algorithm":"5"}}'
)
MODULE = "\n".join(
    [
        "HloModule m, is_scheduled=true",
        "ENTRY %e (h: bf16[8192,4096], w: bf16[4096,4096]) -> bf16[8192,4096] {",
        "  %h = bf16[8192,4096]{1,0} parameter(0)",
        "  %w = bf16[4096,4096]{1,0} parameter(1)",
        "  %g = (bf16[8192,4096]{1,0}, s8[33554432]{0}) custom-call(%h, %w), "
        f'custom_call_target="__cublas$lt$matmul", backend_config={CFG}',
        "  ROOT %r = bf16[8192,4096]{1,0} get-tuple-element(%g), index=0",
        "}",
        "",
    ]
)
H200 = ROOT / "sample_traces" / "h200-example"


def test_a_cublas_gemm_costs_its_flops_and_not_its_workspace():
    """8192 x 4096 x 4096 x 2 = 274.9 GFLOP: 277.9 us at the H200's 989.4 TFLOP/s; its bytes (64 MiB +
    32 MiB read, 64 MiB written, not the 32 MiB workspace) take 35 us at 4.8 TB/s."""
    module = parse_text(MODULE)
    gemm = next(i for i in module.instructions() if i.name == "g")
    assert gemm.attrs == {"lhs_contracting_dims": "{1}", "lhs_batch_dims": "{}"}
    dev = roofline.device_from_spec(TARGETS["h200"].spec_text(), TARGETS["h200"].peak_bf16_tflops)
    c = roofline.Costs(module, dev)
    flops = 2 * 8192 * 4096 * 4096
    assert c.flops(gemm) == (flops, 0.0, flops)
    assert c.hbm_bytes(gemm) == (8192 * 4096 + 4096 * 4096 + 8192 * 4096) * 2
    assert roofline.costs(schedule.build(module), dev)["g"] == pytest.approx(flops / 989.4e12 * 1e9, abs=1)
    batched = parse_text(MODULE.replace('"lhs_batch_dimensions":[]', '"lhs_batch_dimensions":["0"]'))
    assert next(i for i in batched.instructions() if i.name == "g").attrs["lhs_batch_dims"] == "{0}"


@pytest.mark.skipif(not H200.is_dir(), reason="no sample_traces/h200-example")
def test_the_real_h200_step_does_the_model_flops_of_its_formula():
    """examples/train.py's own count (3 x tokens x (layers x (8 d^2 + 4 d ffn + 4 seq d) + 2 d vocab))
    against the optimized HLO XLA compiled on the H200 for the policy that recomputes nothing."""
    run = next(p for p in H200.iterdir() if p.name.split("-", 1)[1].startswith("none-"))
    module = load_module(next((run / "xla_dump").glob("*after_optimizations.txt.xz")))[0]
    spec = next((run / "xla_dump").glob("*gpu_target_config.pbtxt")).read_text()
    totals = roofline.totals(schedule.build(module), roofline.device_from_spec(spec))
    model = json.loads((run / "manifest.json").read_text())["runtime"]["model_flops_per_step"]
    assert model == 85_813_446_574_080 and totals["matmul_flops"] == model


def test_a_run_folder_counts_the_flops_xla_leaves_out(tmp_path):
    """compiled.json of a module with GEMM custom calls: its FLOPs counted from the HLO, XLA's figure beside."""
    from profiler.capture.step_module import counted_flops
    from profiler.xla import dump
    from profiler.xla.compiled import describe

    (tmp_path / "module_0001.jit_step.sm_9.0a_gpu_after_optimizations.txt").write_text(MODULE)
    [mod] = dump.scan(tmp_path)
    entry = describe(mod, with_cost=False)
    entry["cost"] = {"flops": 0.0, "bytes accessed": 1.0}  # what XLA's cost analysis says of a GEMM custom call
    counted_flops([entry], [mod])
    assert entry["cost"] == {"flops": 2 * 8192 * 4096 * 4096, "xla_flops": 0.0, "bytes accessed": 1.0}
    assert entry["notes"][-1] == (
        "FLOPs counted from the HLO (274.88 G): XLA's cost analysis leaves out its 1 cuBLAS GEMM custom calls "
        "(it says 0)"
    )
    plain = describe(mod, with_cost=False)  # no GEMM: XLA's own count stands
    (tmp_path / "module_0001.jit_step.sm_9.0a_gpu_after_optimizations.txt").write_text(
        MODULE.replace('custom_call_target="__cublas$lt$matmul"', 'custom_call_target="my_kernel"')
    )
    [mod] = dump.scan(tmp_path)
    plain["cost"] = {"flops": 5.0}
    counted_flops([plain], [mod])
    assert plain["cost"] == {"flops": 5.0}


@pytest.mark.skipif(not H200.is_dir(), reason="no sample_traces/h200-example")
def test_the_h200_runs_carry_the_counted_flops():
    for run in (p for p in H200.iterdir() if (p / "compiled.json").is_file()):
        compiled = json.loads((run / "compiled.json").read_text())
        [step] = [m for m in compiled["modules"] if m["label"] == compiled["step_module"]]
        module = load_module(next((run / "xla_dump").glob("*after_optimizations.txt.xz")))[0]
        t = roofline.totals(schedule.build(module), roofline.Device("count", 1.0, 1.0, 1.0, 1.0))
        assert step["cost"]["flops"] == t["matmul_flops"] + t["other_flops"] > 80e12
