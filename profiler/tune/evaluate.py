"""A compiled candidate's numbers: device and host memory, and per host link its predicted step,
exposed copy time and what compute lies under each copy.

The prediction is ``profile-step plan``'s (``profiler.predict``: the roofline over the
compiled schedule, replayed through its dependencies); memory is ``memory_analysis()``
of the compiled step (``profiler.xla.buffers.device_bytes``: arguments + outputs not
aliased + temporaries).  A compiled candidate keeps its schedule and roofline costs,
so another link or memory limit costs a replay, not a compile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiler.analysis.links import Link
from profiler.predict import roofline, schedule
from profiler.predict.schedule import Schedule
from profiler.predict.simulate import Prediction, late_copies, simulate
from profiler.xla.buffers import device_bytes
from profiler.xla.compiled import load_module
from profiler.xla.fingerprint import text_fingerprint
from profiler.xla.hlo import HloError


@dataclass
class Outcome:
    """One candidate on one link against one memory limit."""

    step_ns: int
    exposed_ns: int
    compute_ns: int
    copy_ns: dict[str, int]
    copy_bytes: dict[str, int]
    device_bytes: int | None
    host_bytes: int | None
    fits: bool
    late_h2d: dict[str, Any] | None = None  # simulate.late_copies: the copies back that are late

    def order(self) -> tuple[int, int, int]:
        """Better first: fitting, then faster, then less device memory."""
        return (0 if self.fits else 1, self.step_ns if self.fits else (self.device_bytes or 0), self.device_bytes or 0)


@dataclass
class Compiled:
    """One candidate's compiled step, ready to replay on any link."""

    key: str
    module: str | None
    hlo_file: str
    memory: dict[str, int] | None
    seconds: float
    fingerprint: str | None
    sched: Schedule | None
    costs: dict[str, int]
    d2h_bytes: int = 0
    notes: list[str] = field(default_factory=list)
    predictions: dict[str, Prediction] = field(default_factory=dict)  # by link key
    calibration: Any = None  # (profiler.predict.calibrate.Calibration, target spec): costs from a run
    xla_costed: int = 0  # instructions costed by XLA's own estimate (roofline.with_xla), not the roofline

    @property
    def device_bytes(self) -> int | None:
        return device_bytes(self.memory) if self.memory else None

    @property
    def host_bytes(self) -> int | None:
        return device_bytes(self.memory, host=True) if self.memory else None

    def predict(self, link: Link) -> Prediction | None:
        if self.sched is None:
            return None
        if link.key not in self.predictions:
            costs = self.costs
            if self.calibration is not None:
                from profiler.predict.calibrate import calibrated_costs

                cal, spec = self.calibration
                _, costs, _ = calibrated_costs(cal, self.sched.module_ref, spec, link, self.sched)
            self.predictions[link.key] = simulate(self.sched, costs, link)
        return self.predictions[link.key]

    def outcome(self, link: Link, limit: int | None) -> Outcome | None:
        pred = self.predict(link)
        if pred is None:
            return None
        dev = self.device_bytes
        return Outcome(
            step_ns=pred.step_ns,
            exposed_ns=pred.exposed_ns,
            compute_ns=pred.compute_ns,
            copy_ns=dict(pred.copy_ns),
            copy_bytes=dict(pred.copy_bytes),
            device_bytes=dev,
            host_bytes=self.host_bytes,
            fits=dev is not None and (limit is None or dev <= limit),
            late_h2d=late_copies(pred),
        )


def compiled_from(answer: dict[str, Any], key: str, device: roofline.Device) -> Compiled:
    """The script's answer to a compile request, read: its HLO parsed, scheduled and costed."""
    hlo = Path(answer["hlo_file"])
    notes = list(answer.get("notes") or [])
    sched, costs, fp, taken = None, {}, None, []
    try:
        module, _, text = load_module(hlo)
        fp = text_fingerprint(text)["value"] if text is not None else None
        sched = schedule.build(module)
        costs, taken = roofline.with_xla(sched, roofline.costs(sched, device, xla=False))
    except (HloError, OSError, ValueError, KeyError) as exc:
        notes.append(f"no prediction: the compiled module could not be read ({type(exc).__name__}: {exc})")
    d2h = sum(m["bytes_per_step"] or 0 for m in (sched.plan["movements"] if sched else []) if m["direction"] == "d2h")
    return Compiled(
        key=key,
        module=answer.get("module"),
        hlo_file=str(hlo),
        memory=answer.get("memory"),
        seconds=float(answer.get("seconds") or 0.0),
        fingerprint=fp,
        sched=sched,
        costs=costs,
        d2h_bytes=d2h,
        notes=notes,
        xla_costed=len(taken),
    )


def copy_cover(c: Compiled, link: Link, top: int = 2) -> dict[str, Any]:
    """What hides the host copies of *c* on *link*: per direction the copies' bytes and time, the
    compute scheduled between each copy's start and its done (summed over the copies), the time
    the compute stream waited for them, and the largest kernels there (their ``op_name``)."""
    pred = c.predict(link)
    if c.sched is None or pred is None:
        return {}
    ops = c.sched.ops
    out: dict[str, Any] = {}
    kernels: dict[str, dict[str, int]] = {"d2h": {}, "h2d": {}}
    for op in ops:
        if op.kind != "done" or op.pair is None or ops[op.pair].stream not in ("d2h", "h2d"):
            continue
        d = ops[op.pair].stream
        row = out.setdefault(d, {"copies": 0, "bytes": 0, "cover_ns": 0})
        row["copies"] += 1
        row["bytes"] += ops[op.pair].bytes
        for mid in ops[op.pair + 1 : op.index]:
            if mid.kind in ("compute", "collective", "copy"):
                cost = int(c.costs.get(mid.name, 0))
                row["cover_ns"] += cost
                what = _short(mid.op_name) or mid.name
                kernels[d][what] = kernels[d].get(what, 0) + cost
    for d, row in out.items():
        row["copy_ns"] = pred.copy_ns.get(d, 0)
        row["waited_ns"] = sum(w["wait_ns"] for w in pred.waits if w["stream"] == d)
        row["top"] = [k for k, _ in sorted(kernels[d].items(), key=lambda kv: -kv[1])[:top]]
    return out


def _short(op_name: str | None) -> str | None:
    """The last two parts of an op_name path (``transpose(jvp(layer))/dot_general`` -> ``layer/dot_general``)."""
    if not op_name:
        return None
    parts = [p for p in op_name.split("/") if p]
    clean = []
    for p in parts[-3:]:
        while "(" in p and p.endswith(")"):
            p = p[p.index("(") + 1 : -1]
        clean.append(p)
    return "/".join(clean[-2:])
