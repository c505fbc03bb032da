"""XLA's own estimates of each kernel's time, read from a module compiled with
``--xla_gpu_collect_cost_model_stats`` (backend config ``reification_cost``), and where the prediction
takes them instead of the roofline (``roofline.with_xla``): worked out by hand on a small module."""

from __future__ import annotations

import pytest

from profiler.analysis.accuracy import ROOFLINE, XLA, of_costs
from profiler.capture.xla_flags import COST_MODEL_STATS, for_target_compile, parse
from profiler.predict import roofline, schedule
from profiler.xla.hlo import parse_text

# A GEMM, a fusion that reduces and a loop fusion, each with the estimates XLA writes (the fields in the
# order XLA prints them: its GpuPerformanceModel "", then named models); DEV prices a byte at 1 ns.
DEV = roofline.Device("T", matmul_flops=1e12, vector_flops=1e11, hbm_bytes_s=1e9, interconnect_bytes_s=1e9)


def cost(*models: tuple[str, float]) -> str:
    entries = ",".join(
        f'{{"end_to_end_cycles":1,"exec_time_us":{us},"compute_time_us":0,"memory_access_time_us":0,"name":"{m}"}}'
        for m, us in models
    )
    return f'backend_config={{"operation_queue_id":"0","reification_cost":[{entries}],"device_type":"X"}}'


def module(gemm: str, reduce: str, loop: str) -> str:
    return f"""HloModule m, is_scheduled=true

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

%fused_reduce (p: f32[8,100]) -> f32[8] {{
  %p = f32[8,100]{{1,0}} parameter(0)
  %z = f32[] constant(0)
  ROOT %r = f32[8]{{0}} reduce(%p, %z), dimensions={{1}}, to_apply=%add
}}

%fused_loop (q: f32[8,100]) -> f32[8,100] {{
  %q = f32[8,100]{{1,0}} parameter(0)
  ROOT %n = f32[8,100]{{1,0}} negate(%q)
}}

ENTRY %main (x: f32[8,100], w: f32[100,100]) -> (f32[8,100], f32[8], f32[8,100]) {{
  %x = f32[8,100]{{1,0}} parameter(0)
  %w = f32[100,100]{{1,0}} parameter(1)
  %dot = f32[8,100]{{1,0}} dot(%x, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, {gemm}
  %red = f32[8]{{0}} fusion(%dot), kind=kInput, calls=%fused_reduce, {reduce}
  %neg = f32[8,100]{{1,0}} fusion(%dot), kind=kLoop, calls=%fused_loop, {loop}
  ROOT %t = (f32[8,100]{{1,0}}, f32[8]{{0}}, f32[8,100]{{1,0}}) tuple(%dot, %red, %neg)
}}
"""


# the roofline of each (DEV: 1 ns a byte): dot 3200 + 40000 + 3200 bytes, the reduce 3200 + 32, the negate 6400
ROOF = {"dot": 46_400, "red": 3_232, "neg": 6_400}


def sched_of(text: str) -> schedule.Schedule:
    return schedule.build(parse_text(text))


def test_the_estimates_are_read_by_model_name():
    m = parse_text(module(cost(("", 99.5), ("sol", 60.0)), cost(("indexing-cost-model", 7.25)), "backend_config={}"))
    by = {i.name: i for c in m.computations.values() for i in c.instructions}
    assert by["dot"].xla_us == {"": 99.5, "sol": 60.0}
    assert by["red"].xla_us == {"indexing-cost-model": 7.25}
    assert by["neg"].xla_us == {} and by["x"].xla_us == {}


def test_a_gemm_takes_xlas_latency_estimate_and_a_reduction_its_indexing_model_the_rest_the_roofline():
    text = module(cost(("", 900.0), ("sol", 60.0)), cost(("", 50.0), ("indexing-cost-model", 7.25)),
                  cost(("", 30.0), ("sol", 30.0)))  # fmt: skip
    s = sched_of(text)
    roof = roofline.costs(s, DEV, xla=False)
    assert roof == ROOF
    got, taken = roofline.with_xla(s, roof)
    assert got == {"dot": 60_000, "red": 7_250, "neg": 6_400} and sorted(taken) == ["dot", "red"]
    assert roofline.costs(s, DEV) == got  # costs() takes them by default
    assert roofline.with_xla(s, roof, launch_ns=5)[0]["dot"] == 60_005  # a kernel's launch, as the roofline's
    assert roofline.costs(s, DEV, launch_ns=5)["dot"] == 60_005


@pytest.mark.parametrize(
    ("sol_us", "expected"),
    [
        (40.0, ROOF["dot"]),  # under the roofline (a lower bound on the peaks): the roofline
        (46.4, ROOF["dot"]),  # the roofline itself: the roofline's, not XLA's
        (185.6, 185_600),  # 4x the roofline: taken
        (185.7, ROOF["dot"]),  # beyond 4x (XLA_MAX_OVER_ROOFLINE): the roofline
    ],
)
def test_an_estimate_is_taken_between_the_roofline_and_four_times_it(sol_us, expected):
    s = sched_of(module(cost(("sol", sol_us)), "backend_config={}", "backend_config={}"))
    got, taken = roofline.with_xla(s, roofline.costs(s, DEV, xla=False))
    assert got["dot"] == expected and (taken == ["dot"]) == (expected != ROOF["dot"])


def test_a_module_without_estimates_is_the_roofline():
    s = sched_of(module("backend_config={}", "backend_config={}", "backend_config={}"))
    assert roofline.with_xla(s, roofline.costs(s, DEV, xla=False)) == (ROOF, [])
    # a GEMM that carries only XLA's GpuPerformanceModel's estimate (13-47x off on real GEMMs) keeps the roofline
    s = sched_of(module(cost(("", 50.0)), "backend_config={}", "backend_config={}"))
    assert roofline.with_xla(s, ROOF)[1] == []


def test_a_compile_for_a_target_asks_xla_for_its_estimates_unless_the_user_said():
    assert parse(for_target_compile(None)) == {COST_MODEL_STATS: "true"}
    assert parse(for_target_compile("--xla_dump_to=/d", ["--a=1"])) == {
        "--xla_dump_to": "/d", "--a": "1", COST_MODEL_STATS: "true"}  # fmt: skip
    assert for_target_compile(f"{COST_MODEL_STATS}=false") == f"{COST_MODEL_STATS}=false"
    assert for_target_compile(None, [f"{COST_MODEL_STATS}=false"]) == f"{COST_MODEL_STATS}=false"


def test_the_error_is_xlas_only_where_every_prediction_took_its_estimates():
    assert of_costs(["xla", "xla"]) is XLA
    assert of_costs(["xla", "roofline"]) is ROOFLINE and of_costs([]) is ROOFLINE and of_costs([None]) is ROOFLINE
    assert XLA.error_text() == "11-18% short" and XLA.tie == 0.01


def test_a_fit_carried_to_another_gpu_takes_xlas_estimates_its_own_gpu_keeps_its_scales():
    """``calibrated_costs``: a calibration from another GPU scales only what XLA gave no estimate of (its
    scale was measured on other kernels); on the fit's own GPU the measured scales win (the roofline x 2 here)."""
    import polars as pl

    from profiler.analysis.links import parse_link
    from profiler.predict.calibrate import Calibration, calibrated_costs
    from profiler.xla.targets import TARGETS

    # on the H100 the dot's roofline is 14 ns and the reduction's 1 ns: estimates of 3.6x and 3x them
    text = module(cost(("sol", 0.05)), cost(("indexing-cost-model", 0.003)), "backend_config={}")
    spec = TARGETS["h100"].spec_text()
    roof = roofline.costs(sched_of(text), roofline.device_from_spec(spec), xla=False)

    def fit(gpu: str) -> Calibration:
        return Calibration("run", "other", gpu, {}, {}, {"matmul": 2.0, "reduction": 2.0, "fusion": 2.0}, {},
                           pl.DataFrame(), parse_link("pcie5"), 1.0)  # fmt: skip

    _, costs, how = calibrated_costs(fit("NVIDIA A100-SXM4-40GB"), parse_text(text), spec, parse_link("pcie5"))
    assert (roof["dot"], roof["red"]) == (14, 1)
    assert (costs["dot"], costs["red"], costs["neg"]) == (50, 3, round(2 * roof["neg"]))
    assert (how["xla"], how["scaled"]) == (2, 1)
    _, costs, how = calibrated_costs(fit("NVIDIA H100 80GB HBM3"), parse_text(text), spec, parse_link("pcie5"))
    assert costs == {n: round(2 * ns) for n, ns in roof.items()} and "xla" not in how


def test_an_instruction_the_roofline_prices_at_nothing_takes_no_estimate():
    """A GEMM of no bytes and no FLOPs on this device (a zero-size dot): XLA's launch-sized estimate is not
    taken, whatever it is, and what has no estimate keeps the roofline (not 1 ns)."""
    s = sched_of(module(cost(("sol", 0.003)), "backend_config={}", "backend_config={}"))
    roof = {"dot": 0, "red": 0, "neg": 0}
    assert roofline.with_xla(s, roof) == (roof, [])


def test_each_instruction_is_looked_at_whatever_comes_before_it():
    """An instruction of no estimated class (the loop fusion) or without an estimate (this GEMM) before one
    with an estimate: the later one still takes XLA's."""
    text = module("backend_config={}", cost(("indexing-cost-model", 7.25)), "backend_config={}")
    lines = text.splitlines()
    red = next(i for i, line in enumerate(lines) if line.lstrip().startswith("%red ="))
    neg = next(i for i, line in enumerate(lines) if line.lstrip().startswith("%neg ="))
    lines[red], lines[neg] = lines[neg], lines[red]  # the loop fusion runs first, then the reduction
    s = sched_of("\n".join(lines))
    assert [op.name for op in s.ops if op.name in ROOF] == ["dot", "neg", "red"]
    assert roofline.with_xla(s, roofline.costs(s, DEV, xla=False)) == ({**ROOF, "red": 7_250}, ["red"])


def test_predict_file_says_a_module_with_estimates_was_costed_by_them(tmp_path):
    """plan's prediction of a compiled module that carries XLA's estimates: costed by them, and said so
    (``cost_model``, ``xla_costed``), which decides the error it prints."""
    from profiler.analysis.links import parse_link
    from profiler.predict.step import predict_file
    from profiler.xla.targets import TARGETS

    hlo = tmp_path / "step.hlo.txt"
    hlo.write_text(module(cost(("sol", 0.05)), cost(("indexing-cost-model", 0.003)), "backend_config={}"))
    doc = predict_file(hlo, TARGETS["h100"].spec_text(), [parse_link("pcie5")])
    assert (doc["cost_model"], doc["xla_costed"]) == ("xla", 2)
    (p,) = doc["predictions"]
    assert p["cost_model"] == "xla" and p["predicted_compute_ns"] >= 50 + 3  # the GEMM's 50 ns, the reduction's 3
