"""Issue 42 on a second accelerator: the TPU v5e recordings of ``sample_traces/tpu-v5e-example``
(``benchmarks/tpu_record.sh``: ``examples/train.py`` per policy, scanned and unrolled) through
``plan --from``, and the pieces of TPU HLO they need, on small built texts with known answers.

The recordings are skipped where the folder is absent; the built texts always run.
"""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import pytest

from profiler.analysis.accuracy import TPU_CALIBRATED, TPU_ROOFLINE
from profiler.predict import calibrate, roofline, schedule, tpu_trace
from profiler.predict.from_recording import from_recording
from profiler.predict.measured import load
from profiler.predict.simulate import simulate
from profiler.trace.jax_profile import find_tpu
from profiler.xla.hlo import parse_text
from profiler.xla.targets import TPU_TARGETS
from tests.helpers.paths import ROOT
from tests.helpers.replay_checks import REPLAY_GOAL, prediction_broken

SAMPLES = ROOT / "sample_traces"
# two models on the chip: the example at d_model 2048 (the calibration is fitted on its scanned remat run)
# and the H200 example's own step (d_model 4096): the second checks the fit on another model
TPU_FOLDERS = ("tpu-v5e-example", "tpu-v5e-h200-shape")
FIT = "tpu-v5e-example/20261206T015127-remat-scan-9e629c"
ROOFLINE_GOAL = 0.25  # issue 42: the uncalibrated roofline within 25% of a real step
CALIBRATED_GOAL = 0.15  # calibrated on one run, predicted on another, within 15%
T = "{3,2,1,0:T(8,128)(2,1)}"
HOST = "{3,2,1,0:T(8,128)(2,1)S(5)}"
# a scanned loop of 8 trips on a TPU: the condition compares the counter to 8 (no known_trip_count), its
# body offloads a 4 MiB slice to host memory (S(5)) through an async dynamic-update-slice pair; a
# batched matmul written as a TPU writes it (the batch as a dilated convolution window); VMEM (S(1))
TPU_HLO = f"""HloModule jit_step, is_scheduled=true

%dus_comp (a: bf16[8,2,1024,1024], b: bf16[1,2,1024,1024], i: s32[]) -> bf16[8,2,1024,1024] {{
  %a = bf16[8,2,1024,1024]{HOST} parameter(0)
  %b = bf16[1,2,1024,1024]{T} parameter(1)
  %i = s32[]{{:T(128)}} parameter(2)
  %z = s32[]{{:T(128)}} constant(0)
  ROOT %d = bf16[8,2,1024,1024]{HOST} dynamic-update-slice(%a, %b, %i, %z, %z, %z)
}}

%body (p: (s32[], bf16[8,2,1024,1024], bf16[1,2,1024,1024])) -> (s32[], bf16[8,2,1024,1024], bf16[1,2,1024,1024]) {{
  %p = (s32[]{{:T(128)}}, bf16[8,2,1024,1024]{HOST}, bf16[1,2,1024,1024]{T}) parameter(0)
  %i = s32[]{{:T(128)}} get-tuple-element(%p), index=0
  %c = s32[]{{:T(128)}} copy(%i)
  %buf = bf16[8,2,1024,1024]{HOST} get-tuple-element(%p), index=1
  %x = bf16[1,2,1024,1024]{T} get-tuple-element(%p), index=2
  %y = bf16[1,2,1024,1024]{T} negate(%x)
  %dus-start = ((bf16[8,2,1024,1024]{HOST}, bf16[1,2,1024,1024]{T}, s32[]{{:T(128)}}),
      bf16[8,2,1024,1024]{HOST}, u32[]{{:S(2)}}) async-start(%buf, %y, %c), calls=%dus_comp
  %one = s32[]{{:T(128)}} constant(1)
  %next = s32[]{{:T(128)}} add(%c, %one)
  %dus-done = bf16[8,2,1024,1024]{HOST} async-done(%dus-start)
  ROOT %t = (s32[]{{:T(128)}}, bf16[8,2,1024,1024]{HOST}, bf16[1,2,1024,1024]{T}) tuple(%next, %dus-done, %y)
}}

%cond (p: (s32[], bf16[8,2,1024,1024], bf16[1,2,1024,1024])) -> pred[] {{
  %p = (s32[]{{:T(128)}}, bf16[8,2,1024,1024]{HOST}, bf16[1,2,1024,1024]{T}) parameter(0)
  %n = s32[]{{:T(128)}} constant(8)
  %i = s32[]{{:T(128)}} get-tuple-element(%p), index=0
  ROOT %lt = pred[]{{:T(512)}} compare(%i, %n), direction=LT
}}

%mm (q: bf16[8,16,1024,128], k: bf16[8,16,1024,128]) -> bf16[8,16,1024,1024] {{
  %q = bf16[8,16,1024,128]{T} parameter(0)
  %k = bf16[8,16,1024,128]{T} parameter(1)
  ROOT %s = bf16[8,16,1024,1024]{{3,2,1,0:T(8,128)(2,1)S(1)}} convolution(%q, %k),
      window={{size=8x16 stride=7x15 lhs_dilate=8x16}}, dim_labels=01bf_01oi->01bf
}}

ENTRY %main (x: bf16[1,2,1024,1024], q: bf16[8,16,1024,128]) -> bf16[8,16,1024,1024] {{
  %x = bf16[1,2,1024,1024]{T} parameter(0)
  %q = bf16[8,16,1024,128]{T} parameter(1)
  %zero = s32[]{{:T(128)}} constant(0)
  %z = s32[]{{:T(128)}} copy(%zero)
  %host = bf16[8,2,1024,1024]{HOST} custom-call(), custom_call_target="AllocateBuffer"
  %in = (s32[]{{:T(128)}}, bf16[8,2,1024,1024]{HOST}, bf16[1,2,1024,1024]{T}) tuple(%z, %host, %x)
  %loop = (s32[]{{:T(128)}}, bf16[8,2,1024,1024]{HOST}, bf16[1,2,1024,1024]{T}) while(%in), condition=%cond, body=%body
  ROOT %scores = bf16[8,16,1024,1024]{{3,2,1,0:T(8,128)(2,1)S(1)}} fusion(%q, %q), kind=kOutput, calls=%mm
}}
"""


def test_tpu_layouts_loops_and_offloads_are_read():
    """Tiles and memory spaces in TPU layouts, a loop's trips from its condition, the async
    dynamic-update-slice into S(5) as a device-to-host copy of its slice's bytes, once per trip."""
    m = parse_text(TPU_HLO)
    assert m.notes == []
    loop = next(i for i in m.instructions() if i.opcode == "while")
    assert (loop.trip_count, loop.trip_count_from) == (8, "condition")
    host = next(i for i in m.instructions() if i.name == "host")
    assert (host.shape.dims, host.shape.memory_space, host.shape.on_host) == ((8, 2, 1024, 1024), 5, True)
    s = schedule.build(m)
    starts = [o for o in s.ops if o.kind == "start"]
    assert [(o.stream, o.bytes, o.iteration) for o in starts] == [("d2h", 2 * 1024 * 1024 * 2, k) for k in range(8)]
    assert next(o for o in s.ops if o.name == "host").kind == "free"  # AllocateBuffer runs nothing
    assert s.runs["y"] == 8 and s.runs["scores"] == 1


@pytest.mark.parametrize(
    ("cond", "init", "step", "trips"),
    [("compare(%i, %n), direction=LT", 0, 1, 8), ("compare(%n, %i), direction=GT", 0, 1, 8),
     ("compare(%i, %n), direction=LE", 0, 2, 5), ("compare(%i, %n), direction=LT", 3, 1, 5),
     ("compare(%i, %i), direction=LT", 0, 1, None), ("compare(%i, %n), direction=NE", 0, 1, None)],
)  # fmt: skip
def test_a_trip_count_is_read_from_the_condition_or_left_unknown(cond, init, step, trips):
    text = (
        TPU_HLO.replace("compare(%i, %n), direction=LT", cond)
        .replace("%zero = s32[]{:T(128)} constant(0)", f"%zero = s32[]{{:T(128)}} constant({init})")
        .replace("%one = s32[]{:T(128)} constant(1)", f"%one = s32[]{{:T(128)}} constant({step})")
    )
    loop = next(i for i in parse_text(text).instructions() if i.opcode == "while")
    assert loop.trip_count == trips


def test_a_tpu_batched_matmul_counts_one_tap_per_batch_window_and_vmem_is_no_hbm_traffic():
    """``01bf_01oi->01bf`` with an 8x16 window dilated over the batch: 8 x 16 matmuls of
    1024 x 128 x 1024, 2 x 8 x 16 x 1024 x 1024 x 128 FLOPs (not 128 times that); its VMEM result
    is not counted against HBM, its two operands are."""
    m = parse_text(TPU_HLO)
    s = schedule.build(m)
    device = roofline.device_from_spec(TPU_TARGETS["tpu-v5e"].spec_text())
    c = roofline.Costs(m, device)
    ins = s.instructions["scores"]
    assert c.flops(ins)[2] == 2 * 8 * 16 * 1024 * 1024 * 128
    assert c.hbm_bytes(ins) == 2 * 8 * 16 * 1024 * 128 * 2
    assert (device.matmul_flops, device.hbm_bytes_s) == (197e12, 819e9)


def _event(name: str, cat: str, off_ps: int, dur_ps: int, tid: int = 3) -> dict:
    args = {"device_offset_ps": str(off_ps), "device_duration_ps": str(dur_ps), "hlo_category": cat}
    return {"ph": "X", "pid": 3, "tid": tid, "ts": off_ps / 1e6, "dur": dur_ps / 1e6, "name": name, "args": args}


def test_a_tpu_trace_gives_a_loop_its_own_time_only(tmp_path):
    """A ``while`` event spans its body's ops: its own time is the rest (10 ns here), nothing counted twice."""
    meta = [{"ph": "M", "pid": 3, "name": "process_name", "args": {"name": "/device:TPU:0"}},
            *({"ph": "M", "pid": 3, "tid": t, "name": "thread_name", "args": {"name": n}}
              for t, n in ((2, "XLA Modules"), (3, "XLA Ops")))]  # fmt: skip
    ops = [("fusion.1", 0, 100_000), ("while.2", 100_000, 810_000), ("fusion.3", 100_000, 400_000),
           ("fusion.3", 500_000, 400_000), ("fusion.4", 910_000, 90_000)]  # fmt: skip
    ev = [_event("jit_step(1)", "", 0, 1_000_000, tid=2),
          *(_event(n, "while" if n.startswith("while") else "loop fusion", o, d) for n, o, d in ops)]  # fmt: skip
    path = tmp_path / "host.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": meta + ev}).encode()))
    assert find_tpu(tmp_path) == path
    t = tpu_trace.read(path)
    own = dict(zip(t.ops["hlo_op"], t.ops["self_ns"], strict=False))
    assert own["while.2"] == 10 and own["fusion.1"] == 100
    spans, execs, name = tpu_trace.spans(t)
    assert name == "jit_step" and execs["duration_ns"].to_list() == [1000.0]
    assert int((spans["end"] - spans["start"]).sum()) == 1000  # the serial line tiles the execution


# --- the real recordings ----------------------------------------------------------------------------


def _runs() -> list[Path]:
    """The recordings with a trace in either folder (none where the folders are absent)."""
    return sorted(p for f in TPU_FOLDERS for p in (SAMPLES / f).glob("2026*") if (p / "trace.json.gz").is_file())


@pytest.fixture(scope="module")
def tpu_measured() -> dict:
    runs = _runs()
    if not runs:
        pytest.skip("sample_traces holds no TPU recording")
    return {f"{p.parent.name}/{p.name}": load(p) for p in runs}


def test_each_tpu_recording_replays_to_its_step_keeping_the_rules(tpu_measured):
    """Every op placed (the ops with no event in the trace are the core's scalar counter arithmetic,
    each at 0 ns and named in a note), no stream running two ops at once, loops replayed body x trips,
    the replay never shorter than the serial line's measured work, within 5% of the measured step."""
    for name, m in tpu_measured.items():
        sched = schedule.build(m.module)
        costs = calibrate.measured_costs(m)
        p = simulate(sched, costs, None, timeline=True)
        assert prediction_broken(sched, costs, p) == [], name
        assert p.unplaced == [], name
        untimed = {o.name for o in sched.ops if o.kind in ("compute", "start") and o.name not in costs}
        assert all(not sched.instructions[n].shape.dims for n in untimed), name  # scalars only
        assert (p.costed_by["missing"] == 0) == (not untimed), name
        # the serial line's measured work, less the async starts (the replay issues their work beside
        # the core: the trace gives each a few ns on the line)
        kinds = {o.name: o.kind for o in sched.ops}
        line = sum(costs[n] * k for n, k in sched.runs.items() if n in costs and kinds[n] != "start")
        starts = sum(costs[n] * k for n, k in sched.runs.items() if n in costs and kinds[n] == "start")
        assert p.step_ns >= line and starts < 1e-4 * m.step_ns, name
        for r in p.regions:
            assert r["replayed"] == "body" and r["trips"] in (4, 8) and r["ns"] > 0, name
        assert abs(p.step_ns / m.step_ns - 1) <= REPLAY_GOAL, name
        assert m.gpu == "TPU v5 lite", name


def test_the_roofline_and_a_calibration_from_another_run_reach_the_goals(tpu_measured):
    """The uncalibrated roofline on the TPU v5e's spec within 25% of each measured step, and never
    above it (the spec's peaks are upper bounds); calibrated on the scanned remat run and applied to
    every other program (their own measured durations never used) within 15%."""
    spec = TPU_TARGETS["tpu-v5e"].spec_text()
    fit = FIT  # 8 layers, scanned, d_model 2048
    cal = calibrate.calibrate(tpu_measured[fit], spec)
    got: dict[str, tuple[float, float, float]] = {}  # name -> measured, roofline, calibrated
    for name, m in tpu_measured.items():
        link = from_recording_link(m)
        sched = schedule.build(m.module)
        roof = simulate(sched, roofline.costs(sched, roofline.device_from_spec(spec)), link).step_ns
        assert -ROOFLINE_GOAL <= roof / m.step_ns - 1 <= 0.0, (name, roof, m.step_ns)
        s, costs, how = calibrate.calibrated_costs(cal, m.module, spec, link)
        if name != fit:
            assert how["measured"] == 0, name  # another program: the class scales only
        got[name] = (m.step_ns, roof, simulate(s, costs, link).step_ns)
        err = got[name][2] / m.step_ns - 1
        assert abs(err) <= CALIBRATED_GOAL, (name, err)
    # the errors analysis.accuracy states for a TPU hold: each step, and the ratio of two of one form
    for k, acc in ((1, TPU_ROOFLINE), (2, TPU_CALIBRATED)):
        runs = {n: v for n, v in got.items() if k == 1 or n != fit}
        for n, v in runs.items():
            assert acc.step_low <= v[k] / v[0] - 1 <= acc.step_high, (acc.kind, n)
        for a, b in itertools.combinations(runs, 2):
            if _form(a) == _form(b):
                ratio = (runs[a][k] / runs[b][k]) / (runs[a][0] / runs[b][0]) - 1
                assert abs(ratio) < acc.tie, (acc.kind, a, b, ratio)


def _form(name: str) -> str:
    """The model (the folder) and its form, scanned 8 layers, scanned 4 or unrolled: the program shapes
    a tie is measured within (a policy decision compares policies of one model)."""
    form = "scan-l4" if "-scan-l4-" in name else "scan" if "-scan-" in name else "unrolled"
    return f"{name.split('/')[0]}:{form}"


def from_recording_link(m):
    from profiler.analysis.links import host_link

    link = host_link([m.gpu]).link
    assert link.key == "tpu-v5e-host"
    return link


def test_plan_from_a_tpu_run_folder(tpu_measured):
    """``plan --from`` on a TPU run folder: the replay, the roofline and the prediction, each with its error."""
    name = next(iter(tpu_measured))
    doc = from_recording(SAMPLES / name)
    assert doc["gpu"] == "TPU v5 lite" and doc["replay"]["unplaced_ns"] == 0
    assert abs(doc["replay"]["error"]) <= REPLAY_GOAL and abs(doc["roofline"]["error"]) <= ROOFLINE_GOAL
    assert [r["replayed"] for r in doc["replay"]["regions"]] in ([], ["body", "body"])
    assert doc["predicted"][0]["link"] == "TPU v5e host link as measured"
    assert doc["roofline"]["expected_error"] == TPU_ROOFLINE.error_text() == "3-20% short"
    assert doc["accuracy"]["calibrated"] == TPU_CALIBRATED.line()


def test_plan_from_prices_a_tpu_runs_copies_at_its_link_not_at_their_spans(tpu_measured):
    """On its own chip and link, ``plan --from`` predicts each offloading run within 2% of its step, and
    prints that error: a TPU transfer's span (async start to the end of its done) is no transfer time,
    so its copies are priced at the chip's host link, never at bytes over spans (which priced the H200
    shape's unrolled offload_qkv at 2.03 s against 885 ms measured, and its scanned one at 1.59 s
    against 975)."""
    for name in tpu_measured:
        if "-offload_" not in name:
            continue
        (p,) = from_recording(SAMPLES / name)["predicted"]
        assert p["link"] == "TPU v5e host link as measured" and p["expected_error"] is not None, name
        assert abs(p["error"]) <= 0.02, (name, p["error"])


def test_plan_froms_op_classes_are_per_step(tpu_measured):
    """The per-class table counts a loop body's ops once per trip: a recording without copies (remat,
    scanned and unrolled) has its classes hold the whole step, less the few ops no class costs (it
    held an eighth of the scanned step when each body op counted once)."""
    for name in tpu_measured:
        if "-remat-" not in name:
            continue
        doc = from_recording(SAMPLES / name)
        held = sum(v["measured"] for v in doc["classes"].values())
        assert held == pytest.approx(doc["measured_step_ns"], rel=0.02), name


def test_the_tpu_target_prices_a_recording_and_compiles_nothing():
    """``tpu-v5e`` is a description the roofline reads; a compile for it (plan/tune without --from) is
    refused in one line."""
    from profiler.xla.targets import resolve

    with pytest.raises(ValueError, match="nothing compiles for it here"):
        resolve("tpu-v5e")
    label, spec, builtin = resolve("tpu-v5e", priced_only=True)
    assert (label, builtin) == ("TPU v5 lite", None)
    d = roofline.device_from_spec(spec)
    assert (d.name, d.on_chip_spaces) == ("TPU v5 lite", frozenset({1}))


def test_plan_from_names_a_bad_target_in_one_line(tpu_measured):
    from profiler.errors import ProfilerError

    with pytest.raises(ProfilerError, match=r"^--target: unknown target 'h900'"):
        from_recording(SAMPLES / next(iter(tpu_measured)), ["h900"])


def test_a_padded_dilated_batch_window_counts_one_tap_per_output():
    """The other form TPU modules write (the attention's backward): ``01fb_01oi->01fb`` with a window
    of 8x16, stride 8x16, padding 7 and 15, input dilation 7 and 15: each output position meets one
    real input element per dimension, so 2 x 8 x 16 x 1024 x 128 x 1024 FLOPs. On a GPU, memory space
    1 is still HBM."""
    text = TPU_HLO.replace(
        "window={size=8x16 stride=7x15 lhs_dilate=8x16}, dim_labels=01bf_01oi->01bf",
        "window={size=8x16 stride=8x16 pad=7_7x15_15 lhs_dilate=7x15 rhs_reversal=1x1}, dim_labels=01bf_01oi->01bf",
    )
    assert text != TPU_HLO
    m = parse_text(text)
    device = roofline.device_from_spec(TPU_TARGETS["tpu-v5e"].spec_text())
    ins = next(i for i in m.instructions() if i.name == "scores")
    assert roofline.Costs(m, device).flops(ins)[2] == 2 * 8 * 16 * 1024 * 1024 * 128
    gpu = roofline.device_from_spec(resolve_spec("h100"))
    assert gpu.on_chip_spaces == frozenset()
    assert roofline.Costs(m, gpu).hbm_bytes(ins) == roofline.Costs(m, device).hbm_bytes(ins) + 8 * 16 * 1024 * 1024 * 2


def resolve_spec(name: str) -> str:
    from profiler.xla.targets import resolve

    return resolve(name)[1]
