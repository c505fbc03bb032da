"""Rules about how XLA scheduled the copies: offloads that never happened, the latency hiding
scheduler, copies bunched at step or layer-loop boundaries."""

from __future__ import annotations

import numpy as np
import polars as pl

from profiler.analysis import late_copies
from profiler.analysis.dependencies import D2H, H2D, NO_TIME
from profiler.analysis.findings import Finding, changes, rule
from profiler.analysis.findings.config import at_least, exceeds, under
from profiler.analysis.findings.evidence import LHS, PIPELINED, CannotDecide, Evidence, flag_value, version_tuple
from profiler.analysis.findings.rules.text import mib, ms, pct
from profiler.analysis.intervals import Intervals, difference, length_by_group, measure_within, union
from profiler.analysis.offload_expected import expected_offload
from profiler.analysis.savings import STEPS, Window
from profiler.units import count

MIN_JAXLIB = (0, 4, 26)  # XLA:GPU's host offloading passes landed in March 2024 (openxla/xla PR 10185)
# the late copies' fixes on a TPU: the XLA:GPU flags they name as tried do not apply to it
TPU_FIX = {
    late_copies.SCAN_FIX: "in a scan XLA starts each copy back in the iteration that uses it; fetch the next "
    "layer's activation one iteration ahead in the scan's carry (a custom_vjp), or unroll the layer loop",
    late_copies.UNROLLED_FIX: "offload fewer activations, or ones used later in their layer's backward pass",
}


@rule("offload-missing")
def offload_missing(ev: Evidence) -> list[Finding]:
    """Decided from the step's compiled program and what the run declares (``offload_expected``) and
    the recorded backend, never from the policy's name."""
    policy = ev.policy or "(unnamed)"
    offloads, why = expected_offload(ev.compiled_step, ev.manifest)
    if offloads is None:
        raise CannotDecide(why)
    if not offloads:
        return []
    backend = ev.backend
    if backend == "cpu" or not ev.devices:
        return [
            Finding(
                "offload-missing",
                "info",
                f"policy {policy} offloads ({why}), but this run has no GPU activity (backend: "
                f"{backend or 'not recorded'}); XLA:CPU never moves activations to host memory",
                "profile on a GPU to see the copies (the trace of a CPU run checks that the step runs, not that it "
                "offloads)",
                where={"policy": policy},
            )
        ]
    steps = [s for s in ev.steps["steps"] if not s["excluded"]]
    if steps:
        moved = sum(c["offload"]["bytes"] for s in steps for c in s["devices"].values())
        per_step, scope = moved / len(steps), f"the {len(steps)} captured steps move"
    else:
        per_step = sum(d["copies"]["offload"]["bytes"] for d in ev.devices.values())
        scope = "the capture (no steps found) moves"
    if at_least(per_step, ev.config["offload_min_bytes_per_step"]):
        return []
    jaxlib = ((ev.manifest or {}).get("versions") or {}).get("jaxlib")
    old = version_tuple(jaxlib)
    note = f"; jaxlib {jaxlib} predates XLA:GPU host offloading" if old and old < MIN_JAXLIB else ""
    return [
        Finding(
            "offload-missing",
            "problem",
            f"policy {policy} should offload ({why}), but {scope} {mib(per_step)} per step to and from host "
            f"memory{note}",
            "check that names_which_can_be_offloaded match the model's checkpoint_name()s, that offload_dst is "
            '"pinned_host" and the device lists pinned_host among its memory kinds, and the jaxlib version; XLA '
            "drops offloads it cannot place (openxla/xla issue 17541): look for S(5) buffers in the optimized HLO",
            where={"policy": policy},
            evidence={"offload_bytes_per_step": per_step, "steps": len(steps), "jaxlib": jaxlib, "offloads": why},
            no_saving="not modelled: a configuration fault; the copies it should make are not in the trace",
        )
    ]


def _offload_totals(ev: Evidence) -> tuple[int, int]:
    busy = sum(d["copies"]["offload"]["busy_ns"] for d in ev.devices.values())
    exposed = sum(d["copies"]["offload"]["exposed_ns"] for d in ev.devices.values())
    return busy, exposed


@rule("lhs-off")
def lhs_off(ev: Evidence) -> list[Finding]:
    if not ev.is_xla:
        raise CannotDecide("not an XLA program (no manifest with a JAX version, no XLA NVTX ranges)")
    if ev.on_tpu:
        raise CannotDecide(f"a TPU: {LHS} is XLA:GPU's flag")
    busy, exposed = _offload_totals(ev)
    if busy == 0 or not exceeds(exposed / busy, ev.config["lhs_exposed_fraction"]):
        return []
    spans = sum(int(d["span_ns"]) for d in ev.devices.values())  # a 4-byte copy exposed is not worth a flag
    if under(exposed, ev.config["exposed_copies_min_share"] * spans):
        return []
    try:
        state = flag_value(ev.xla_flags, LHS)
        how = {False: "off", None: "not set (its default depends on the XLA version)"}.get(state)  # type: ignore[arg-type]
    except CannotDecide:
        state, how = None, "unknown (no manifest with the run's XLA_FLAGS)"
    if state is True:
        return []
    gpus = _summed(ev)
    return [
        Finding(
            "lhs-off",
            "warning" if state is False else "info",  # the most it can be: whether it is the cause is a guess
            f"{pct(exposed / busy)} of the copy time ({ms(exposed)}{gpus}) is exposed and the latency hiding "
            f"scheduler is {how}",
            f"turn it on: XLA_FLAGS={LHS}=true (profile-step --lhs); it schedules async copies to overlap compute",
            evidence={"exposed_ns": exposed, "busy_ns": busy, "lhs": state},
            attributed_ns=exposed,  # the exposed offload time it may explain
            no_saving="not modelled: the scheduler would make a new schedule, and the replay keeps XLA's (at most "
            "what removing every copy gives back: whatif's copy-free line)",
            **ev.basis_windows(),
        )
    ]


def _cost_intervals(ev: Evidence) -> Intervals:
    """Per device: when a copy ran exposed, or an op stood stalled by a copy (union of both)."""
    bd = ev.breakdown
    exposed = ev.exposed_offload
    st = bd.stalls
    if st is None:
        return exposed
    ops = st.deps.ops
    hit = np.flatnonzero((st.stall > 0) & (st.ready != NO_TIME) & (st.blocker >= 0))
    hit = hit[np.isin(ops.kind[st.blocker[hit]], (H2D, D2H))]  # stalled by an h2d or d2h copy
    starts = st.ready[hit]
    groups = np.r_[exposed.group, ops.device[hit]]
    return union(groups, np.r_[exposed.start, starts], np.r_[exposed.end, starts + st.stall[hit]])


@rule("exposed-at-boundaries")
def exposed_at_boundaries(ev: Evidence) -> list[Finding]:
    note = _pipelined_note(ev)
    try:
        out = _step_edges(ev, note)
    except CannotDecide:
        if not ev.layers:
            raise
        out = []
    return out + _layer_loop_edges(ev, note)


def _step_edges(ev: Evidence, flags_note: str) -> list[Finding]:
    """The first and last ``boundary_fraction`` of the steps' GPU spans holding most of the cost."""
    bd = ev.breakdown
    steps = ev.included_steps
    if not steps:
        raise CannotDecide("every step was excluded (warm-up or outlier)")
    assigned, _ = bd.step_assignment(bd.step_ranges())
    assigned = assigned.filter(pl.col("index").is_in([s["index"] for s in steps]))
    if assigned.height == 0:
        raise CannotDecide("no GPU ops were found in the steps")
    ops = bd.ops.select("device", "start", "end")[assigned["op_id"].to_numpy()].with_columns(assigned["index"])
    win = ops.group_by("index", "device").agg(pl.col("start").min().alias("t0"), pl.col("end").max().alias("t1"))
    dev, t0, t1 = (win[c].to_numpy() for c in ("device", "t0", "t1"))
    width = t1 - t0
    f = ev.config["boundary_fraction"]
    edge = (width * f).astype(np.int64)
    cost = _cost_intervals(ev)
    total = measure_within(cost, dev, t0, t1)
    head = measure_within(cost, dev, t0, t0 + edge)
    tail = measure_within(cost, dev, np.maximum(t1 - edge, t0 + edge), t1)
    all_cost, at_edges, span = int(total.sum()), int((head + tail).sum()), int(width.sum())
    if not (span and all_cost and at_least(all_cost / span, ev.config["boundary_min_cost_fraction"])):
        return []
    share = at_edges / all_cost
    if not at_least(share, ev.config["boundary_share"]):
        return []
    return [
        Finding(
            "exposed-at-boundaries",
            "problem",
            f"{pct(share)} of the exposed or stalled copy time ({ms(at_edges)} of {ms(all_cost)}{_summed(ev)}) sits in "
            f"the first and last {pct(f)} of the steps",
            "let XLA pipeline the offloads into neighbouring iterations: "
            f"XLA_FLAGS={PIPELINED}=true (profile-step --pipelined-offload; openxla/xla PR 32297){flags_note}",
            where={"steps": len(steps)},
            evidence={"at_boundaries_ns": at_edges, "exposed_or_stalled_ns": all_cost, "share": share},
            view="timeline",
            attributed_ns=at_edges,  # the exposed or stalled copy time at the steps' edges
            attributed_basis_ns=span,
            attributed_basis=f"the GPU spans of the {count(len(steps), 'step')}"
            + (" (summed over GPUs)" if len(ev.devices) > 1 else ""),
            window=Window(STEPS),
            change=changes.at_edges(ev, (dev, t0, t1), edge),
        )
    ]


def _layer_loop_edges(ev: Evidence, flags_note: str) -> list[Finding]:
    """The first and last layer of the loop holding most of the exposed plus stalled copy time."""
    per: dict[str, int] = {}
    for row in ev.layers:
        off = row["copies"]["offload"]
        per[row["name"]] = per.get(row["name"], 0) + off["exposed_ns"] + off.get("stall_ns", 0)
    names = list(per)  # in the layers' natural order
    total = sum(per.values())
    if len(names) < 3 or total == 0:
        return []
    # an end is named when it holds more than an average layer's time (the H200 example's offload_mlp:
    # layer_7 11.7 of 12.2 ms, layer_0 0.5: "first and last" named a layer that hid its copies); both
    # when neither does
    named = [n for n in (names[0], names[-1]) if per[n] > total / len(names)] or [names[0], names[-1]]
    ends = sum(per[n] for n in named)
    if under(ends / total, ev.config["boundary_share"]):
        return []
    which = {1: "first" if named[0] == names[0] else "last", 2: "first and last"}[len(named)]
    return [
        Finding(
            "exposed-at-boundaries",
            "problem",
            f"{pct(ends / total)} of the exposed or stalled copy time ({ms(ends)} of {ms(total)}, the layers' own "
            f"figures summed{_summed(ev)}: copies of several layers in flight together count in each) belongs to "
            f"the {which} layer ({', '.join(named)}) of {len(names)}",
            _layer_loop_tip(ev, flags_note, which),
            where={"layers": named},
            evidence={"at_ends_ns": ends, "exposed_or_stalled_ns": total},
            view="layers",
            attributed_ns=ends,  # the exposed or stalled copy time of the loop's end layers named
            change=changes.removed(
                f"the copies of layer{'s' if len(named) > 1 else ''} {' and '.join(named)} removed",
                changes.layer_copies(ev, named),
            ),
            **ev.basis_windows(),
        )
    ]


def _layer_loop_tip(ev: Evidence, flags_note: str, which: str = "first and last") -> str:
    """Pipelining's advice where the step's program offloads inside a loop (or it is unknown); where its
    compiled plan moves every offload outside any loop (unrolled layers: no iterations to pipeline
    across), that the flag does not apply, and what does. *which*: the end layers named."""
    where = {"first": "start", "last": "end"}.get(which, "start and end")
    moves = ((ev.compiled_step or {}).get("plan") or {}).get("movements") or []
    if moves and all(m.get("executions_per_step") == 1 for m in moves):
        return (
            f"the copies bunch where the layers {where}; XLA pipelines offloads across a loop's iterations "
            f"only ({PIPELINED}), and this step's program moves every offload outside any loop (its layers are "
            f"unrolled), so the flag does not apply: keep the {which} layer's activations on the device "
            "(or recompute them) and offload the others"
        )
    return (
        f"the copies bunch where the layer loop {where.replace('start', 'starts').replace('end', 'ends')}: let "
        "XLA pipeline them across iterations, "
        f"XLA_FLAGS={PIPELINED}=true{flags_note}"
    )


def _summed(ev: Evidence) -> str:
    return f", summed over {len(ev.devices)} GPUs" if len(ev.devices) > 1 else ""


def _pipelined_note(ev: Evidence) -> str:
    try:
        on = flag_value(ev.xla_flags, PIPELINED)
    except CannotDecide:
        return " (whether it is on is unknown: no manifest)"
    if on:
        return "; it is already on in this run: move the offloaded activations away from the loop's ends"
    return ""


@rule("late-copies-back")
def late_copies_back(ev: Evidence) -> list[Finding]:
    """Host-to-device copies some GPU op waited for, with less kernel time beside them than they took
    (``analysis.late_copies``: waited = transfer - window), per device."""
    st = ev.need_stalls()
    ops = st.deps.ops
    steps = ev.included_steps
    h2d = np.flatnonzero((ops.kind == H2D) & _in_steps(steps, ops.start))  # the copies back of the steps
    waited = np.zeros(len(ops), dtype=bool)
    waited[st.blocker[st.stall > 0]] = True
    rows = h2d[waited[h2d]]
    if rows.size == 0:
        return []
    dev = ops.device[rows].astype(np.int64)
    window = measure_within(ev.breakdown.kernel_sets.any, dev, ops.start[rows], ops.end[rows])
    copies = pl.DataFrame(
        {
            "row": rows,
            "device": dev,
            "start": ops.start[rows],
            "in_loop": _in_loop(ev, ops.launch[rows]),
            "transfer_ns": ops.end[rows] - ops.start[rows],
            "window_ns": window.astype(np.int64),
        }
    )
    all_h2d = dict(zip(*np.unique(ops.device[h2d], return_counts=True), strict=True))
    per = "per step" if steps else "in the capture (no steps found)"
    out = []
    for (d,), mine in copies.group_by(["device"], maintain_order=True):
        s = late_copies.summary(mine) | {"of": int(all_h2d[d])}  # of all its copies back, waited on or not
        if not s["count"]:
            continue
        late_rows = late_copies.late(mine)["row"].to_numpy()
        one = late_copies.per_step(s, len(steps))
        idle = _idle_beside(ev, late_rows, d)
        out.append(
            Finding(
                "late-copies-back",
                "problem",
                f"{ev.device_word} {d}: {late_copies.sentence(one, per)}"
                + _overlap_clause(ev, s["waited_ns"], idle, len(steps))
                + (f" ({len(steps)} steps)" if len(steps) > 1 else ""),
                TPU_FIX.get(late_copies.fix(s), late_copies.fix(s)) if ev.on_tpu else late_copies.fix(s),
                where={"device": str(d)},
                evidence={k: v for k, v in s.items() if k != "worst"} | {"steps": len(steps)},
                view="streams",
                attributed_ns=s["waited_ns"],  # the late copies' transfers less the kernel time beside them
                change=changes.stalls_of(ev, late_rows, f"the {s['count']} late copies back of {ev.device_word} {d}"),
                **ev.basis_device(d),
            )
        )
    return out


def _idle_beside(ev: Evidence, rows: np.ndarray, device: int) -> int:
    """ns of the union of copies *rows* (of *device*) during which no kernel of the device ran."""
    ops = ev.need_stalls().deps.ops
    spans = union(np.full(rows.size, device, dtype=np.int64), ops.start[rows], ops.end[rows])
    return length_by_group(difference(spans, ev.breakdown.kernel_sets.any)).get(device, 0)


def _overlap_clause(ev: Evidence, waited_ns: int, idle_ns: int, steps: int) -> str:
    """When the late copies were in flight together, their waits (each one's transfer less its compute)
    count the same idle time more than once: the clause says what the device stood idle beside them."""
    if 20 * waited_ns <= 21 * idle_ns:  # within 5%: copies one after another
        return ""
    idle = idle_ns // max(steps, 1)
    return (
        f"; the copies were in flight together, so their waits overlap: the {ev.device_word} ran no kernel "
        f"beside them for {ms(idle)}{' per step' if steps else ''}"
    )


def _in_steps(steps: list[dict], t: np.ndarray) -> np.ndarray:
    """Per time *t*: inside one of *steps* (``start_ns``, ``end_ns``); every time when there are none."""
    if not steps:
        return np.ones(t.size, dtype=bool)
    lo = np.sort(np.array([s["start_ns"] for s in steps], dtype=np.int64))
    hi = np.array([s["end_ns"] for s in sorted(steps, key=lambda s: s["start_ns"])], dtype=np.int64)
    i = np.searchsorted(lo, t, side="right") - 1
    return (i >= 0) & (t < hi[np.maximum(i, 0)])


def _in_loop(ev: Evidence, launch: np.ndarray) -> np.ndarray:
    """Per launch time: inside the range of an XLA loop thunk (``hlo_op=while...``) on the host."""
    r = ev.breakdown.ranges.ranges
    if "hlo_op" not in r.columns:
        return np.zeros(launch.size, dtype=bool)
    loops = r.filter(pl.col("hlo_op").str.starts_with("while").fill_null(False))
    if loops.height == 0:
        return np.zeros(launch.size, dtype=bool)
    iv = union(np.zeros(loops.height, dtype=np.int64), loops["start"].to_numpy(), loops["end"].to_numpy())
    return measure_within(iv, np.zeros(launch.size, dtype=np.int64), launch, launch + 1) > 0
