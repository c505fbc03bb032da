"""Costs calibrated from a run (issue 23 item 2): what a trace measured per instruction, carried to
another compilation of the same program (another policy, batch or link) or to another program.

- in a module of the same name as the run's, compiled for a GPU of the same name as the run's,
  an instruction with the same name and result shape as one the run measured takes its measured
  time (``measured``);
- any other takes its roofline cost times its op class's scale factor (``scaled``): the measured
  time over the roofline time of that class's instructions in the measured run, on the measured
  GPU (a class never measured, or with under 10 µs of roofline time, keeps the roofline);
- a host copy takes its bytes over the link's bandwidth times the efficiency the run's copies of
  that size reached on the run's own link (``copy``: the same assumption as the what-if: copies
  run at the same fraction of whatever link they use); without measured copies, the link's
  bandwidth.

``replay`` is the accuracy check of the replay itself: the measured program's own schedule with
its own measured durations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from profiler.analysis import instruction_times as it
from profiler.analysis.links import Link, host_link
from profiler.predict import roofline, schedule
from profiler.predict.measured import Measured
from profiler.predict.simulate import Prediction, simulate
from profiler.units import human_time
from profiler.xla.fingerprint import module_fingerprint
from profiler.xla.hlo import Module

MIN_SCALE_NS = 10_000  # a class whose roofline time in the run is below this gets no scale factor
# nor does a class whose measured instructions are under this share of its roofline time in the step:
# a scale is carried to the class's other ops, so it must be fitted on enough of them (a scanned H200
# step measures only what ran outside its loops, 8 of 256 ms: its GEMMs outside, 2.2 times their
# roofline, are not like the loops')
MIN_COVERAGE = 0.25
# and a run whose measured instructions hold under this share of its step fits nothing: a few ms
# outside a scanned step's loops (the H200's 8 of 256 ms) cleared the class rule once fusions that
# reduce had a class of their own, and carried 13-17% ties
MIN_NAMED_SHARE = 0.25


@dataclass
class Calibration:
    source: str
    module: str
    gpu: str | None
    measured_ns: dict[str, int]  # site -> ns per execution
    shapes: dict[str, str]  # site -> result shape text (to tell the same instruction)
    scale: dict[str, float]  # op class -> measured / roofline
    class_ns: dict[str, dict[str, float]]  # op class -> {"measured": ns, "roofline": ns, "instructions": n}
    bandwidth: pl.DataFrame  # instruction_times.copy_bandwidth of the run's copies
    link: Link  # the run's own host link (by its GPU, else the assumed one)
    step_ns: float
    notes: list[str] = field(default_factory=list)
    program: str | None = None  # the module's fingerprint: measured durations carry over only to it

    def doc(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "module": self.module,
            "gpu": self.gpu,
            "measured_step_ns": self.step_ns,
            "instructions": len(self.measured_ns),
            "scale": self.scale,
            "class_ns": self.class_ns,
            "link": self.link.key,
            "copy_bandwidth": self.bandwidth.to_dicts(),
            "notes": self.notes,
        }


def measured_costs(m: Measured) -> dict[str, int]:
    """ns per execution by the op the schedule replays (the thunks' ``site``): the site's measured
    time per step over the times the schedule runs it (``runs``: an op of a loop body runs once per
    trip, and its thunks' time per step is that of every trip)."""
    runs = pl.col("runs").first() if "runs" in m.times.columns else pl.lit(1)
    per = m.times.group_by("site").agg(pl.col("median_ns").sum() / runs)
    return {s: round(v) for s, v in per.iter_rows()}


def run_spec(m: Measured, fallback: str) -> tuple[str, str | None]:
    """(the spec of the GPU *m* ran on, a note when it is assumed): the source's own target description
    (nsys-jax dumps), else the built-in target of the GPU's name, else *fallback* (the plan's target)."""
    from profiler.xla.targets import TARGETS, TPU_TARGETS

    if m.spec_text:
        return m.spec_text, None
    for t in [*TARGETS.values(), *TPU_TARGETS.values()]:
        if m.gpu and t.description.lower() == m.gpu.lower():
            return t.spec_text(), None
    return fallback, f"the run's GPU ({m.gpu or 'not named'}) has no known description: the plan's target is assumed"


def copy_timings(copies: pl.DataFrame) -> pl.DataFrame:
    """The copies whose start and end time their transfer: a GPU's (the copy engine's own times), no
    TPU's.  A TPU transfer (``wait_ns``: the core's wait in its done) spans from its async start to the
    end of its done, which the core reaches when the schedule says: a hidden transfer's span is mostly
    compute, and in an unrolled program several in flight share the link, so even the ones the core
    waited on ran at a quarter of its rate (3.2 GB/s host to device in the unrolled offload_mlp against
    14.2).  A TPU's copies are priced at its host link's measured rate instead (``analysis/links.py``)."""
    return copies.clear() if "wait_ns" in copies.columns else copies


def calibrate(m: Measured, spec_text: str) -> Calibration:
    """The calibration of run *m* on its own GPU, described by *spec_text* (a GpuTargetConfigProto)."""
    if m.module is None:
        raise ValueError(f"{m.source}: no optimized HLO of {m.module_name}: calibration needs it (--hlo FILE)")
    device = roofline.device_from_spec(spec_text)
    sched = m.sched
    assert sched is not None  # m.module is there
    roof = roofline.costs(sched, device, xla=False)
    meas = measured_costs(m)
    classes = roofline.op_classes(sched)
    cls = class_table(sched, meas, roof, classes=classes)
    covered = _coverage(sched, meas, roof, classes)
    named = sum(ns * sched.runs.get(n, 1) for n, ns in meas.items() if n in roof)
    enough = not m.step_ns or named >= MIN_NAMED_SHARE * m.step_ns
    scale = {
        c: v["measured"] / v["roofline"]
        for c, v in cls.items()
        if enough and v["roofline"] >= MIN_SCALE_NS and v["measured"] > 0 and covered.get(c, 0.0) >= MIN_COVERAGE
    }
    notes = ([f"step: {m.chosen_by}"] if m.chosen_by else []) + list(m.notes)
    if not enough:
        notes.append(
            f"measured instructions hold {human_time(named)} of the {human_time(m.step_ns)} step, under"
            f" {100 * MIN_NAMED_SHARE:.0f}%: too little to fit a scale (e.g. its loops timed as one range each)"
        )
    thin = sorted(c for c, v in cls.items() if v["roofline"] >= MIN_SCALE_NS and covered.get(c, 0.0) < MIN_COVERAGE)
    if thin and enough:
        said = ", ".join(f"{c} {100 * covered.get(c, 0.0):.0f}%" for c in thin)
        notes.append(
            f"measured instructions cover too little of their class's roofline time per step to fit a scale"
            f" ({said}; at least {100 * MIN_COVERAGE:.0f}%): e.g. a loop timed as one range"
        )
    if not scale:  # e.g. loops timed as one range: too little named
        why = (
            "no op class got a scale"
            if thin or not enough
            else f"no op class has {MIN_SCALE_NS // 1000} us of measured instructions"
        )
        notes.append(f"{why} here: a calibration from this run is the roofline's, its copies' rates aside")
    own = host_link([m.gpu] if m.gpu else [])
    link = own.link
    if own.assumed:
        name = link.name.removesuffix(" x16")
        notes.append(f"the run's GPU ({m.gpu or 'unknown'}) has no known host link: {name} assumed for its copies")
    shapes = {n: sched.instructions[n].shape.text() for n in meas if n in sched.instructions}
    return Calibration(
        source=str(m.source),
        module=m.module_name,
        gpu=m.gpu,
        measured_ns=meas,
        shapes=shapes,
        scale=scale,
        class_ns=cls,
        bandwidth=it.copy_bandwidth(copy_timings(m.copies)),
        link=link,
        step_ns=m.step_ns,
        notes=notes,
        program=module_fingerprint(m.module)["value"],
    )


def _coverage(
    sched: schedule.Schedule, measured: dict[str, int], roof: dict[str, int], classes: dict[str, str]
) -> dict[str, float]:
    """Per op class (*classes*: ``roofline.op_classes``): the roofline time per step of its measured
    instructions over the whole class's."""
    total: dict[str, float] = {}
    named: dict[str, float] = {}
    for name, k in sched.runs.items():
        c = classes.get(name, "other")
        total[c] = total.get(c, 0.0) + roof.get(name, 0) * k
        if name in measured:
            named[c] = named.get(c, 0.0) + roof.get(name, 0) * k
    return {c: named.get(c, 0.0) / t for c, t in total.items() if t > 0}


def class_table(
    sched: schedule.Schedule,
    measured: dict[str, int],
    roof: dict[str, int],
    per_step: bool = False,
    classes: dict[str, str] | None = None,
) -> dict[str, dict[str, float]]:
    """Per op class (roofline.op_class), over the instructions both measured and costed: measured ns,
    roofline ns, instructions, and the median per-instruction ratio measured / roofline.  The ns are
    per execution of each instruction (what calibration's scales are fitted on), or with *per_step*
    per step: times the runs of each (a loop body's trips). *classes*: ``roofline.op_classes`` of
    *sched*, when already made."""
    classes = classes if classes is not None else roofline.op_classes(sched)
    runs = sched.runs if per_step else {}
    rows: dict[str, list[tuple[int, int]]] = {}
    for name, ns in measured.items():
        if name in roof:
            k = runs.get(name, 1)
            rows.setdefault(classes.get(name, "other"), []).append((ns * k, roof[name] * k))
    out = {}
    for c, pairs in rows.items():
        a = np.array(pairs, dtype=float)
        ok = a[:, 1] > 0
        out[c] = {
            "measured": float(a[:, 0].sum()),
            "roofline": float(a[:, 1].sum()),
            "instructions": len(a),
            "median_ratio": float(np.median(a[ok, 0] / a[ok, 1])) if ok.any() else float("nan"),
        }
    return out


def calibrated_costs(
    cal: Calibration, module: Module, spec_text: str, link: Link, sched: schedule.Schedule | None = None
) -> tuple[schedule.Schedule, dict[str, int], dict[str, int]]:
    """(schedule, ns per instruction, how many instructions were costed each way) for *module* on the
    target *spec_text* and host *link* (see the module docstring); *sched*: the module's schedule where
    the caller has built it already (building it is most of the time)."""
    device = roofline.device_from_spec(spec_text)
    sched = sched if sched is not None else schedule.build(module)
    roof = roofline.costs(sched, device, xla=False)
    # a fit carried to another GPU: XLA's own estimate where the module carries one (plan's and tune's
    # compiles) knows the target, a scale measured on another GPU does not, so it is taken as it is; on
    # the fit's own GPU its measured scales are the better knowledge (benchmarks/README.md, "XLA's own
    # estimates")
    carried = (cal.gpu or "").lower() != device.name.lower()
    xla, by_xla = roofline.with_xla(sched, roof) if carried else (roof, [])
    by_xla_set = set(by_xla)
    classes = roofline.op_classes(sched)
    shapes = {n: i.shape.text() for n, i in sched.instructions.items()}
    costs: dict[str, int] = {}
    how = {"measured": 0, "xla": 0, "scaled": 0, "roofline": 0, "copy": 0}
    # measured durations carry over only to the same program on the same GPU
    same_program = module.name == cal.module and (cal.gpu or "").lower() == device.name.lower()
    if same_program and cal.program is not None:  # a module name is no program (every JAX step is jit_step)
        same_program = module_fingerprint(module)["value"] == cal.program
    for name, ns in roof.items():
        if same_program and name in cal.measured_ns and cal.shapes.get(name) == shapes.get(name):
            costs[name] = cal.measured_ns[name]
            how["measured"] += 1
        elif name in by_xla_set:
            costs[name] = xla[name]
            how["xla"] += 1
        elif classes.get(name) in cal.scale:
            costs[name] = round(ns * cal.scale[classes[name]])
            how["scaled"] += 1
        else:
            costs[name] = ns
            how["roofline"] += 1
    for op in sched.ops:
        if op.name in costs or not (op.kind == "copy" or (op.kind == "start" and op.stream in ("d2h", "h2d"))):
            continue
        costs[op.name] = round(copy_time(cal, op.stream, op.bytes, link))
        how["copy"] += 1
    if not how["xla"]:  # a module without XLA's estimates (a recording): the counts as they always were
        del how["xla"]
    return sched, costs, how


def copy_time(cal: Calibration, direction: str, nbytes: int, link: Link) -> float:
    """ns of one copy of *nbytes* over *link*: the run's rate for that size on its own link,
    scaled by the two links' bandwidths (the link's own bandwidth where the run had no copies)."""
    own = it.copy_ns(np.array([nbytes]), cal.bandwidth, direction, cal.link.gbps)[0]
    return float(own * cal.link.gbps / link.gbps)


def predict(cal: Calibration, module: Module, spec_text: str, links: list[Link]) -> list[dict[str, Any]]:
    """Calibrated predictions of *module* per link (``Prediction.doc()`` + ``costed``)."""
    out = []
    built = schedule.build(module)  # once for every link
    for link in links:
        sched, costs, how = calibrated_costs(cal, module, spec_text, link, built)
        p = simulate(sched, costs, link)
        out.append({**p.doc(), "link_name": link.name, "link_gbps": link.gbps, "costed": how})
    return out


def replay(m: Measured) -> tuple[Prediction, float]:
    """The measured program's schedule replayed with its measured durations: (prediction, error of the
    predicted step against the measured median step, as a fraction)."""
    if m.module is None:
        raise ValueError(f"{m.source}: no optimized HLO of {m.module_name}: the replay needs it")
    assert m.sched is not None
    p = simulate(m.sched, measured_costs(m), None)
    return p, (p.step_ns - m.step_ns) / m.step_ns
