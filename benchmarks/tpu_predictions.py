"""Issue 42 on a real TPU v5e: each recorded step against its replay, the uncalibrated roofline and a
calibration made on another recording.

    .venv/bin/python -m benchmarks.tpu_predictions RECORDINGS [--calibrate RUN] [--json OUT]

*RECORDINGS*: a folder whose subfolders (to two levels) are TPU recordings (``benchmarks/tpu_record.sh``'s
``<form>/<policy>/``, or run folders); *RUN*: the one the calibration is fitted on (a path, or its
name under RECORDINGS; default ``scan-l8/remat``). For each recording:

- ``replay``: its own optimized HLO replayed with its own measured durations (``calibrate.replay``);
- ``roofline``: the same program on the TPU v5e description (``targets.TPU_TARGETS``) and the
  measured host link, nothing fitted;
- ``calibrated``: the per-class scales and the copy rates fitted on RUN alone, applied to this
  program (its own measured durations never used: another program keeps only the classes' scales);
  on RUN itself this is an in-sample fit and is marked so.

Per op class (the roofline's classes, plus ``wait``: the time the core waited on async dones), the
measured time per step against each prediction's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from profiler.analysis.links import host_link
from profiler.errors import ProfilerError
from profiler.predict import calibrate, roofline, schedule
from profiler.predict.measured import Measured, load
from profiler.predict.simulate import simulate
from profiler.trace.jax_profile import find_tpu
from profiler.xla.targets import TPU_TARGETS

DEFAULT_CAL = "scan-l8/remat"


def recordings(root: Path) -> list[Path]:
    """The TPU recordings under *root* (itself, its subfolders and theirs)."""
    cands = [root, *sorted(p for p in root.glob("*") if p.is_dir()), *sorted(p for p in root.glob("*/*") if p.is_dir())]
    own = [p for p in cands if any(p.glob("*trace.json.gz")) or any(p.glob("jax/plugins/profile/*/*trace.json.gz"))]
    return [p for p in own if find_tpu(p) is not None]


def per_class(sched: schedule.Schedule, costs: dict[str, int], waits: int) -> dict[str, float]:
    """ns per step by op class of *costs* (ns per execution, times the schedule's runs), with ``wait``."""
    classes = roofline.op_classes(sched)
    out: dict[str, float] = {}
    for name, n in sched.runs.items():
        c = classes.get(name)
        if c is None or name not in costs:
            continue
        out[c] = out.get(c, 0.0) + costs[name] * n
    out["wait"] = float(waits)
    return out


def _measured_waits(m: Measured, sched: schedule.Schedule) -> float:
    dones = {o.name for o in sched.ops if o.kind == "done"}
    meas = calibrate.measured_costs(m)
    return float(sum(meas.get(d, 0) * sched.runs.get(d, 1) for d in dones))


def row(m: Measured, cal: calibrate.Calibration, name: str, in_sample: bool) -> dict[str, Any]:
    """The three predictions of recording *m* (see the module docstring)."""
    spec = TPU_TARGETS["tpu-v5e"].spec_text()
    link = host_link([m.gpu] if m.gpu else []).link
    sched = m.sched
    rep, rep_err = calibrate.replay(m)
    meas = calibrate.measured_costs(m)
    roof = roofline.costs(sched, roofline.device_from_spec(spec))
    roof_p = simulate(sched, roof, link)
    c_sched, c_costs, how = calibrate.calibrated_costs(cal, m.module, spec, link)  # type: ignore[arg-type]
    cal_p = simulate(c_sched, c_costs, link)
    step = m.step_ns
    measured_cls = per_class(sched, meas, int(_measured_waits(m, sched)))
    return {
        "recording": name,
        "measured_step_ns": step,
        "replay_ns": rep.step_ns,
        "replay_error": rep_err,
        "unplaced_ns": rep.unplaced_ns,
        "not_timed_ops": rep.costed_by.get("missing", 0),
        "loops": [{k: r[k] for k in ("name", "trips", "replayed", "ns")} for r in rep.regions],
        "serial_ns": rep.stream_ns.get("compute", 0),
        "roofline_ns": roof_p.step_ns,
        "roofline_error": roof_p.step_ns / step - 1,
        "calibrated_ns": cal_p.step_ns,
        "calibrated_error": cal_p.step_ns / step - 1,
        "calibrated_in_sample": in_sample,
        "costed": how,
        "classes": {
            "measured": measured_cls,
            "roofline": per_class(sched, roof, roof_p.exposed_ns + roof_p.exposed_collective_ns),
            "calibrated": per_class(c_sched, c_costs, cal_p.exposed_ns + cal_p.exposed_collective_ns),
        },
    }


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def table(rows: list[dict[str, Any]]) -> str:
    """The README's table."""
    head = ("| recording | measured step | replay | error | roofline | error | calibrated | error |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")  # fmt: skip
    lines = [head]
    for r in rows:
        mark = " (fit here)" if r["calibrated_in_sample"] else ""
        lines.append(
            f"| {r['recording']} | {r['measured_step_ns'] / 1e6:.1f} ms | {r['replay_ns'] / 1e6:.1f} ms | "
            f"{_pct(r['replay_error'])} | {r['roofline_ns'] / 1e6:.1f} ms | {_pct(r['roofline_error'])} | "
            f"{r['calibrated_ns'] / 1e6:.1f} ms | {_pct(r['calibrated_error'])}{mark} |"
        )
    return "\n".join(lines)


def _off(pred: float, measured: float) -> str:
    """A prediction's error against *measured*, or the prediction itself where nothing was measured."""
    return _pct(pred / measured - 1) if measured else f"{pred / 1e6:.1f} ms"


def class_table(rows: list[dict[str, Any]]) -> str:
    """Per recording and op class: measured ms per step, and each prediction's error."""
    lines = ["| recording | class | measured | roofline | calibrated |", "| --- | --- | ---: | ---: | ---: |"]
    for r in rows:
        m, ro, ca = (r["classes"][k] for k in ("measured", "roofline", "calibrated"))
        for c in sorted(m):
            if m[c] < 1e6 and ro.get(c, 0) < 1e6:
                continue  # under a millisecond per step either way
            lines.append(
                f"| {r['recording']} | {c} | {m[c] / 1e6:.1f} ms | {_off(ro.get(c, 0.0), m[c])} | "
                f"{_off(ca.get(c, 0.0), m[c])} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recordings", type=Path)
    ap.add_argument("--calibrate", default=DEFAULT_CAL, help="the recording the calibration is fitted on")
    ap.add_argument("--json", type=Path, default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    try:
        found = recordings(args.recordings)
        if not found:
            raise ProfilerError(f"{args.recordings}: holds no TPU recording (a JAX profiler trace of a TPU)")
        cal_path = Path(args.calibrate) if Path(args.calibrate).is_dir() else args.recordings / args.calibrate
        cal_m = load(cal_path)
        cal = calibrate.calibrate(cal_m, TPU_TARGETS["tpu-v5e"].spec_text())
        rows = []
        for p in found:
            name = str(p.relative_to(args.recordings)) if p != args.recordings else p.name
            m = load(p)
            if m.module is None:
                print(f"{name}: no optimized HLO beside the trace, left out", file=sys.stderr)
                continue
            rows.append(row(m, cal, name, p.resolve() == cal_path.resolve()))
    except ProfilerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"calibrated on {cal_path} (scales: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(cal.scale.items())) + ")")
    print(table(rows))
    print()
    print(class_table(rows))
    if args.json:
        doc = {"calibrated_on": str(cal_path), "scale": cal.scale, "rows": rows}
        args.json.write_text(json.dumps(doc, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
