"""The cost model's calibration (``profiler.predict.calibrate``) on a small program worked out by hand:
the scales and their limits, the notes, the costs each way, the copies, the replay (found by mutation
testing, docs/testing.md: the tests on real recordings check predictions within a goal, not each
field).  The roofline is given by hand (``roofline.costs`` replaced), so every number is hand-worked."""

from __future__ import annotations

import dataclasses
import math
import warnings
from pathlib import Path

import polars as pl
import pytest

from profiler.analysis import instruction_times as it
from profiler.analysis.links import LINKS, parse_link
from profiler.predict import calibrate, roofline, schedule
from profiler.predict.measured import Measured
from profiler.predict.simulate import simulate
from profiler.xla.fingerprint import module_fingerprint
from profiler.xla.hlo import parse_text
from profiler.xla.targets import TARGETS, TPU_TARGETS
from tests.helpers.hlo_programs import program_text

H100 = "NVIDIA H100 80GB HBM3"
SHAPE = "f32[2048,2048]"
B = "f32[2048,2048]{1,0}"  # 16 MiB
HOST = "f32[2048,2048]{1,0:S(5)}"
# a matmul, a fusion, a copy out (async) and one synchronous, a copy back, an all-reduce, two plain ops
TEXT = f"""HloModule cal, is_scheduled=true

%sum (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %r = f32[] add(%a, %b)
}}

%neg (p: f32[2048,2048]) -> f32[2048,2048] {{
  %p = {B} parameter(0)
  ROOT %n = {B} negate(%p)
}}

ENTRY %e (x: f32[2048,2048]) -> f32[2048,2048] {{
  %x = {B} parameter(0)
  %mm = {B} dot(%x, %x), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  %f = {B} fusion(%mm), kind=kLoop, calls=%neg
  %cs = ({HOST}, {B}, u32[]) copy-start(%f)
  %g = {B} exponential(%f)
  %sc = {HOST} copy(%g)
  %cd = {HOST} copy-done(%cs)
  %cb = ({B}, {HOST}, u32[]) copy-start(%cd)
  %ar = {B} all-reduce(%g), replica_groups={{{{0,1}}}}, to_apply=%sum
  %cbd = {B} copy-done(%cb)
  ROOT %out = {B} add(%ar, %cbd)
}}
"""
CLASSES = {"mm": "matmul", "f": "fusion", "cs": "copy", "g": "other", "sc": "copy", "cb": "copy",
           "ar": "collective", "out": "other"}  # fmt: skip
# the roofline by hand: the fusion's class exactly at MIN_SCALE_NS, "other" at it with g and out together
ROOF = {"mm": 40_000, "f": 10_000, "g": 9_999, "ar": 20_000, "out": 1}
MIB16 = 1 << 24
# two 16 MiB copies to the host of 1 ms each (16.777216 B/ns); none back
COPIES = pl.DataFrame({"cls": ["d2h", "d2h"], "bytes": [MIB16, MIB16], "start": [0, 2_000_000],
                       "end": [1_000_000, 3_000_000]})  # fmt: skip
STEPS = pl.DataFrame({"execution": [0, 1, 2], "duration_ns": [90_000, 110_000, 100_000]})


def run(times: dict[str, list[int]], gpu: str | None = H100, copies: pl.DataFrame = COPIES, **kw) -> Measured:
    """A measured run of TEXT: *times* gives each site's thunks (ns per execution, one run each)."""
    sites = [s for s, v in times.items() for _ in v]
    frame = pl.DataFrame({"hlo_op": sites, "site": sites, "median_ns": [n for v in times.values() for n in v],
                          "runs": [1] * len(sites)})  # fmt: skip
    kw = {"module": parse_text(TEXT), **kw}
    return Measured(Path("run.nsys-rep"), "nsys export", "cal", times=frame, steps=STEPS, copies=copies, gpu=gpu, **kw)


def calibrated(m: Measured) -> calibrate.Calibration:
    """``calibrate`` of *m* on the H100's description, with the roofline ROOF."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(roofline, "costs", lambda sched, device, launch_ns=0, **kw: dict(ROOF))
        return calibrate.calibrate(m, TARGETS["h100"].spec_text())


def test_calibrate_fits_a_scale_per_class_from_ten_microseconds_of_roofline_on():
    """mm's two thunks are 80 us against 40 (scale 2), f 15 against exactly 10 (1.5: the limit is
    included), "other" 1 ns against g's 9,999 + out's 1 (1/10,000: measured time above 0 suffices), the
    all-reduce measured 0 (no scale); zz, measured but no op of the program, gets no shape; the step
    is the median; the copies' table is the run's; an H100's own link."""
    m = run({"mm": [50_000, 30_000], "f": [15_000], "g": [1], "out": [0], "ar": [0], "zz": [7]},
            chosen_by="the longest module", notes=["a note"])  # fmt: skip
    cal = calibrated(m)
    assert cal.measured_ns == {"mm": 80_000, "f": 15_000, "g": 1, "out": 0, "ar": 0, "zz": 7}
    assert cal.shapes == dict.fromkeys(["mm", "f", "g", "out", "ar"], SHAPE)
    assert cal.scale == {"matmul": 2.0, "fusion": 1.5, "other": 1 / 10_000}
    assert cal.class_ns == {
        "matmul": {"measured": 80_000.0, "roofline": 40_000.0, "instructions": 1, "median_ratio": 2.0},
        "fusion": {"measured": 15_000.0, "roofline": 10_000.0, "instructions": 1, "median_ratio": 1.5},
        "other": {"measured": 1.0, "roofline": 10_000.0, "instructions": 2, "median_ratio": (1 / 9_999 + 0) / 2},
        "collective": {"measured": 0.0, "roofline": 20_000.0, "instructions": 1, "median_ratio": 0.0},
    }
    assert (cal.source, cal.module, cal.gpu, cal.step_ns) == ("run.nsys-rep", "cal", H100, 100_000.0)
    assert cal.link == LINKS["pcie5"]
    assert cal.notes == ["step: the longest module", "a note"]
    assert cal.program == module_fingerprint(m.module)["value"] and cal.program is not None
    assert cal.bandwidth.to_dicts() == it.copy_bandwidth(COPIES).to_dicts() and cal.bandwidth.height == 1
    assert cal.doc() == {
        "source": "run.nsys-rep",
        "module": "cal",
        "gpu": H100,
        "measured_step_ns": 100_000.0,
        "instructions": 6,
        "scale": cal.scale,
        "class_ns": cal.class_ns,
        "link": "pcie5",
        "copy_bandwidth": [
            {
                "cls": "d2h",
                "size_lo": MIB16,
                "copies": 2,
                "median_bytes": float(MIB16),
                "median_ns": 1_000_000.0,
                "p10_gbps": MIB16 / 1e6,
                "p90_gbps": MIB16 / 1e6,
                "gbps": MIB16 / 1e6,
            }
        ],
        "notes": ["step: the longest module", "a note"],
    }


def test_a_run_with_no_class_at_ten_microseconds_is_the_rooflines_and_says_so():
    """g alone: 50 us measured against 9,999 ns of roofline, under the limit: no scale, a note; an
    unknown GPU's copies over the assumed link, said in a note; no step sentence without one."""
    cal = calibrated(run({"g": [50_000]}, gpu="Mystery GPU"))
    assert cal.scale == {} and cal.class_ns["other"]["roofline"] == 9_999.0
    assert cal.link == LINKS["pcie4"]
    assert cal.notes == [
        "no op class has 10 us of measured instructions here: a calibration from this run is the roofline's,"
        " its copies' rates aside",
        "the run's GPU (Mystery GPU) has no known host link: PCIe Gen4 assumed for its copies",
    ]
    unnamed = calibrated(run({"mm": [80_000]}, gpu=None))
    assert unnamed.notes == ["the run's GPU (unknown) has no known host link: PCIe Gen4 assumed for its copies"]
    assert unnamed.scale == {"matmul": 2.0}


def test_a_tpus_copies_time_nothing_and_a_run_without_its_program_is_refused():
    """A TPU's copies (``wait_ns``) give no rates: the table is empty, each copy priced at the link."""
    tpu = COPIES.with_columns(pl.lit(5, pl.Int64).alias("wait_ns"))
    assert calibrate.copy_timings(tpu).height == 0 and calibrate.copy_timings(tpu).columns == tpu.columns
    assert calibrate.copy_timings(COPIES).to_dicts() == COPIES.to_dicts()
    cal = calibrated(run({"mm": [80_000]}, copies=tpu))
    assert cal.bandwidth.height == 0
    assert calibrate.copy_time(cal, "d2h", MIB16, parse_link("32")) == MIB16 / 32
    with pytest.raises(ValueError, match=r"^run.nsys-rep: no optimized HLO of cal: calibration needs it \(--hlo"):
        calibrate.calibrate(run({"mm": [1]}, module=None), TARGETS["h100"].spec_text())
    with pytest.raises(ValueError, match=r"^run.nsys-rep: no optimized HLO of cal: the replay needs it$"):
        calibrate.replay(run({"mm": [1]}, module=None))


def hand(**kw) -> calibrate.Calibration:
    """A calibration of TEXT on an H100 by hand: mm measured 70 us, f 12 us; scales 3, 0.5 and 2."""
    base = dict(source="run", module="cal", gpu=H100, measured_ns={"mm": 70_000, "f": 12_000},
                shapes={"mm": SHAPE, "f": SHAPE}, scale={"matmul": 3.0, "fusion": 0.5, "other": 2.0},
                class_ns={}, bandwidth=it.copy_bandwidth(COPIES), link=LINKS["pcie5"], step_ns=1.0,
                program=module_fingerprint(parse_text(TEXT))["value"])  # fmt: skip
    return calibrate.Calibration(**{**base, **kw})


def costs_of(cal: calibrate.Calibration, text: str = TEXT, target: str = "h100", link: str = "pcie5"):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(roofline, "costs", lambda sched, device, launch_ns=0, **kw: dict(ROOF))
        spec = TARGETS[target].spec_text()
        return calibrate.calibrated_costs(
            cal, parse_text(text), spec, LINKS[link] if link in LINKS else parse_link(link)
        )


def test_calibrated_costs_measured_on_the_same_program_and_gpu_else_scaled_else_the_roofline():
    """On its own program and GPU, mm and f take their measured times, g and out the roofline times
    "other"'s 2, the all-reduce (no scale) its roofline; the three copies 16 MiB each: the two out at
    the run's 16.777216 B/ns (1 ms), the one back at the link (16 MiB / 63 B/ns)."""
    sched, costs, how = costs_of(hand())
    assert [o.name for o in sched.ops][:3] == ["x", "mm", "f"]
    back = round(MIB16 / 63.0)
    assert costs == {"mm": 70_000, "f": 12_000, "g": 19_998, "ar": 20_000, "out": 2,
                     "cs": 1_000_000, "sc": 1_000_000, "cb": back}  # fmt: skip
    assert how == {"measured": 2, "scaled": 2, "roofline": 1, "copy": 3}
    # on a link of 32 GB/s: the run's rate scaled by 63/32, the copy back at 32 B/ns
    _, costs, _ = costs_of(hand(), link="32")
    assert (costs["cs"], costs["sc"], costs["cb"]) == (1_968_750, 1_968_750, MIB16 // 32)
    # another GPU: nothing measured, every class scaled
    _, costs, how = costs_of(hand(), target="a100")
    assert {k: costs[k] for k in ROOF} == {"mm": 120_000, "f": 5_000, "g": 19_998, "ar": 20_000, "out": 2}
    assert how == {"measured": 0, "scaled": 4, "roofline": 1, "copy": 3}
    # no scale at all: the roofline
    _, costs, how = costs_of(hand(scale={}, measured_ns={}, shapes={}))
    assert {k: costs[k] for k in ROOF} == ROOF and how == {"measured": 0, "scaled": 0, "roofline": 5, "copy": 3}


def test_measured_times_carry_only_to_the_same_program_with_the_same_shapes():
    """A program of the same name but another instruction (g a log) is another program: scaled; without
    a fingerprint (``program`` None) the name decides; a measured shape that differs is scaled too."""
    other = TEXT.replace(f"%g = {B} exponential(%f)", f"%g = {B} log(%f)")
    assert other != TEXT
    _, costs, how = costs_of(hand(), text=other)
    assert (costs["mm"], costs["f"], how["measured"], how["scaled"]) == (120_000, 5_000, 0, 4)
    _, costs, how = costs_of(hand(program=None), text=other)
    assert (costs["mm"], costs["f"], how["measured"], how["scaled"]) == (70_000, 12_000, 2, 2)
    _, costs, how = costs_of(hand(shapes={"mm": "f32[1]", "f": SHAPE}))
    assert (costs["mm"], costs["f"], how["measured"], how["scaled"]) == (120_000, 12_000, 1, 3)
    _, _, how = costs_of(hand(gpu=None))
    assert how["measured"] == 0


def test_predict_replays_each_link():
    """One prediction per link, each the replay of that link's calibrated costs, named and costed."""
    cal = hand()
    links = [LINKS["pcie5"], parse_link("32")]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(roofline, "costs", lambda sched, device, launch_ns=0, **kw: dict(ROOF))
        got = calibrate.predict(cal, parse_text(TEXT), TARGETS["h100"].spec_text(), links)
    assert len(got) == 2
    for p, link in zip(got, links, strict=True):
        sched, costs, how = costs_of(cal, link="pcie5" if link.key == "pcie5" else "32")
        assert p == {**simulate(sched, costs, link).doc(), "link_name": link.name, "link_gbps": link.gbps,
                     "costed": how}  # fmt: skip
        assert p["link"] == link.key and p["costed"]["copy"] == 3
    assert got[0]["predicted_step_ns"] < got[1]["predicted_step_ns"]  # 1 ms copies at 63 B/ns, 1.97 at 32


def test_the_replay_is_the_measured_program_with_its_measured_times():
    """mm 80 us, f 15, g 1, the rest 0 or unmeasured, one after another: 95,001 ns against the median
    step of 100,000: 4.999% short."""
    m = run({"mm": [50_000, 30_000], "f": [15_000], "g": [1], "ar": [0]})
    p, err = calibrate.replay(m)
    assert p.step_ns == 95_001 and err == (95_001 - 100_000) / 100_000
    assert p.link is None


def test_measured_costs_are_per_execution_of_the_site():
    """A loop body's site run 4 times a step: its thunks' time per step over 4; without ``runs``, one."""
    times = pl.DataFrame({"site": ["a", "a", "b"], "median_ns": [100, 50, 9_000], "runs": [1, 1, 4]})
    m = run({"mm": [1]})
    assert calibrate.measured_costs(dataclasses.replace(m, times=times)) == {"a": 150, "b": 2_250}
    assert calibrate.measured_costs(dataclasses.replace(m, times=times.drop("runs"))) == {"a": 150, "b": 9_000}


def test_class_table_per_execution_and_per_step():
    """mm 80 us against 40; f against a roofline of 0 (no ratio, and no warning); g 3 against 1, out 2
    against 2 and zz (no op: "other") 5 against 0 (left out of the median); the copy cs has no roofline.
    Per step, mm runs twice and g three times."""
    sched = schedule.build(parse_text(TEXT))
    sched.__dict__["runs"] = {"mm": 2, "g": 3}  # by hand (a cached property): as if mm and g ran in loops
    measured = {"mm": 80_000, "f": 15_000, "g": 3, "out": 2, "zz": 5, "ar": 7, "cs": 9}
    roof = {"mm": 40_000, "f": 0, "g": 1, "out": 2, "zz": 0, "ar": 100}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t, s = calibrate.class_table(sched, measured, roof), calibrate.class_table(sched, measured, roof, per_step=True)
    for table in (t, s):
        assert math.isnan(table["fusion"].pop("median_ratio"))
    assert t == {
        "matmul": {"measured": 80_000.0, "roofline": 40_000.0, "instructions": 1, "median_ratio": 2.0},
        "fusion": {"measured": 15_000.0, "roofline": 0.0, "instructions": 1},
        "other": {"measured": 10.0, "roofline": 3.0, "instructions": 3, "median_ratio": 2.0},
        "collective": {"measured": 7.0, "roofline": 100.0, "instructions": 1, "median_ratio": 0.07},
    }
    assert s == {**t, "matmul": {**t["matmul"], "measured": 160_000.0, "roofline": 80_000.0},
                 "other": {**t["other"], "measured": 16.0, "roofline": 5.0}}  # fmt: skip


def test_op_classes_name_each_op_once():
    """Copies (async or not) and collectives by their streams, the rest by the roofline's class; no free
    op, done or loop region."""
    assert roofline.op_classes(schedule.build(parse_text(TEXT))) == CLASSES
    looped = schedule.build(parse_text(program_text([("k",), ("while", None, [("k",)])])))
    assert any(o.kind == "region" for o in looped.ops)
    assert roofline.op_classes(looped) == {"k.1": "other", "body.2.inc": "other", "k.5": "other", "out": "other"}


def test_run_spec_is_the_runs_own_description_else_its_gpus_else_the_plans():
    m = run({"mm": [1]})
    assert calibrate.run_spec(dataclasses.replace(m, spec_text="own"), "plan") == ("own", None)
    assert calibrate.run_spec(m, "plan") == (TARGETS["h100"].spec_text(), None)
    assert calibrate.run_spec(dataclasses.replace(m, gpu=H100.lower()), "plan") == (TARGETS["h100"].spec_text(), None)
    tpu = dataclasses.replace(m, gpu="TPU v5 lite")
    assert calibrate.run_spec(tpu, "plan") == (TPU_TARGETS["tpu-v5e"].spec_text(), None)
    said = "has no known description: the plan's target is assumed"
    assert calibrate.run_spec(dataclasses.replace(m, gpu="Mystery GPU"), "plan") == (
        "plan",
        f"the run's GPU (Mystery GPU) {said}",
    )
    assert calibrate.run_spec(dataclasses.replace(m, gpu=None), "plan") == ("plan", f"the run's GPU (not named) {said}")


def test_the_real_roofline_of_the_runs_gpu_and_of_the_target():
    """Unpatched: the classes' roofline ns are the roofline's of the run's GPU's description; another
    target's costs are its own roofline's times the scales (the all-reduce, unscaled, its roofline)."""
    m = run({"mm": [50_000, 30_000], "f": [15_000], "g": [1], "out": [0], "ar": [0]})
    h100, a100 = TARGETS["h100"].spec_text(), TARGETS["a100"].spec_text()
    sched = schedule.build(m.module)
    roof = roofline.costs(sched, roofline.device_from_spec(h100))
    cal = calibrate.calibrate(m, h100)
    assert {c: v["roofline"] for c, v in cal.class_ns.items()} == {
        "matmul": roof["mm"],
        "fusion": roof["f"],
        "other": roof["g"] + roof["out"],
        "collective": roof["ar"],
    }
    assert cal.scale["matmul"] == 80_000 / roof["mm"]
    there = roofline.costs(sched, roofline.device_from_spec(a100))
    assert there != roof
    _, costs, how = calibrate.calibrated_costs(hand(), m.module, a100, LINKS["pcie4"])
    assert {k: costs[k] for k in ROOF} == {"mm": round(there["mm"] * 3.0), "f": round(there["f"] * 0.5),
                                           "g": round(there["g"] * 2.0), "ar": there["ar"],
                                           "out": round(there["out"] * 2.0)}  # fmt: skip
    assert how == {"measured": 0, "scaled": 4, "roofline": 1, "copy": 3}


@pytest.mark.parametrize(("out_ns", "fitted"), [(80_000, False), (60_000, True)])
def test_a_class_measured_on_under_a_quarter_of_its_roofline_gets_no_scale(out_ns, fitted):
    """g measured (20 us of roofline), out not: "other" is covered 20_000 / (20_000 + out) of its
    roofline time per step: 20% gets no scale and a note naming the class and its share; 25% is enough
    (the limit is included). mm is covered whole either way."""
    roof = {**ROOF, "g": 20_000, "out": out_ns}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(roofline, "costs", lambda sched, device, launch_ns=0, **kw: dict(roof))
        cal = calibrate.calibrate(run({"mm": [80_000], "g": [30_000]}), TARGETS["h100"].spec_text())
    assert cal.scale == ({"matmul": 2.0, "other": 1.5} if fitted else {"matmul": 2.0})
    thin = [n for n in cal.notes if "cover too little" in n]
    assert thin == ([] if fitted else [
        "measured instructions cover too little of their class's roofline time per step to fit a scale"
        " (other 20%; at least 25%): e.g. a loop timed as one range"
    ])  # fmt: skip
