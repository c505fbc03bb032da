"""``plan --from RECORDING``: what a recorded step says about the predictions of its own program.

From a recording (a run folder, an nsys export or report beside an XLA dump, a JAX profiler trace
in a run folder, an nsys-jax archive), for the step program it measured:

- ``replay``: the program's schedule replayed with its own measured durations (``calibrate.replay``),
  against the measured step; the time the schedule could not place is listed, not dropped;
- ``roofline``: the same program with the uncalibrated roofline on its own GPU and host link;
- ``classes`` and ``largest``: measured against the roofline per op class, and the instructions
  whose measured time differs most from it;
- ``predicted``: the program predicted on each target and host link asked for, with the costs
  calibrated on this recording (``calibrate``: measured durations on the same GPU, each op class's
  scale elsewhere), each with its error against the recorded step (its own GPU and link), else the
  error that kind of prediction had on real steps (``analysis.accuracy``); on its own GPU over
  another link, neither: no real step was recorded on that link.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profiler.analysis.accuracy import calibrated, of_device
from profiler.analysis.links import Link, host_link
from profiler.errors import InputError, ProfilerError
from profiler.predict import calibrate, roofline
from profiler.predict.measured import load
from profiler.predict.simulate import simulate
from profiler.xla.targets import resolve

LARGEST = 10  # instructions listed by how far the roofline is from their measured time


def _error(pred: float, measured: float) -> float | None:
    return pred / measured - 1 if measured else None


def from_recording(path: Path, targets: list[str] | None = None, links: list[Link] | None = None) -> dict[str, Any]:
    """The document described in the module docstring (*targets*: names or spec files for
    ``xla.targets.resolve``, default the recording's own GPU; *links*: default its own)."""
    m = load(path)
    if m.module is None:
        raise InputError(path, f"no optimized HLO of {m.module_name} beside the recording: nothing to replay")
    spec = calibrate.run_spec(m, "")[0]  # no fallback: nothing is assumed, an unknown GPU is refused
    if not spec:
        raise InputError(path, f"the recording's GPU ({m.gpu or 'not named'}) has no known description")
    own_link = host_link([m.gpu]).link  # host_link passes over a missing name
    sched = m.sched
    assert sched is not None  # m.module is there
    replay, replay_error = calibrate.replay(m)
    roof = roofline.costs(sched, roofline.device_from_spec(spec), xla=False)
    roof_step = simulate(sched, roof, own_link).step_ns
    measured = calibrate.measured_costs(m)
    largest = sorted(
        ({"instruction": n, "measured_ns": ns, "roofline_ns": roof[n]} for n, ns in measured.items() if n in roof),
        key=lambda r: -abs(r["measured_ns"] - r["roofline_ns"]),
    )[:LARGEST]
    cal = calibrate.calibrate(m, spec)
    predicted = []
    for target in targets or [None]:
        try:
            label, target_spec = (m.gpu or "its GPU", spec) if target is None else resolve(target, priced_only=True)[:2]
        except ValueError as exc:
            raise ProfilerError(f"--target: {exc}") from None
        on_own = (label or "").lower() == (m.gpu or "its GPU").lower()  # the recording's own device
        for link in links or [host_link([label]).link]:  # the target's own link (on its own GPU: the recorded one)
            s, costs, how = calibrate.calibrated_costs(cal, m.module, target_spec, link, sched)
            p = simulate(s, costs, link)
            own = on_own and link.key == own_link.key  # the recorded step itself: its error is in-sample
            all_measured = how["scaled"] == 0 and how["roofline"] == 0  # every op its own measured time
            kind = of_device(label)[0] if how["measured"] == 0 and how["scaled"] == 0 else calibrated(m.gpu, label)
            predicted.append(
                {
                    "target": label,
                    "link": link.name,
                    "step_ns": p.step_ns,
                    "exposed_ns": p.exposed_ns,
                    "costed": how,
                    # on its own GPU and link: against the recorded step; what such predictions were off
                    # on real steps, unless every op kept its measured time: on its own GPU over another
                    # link (only the copies priced for it) no step and no figure checks it (None both)
                    "error": _error(p.step_ns, m.step_ns) if own else None,
                    "expected_error": None if all_measured else f"{kind.kind}: {kind.error_text()}",
                }
            )
    return {
        "source": str(path),
        "kind": m.kind,
        "gpu": m.gpu,
        "module": m.module_name,
        "chosen_by": m.chosen_by,
        "notes": m.notes,
        "measured_step_ns": m.step_ns,
        "replay": {
            "step_ns": replay.step_ns,
            "error": replay_error,
            "unplaced_ns": replay.unplaced_ns,
            "unplaced": replay.unplaced[:LARGEST],
            "regions": replay.regions,
        },
        "roofline": {
            "link": own_link.name,
            "step_ns": roof_step,
            "error": _error(roof_step, m.step_ns),
            "expected_error": of_device(m.gpu)[0].error_text(),
        },
        "classes": calibrate.class_table(sched, measured, roof, per_step=True),
        "largest": largest,
        "predicted": predicted,
        "accuracy": {"roofline": of_device(m.gpu)[0].line(), "calibrated": of_device(m.gpu)[1].line()},
    }
