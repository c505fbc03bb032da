"""The policy decision: memory, FLOPs and speed per policy, and the compiler's plan against what
the trace shows moving.  Pure functions over runs (``stored.summary.RunSummary``; a run document is read
into one) and plan documents (``profile-step plan``).

Definitions (also in the README):

- *peak device memory, measured*: the largest ``peak_bytes_in_use`` over the
  run's devices from ``jax.Device.memory_stats()`` at the end of the captured
  window; without it (a CPU) the peak of the trace's CUDA memory events.
- *peak device memory, compiled*: what one execution of the step's compiled
  module keeps resident: arguments + outputs not aliased to arguments +
  temporaries (``memory_analysis()``); *host memory, compiled*: the same for
  memory space 5 (the offloaded activations).
- *host bytes planned per step*: bytes of the plan's device-to-host movements
  per step (``profiler.xla.plan``); *moved per step*: device-to-host bytes the
  trace shows over the capture divided by its step ranges.
- *FLOPs per step*: XLA's cost analysis of the step's module (per device: an
  SPMD module is the program of one device); *TFLOP/s per device*: FLOPs per
  step / median step time; *recomputation*: FLOPs per step / the ``none``
  policy's - 1; *MFU*: the script's declared model FLOPs per step / median
  step time / the device's peak (``targets.PEAK_TFLOPS``, or ``--peak-tflops``).
- *exposed* and *stalled copy time*: per-step medians of the offload copies'
  exposed time and of the compute time stalled waiting for them.
- *spread of the steps*: the shortest and longest included step (and the
  interquartile range); two policies whose median steps differ by less than the
  larger of their two spreads (longest - shortest) are *within the noise*: the
  table says so instead of ranking them; unless their steps do not overlap
  (every step of one shorter than every step of the other: one slow step
  widened a spread, the order is measured).
- *same step*: runs whose step modules have the same HLO fingerprint
  (``profiler.xla.fingerprint``) ran the same program; when their policies
  differ, the policy had no effect on what the compiler saw.
- *host placements*: values the step's HLO places in memory space 5 (entry
  parameters, outputs, instructions).  XLA:CPU keeps them in the device's own
  memory: there they count in compiled dev, and compiled host is 0 B.
"""

from __future__ import annotations

import re
import shlex
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from profiler.analysis.accuracy import CALIBRATED, CALIBRATED_XLA, of_costs
from profiler.analysis.offload_expected import declared_offloads
from profiler.analysis.offload_plan import by_layer, label
from profiler.conventions import NO_NVTX_NOTE, NVTX_REQUIREMENT, is_tpu_name
from profiler.stored.summary import RunSummary, StepRow
from profiler.xla.buffers import device_bytes, resident_bytes
from profiler.xla.compiled import unparsed_why
from profiler.xla.same_program import difference, same_program
from profiler.xla.step_program import StepProgram, program_label
from profiler.xla.targets import peak_tflops

DIFF_TOLERANCE = 0.05  # planned and moved bytes within 5% agree
# a thunk range without op path (``Thunk:#hlo_op=copy-start.3#``, what XLA names ops that carry no
# op_name) that the attribution's parser left unparsed still names its instruction
_HLO_OP = re.compile(r"^Thunk:#(?:.*,)?hlo_op=([^,#]+)")
BASELINE_POLICY = "none"


# --- the step's compiled program ---------------------------------------------------------------
def _module_of(mods: list[dict[str, Any]], name: str | None, pid: int | None) -> dict[str, Any] | None:
    """The compiled.json entry of program (*name*, *pid*): by id; by name when the id is unknown, the
    last compiled (the highest id, as the capture matched it)."""
    if name is None:
        return None
    same = [m for m in mods if m.get("name") == name]
    if pid is None:
        return max(same, key=lambda m: m.get("id") if isinstance(m.get("id"), int) else -1) if same else None
    return next((m for m in same if m.get("id") == pid), None)


def step_compiled(compiled: dict[str, Any] | None, step: StepProgram | None = None) -> dict:
    """The step program's compiled module from a run's ``compiled.json``, its plan labelled with layers.

    *step*: the program whose executions the trace shows as the steps (``Breakdown.module_steps``,
    by the one rule of ``profiler.xla.step_program``); without one (no executions in the trace),
    the program the capture chose by the same rule from the start-up hook's counts.  Memory, FLOPs
    and host placements come from that program's HLO only; where the dump lacks it, from what the
    script handed over (``annotate.compiled_step``, said), else none.
    """
    if not compiled:
        return {"module": None, "chosen_by": None, "notes": ["no compiled.json in the run folder"]}
    mods = compiled.get("modules") or []
    handed_doc = compiled.get("handed_over") or {}
    handed = handed_doc.get("module")
    notes = list(compiled.get("notes") or [])
    if step is not None and step.name is not None:
        name, pid, why = step.name, step.program_id, step.sentence
    else:
        rec = compiled.get("step_program") or {}
        name, pid, why = rec.get("name"), rec.get("program_id"), compiled.get("chosen_by")
        if name is None:  # a compiled.json written before programs were recorded: its label
            old = next((m for m in mods if m.get("label") == compiled.get("step_module")), None)
            name, pid = (old["name"], old.get("id")) if old else (handed, None)
    chosen, ran = _module_of(mods, name, pid), None
    if step is not None and step.name is not None and handed and step.name != handed:
        # the rule narrows to the handed-over name wherever it ran: it never ran as one program
        # (a step dispatched layer by layer): the numbers are those of the program handed over
        own = _module_of(mods, handed, None)
        if own is not None or handed_doc.get("cost") or handed_doc.get("memory"):
            chosen, own_id = own, (own or {}).get("id")
            name, pid = handed, (own_id if isinstance(own_id, int) and own_id >= 0 else None)
            why = (  # one sentence for every run of the script (said once); which programs ran: programs_ran
                f"{program_label(name, pid)}: the step the script handed to annotate.compiled_step, which never "
                "ran as one program"
            )
            ran = step.sentence
    if chosen is None and name is not None and pid is not None:
        fallback = next((m for m in mods if m.get("name") == name and m.get("id") == -1), None)  # handed over
        said = f"the run folder's XLA dump holds no module of {program_label(name, pid)}"
        notes.append(said + (": its numbers are those annotate.compiled_step handed over" if fallback else ""))
        chosen = fallback
    out: dict[str, Any] = {"step_program": program_label(name, pid) if name else None, "step_name": name}
    out["program_id"] = pid
    out["programs_ran"] = ran  # of the programs that ran, which and why none is the step (handed over only)
    if chosen is None:
        same = name is not None and name == handed
        out.update(module=None if not same else handed, chosen_by=why, notes=notes, plan=None)
        out["memory"] = handed_doc.get("memory") if same else None
        out["cost"] = handed_doc.get("cost") if same else None
        out["signature"] = handed_doc.get("signature") if same else None
        return out
    signature = chosen.get("signature") or (handed_doc.get("signature") if chosen["name"] == handed else None)
    memory = chosen.get("memory") or (handed_doc.get("memory") if chosen["name"] == handed else None)
    cost = chosen.get("cost") or (handed_doc.get("cost") if chosen["name"] == handed else None)
    return {
        **out,
        "module": chosen.get("label") or chosen["name"],
        "chosen_by": why,
        "memory": memory,
        "cost": cost,
        "plan": label(chosen.get("plan")),
        "plan_note": chosen.get("plan_note"),
        "platform": chosen.get("platform"),
        "fingerprint": (chosen.get("fingerprint") or {}).get("value"),
        "signature": signature,
        "agreement": compiled.get("agreement"),
        "notes": notes + list(chosen.get("notes") or []),
    }


# --- one row per run ----------------------------------------------------------------------------
def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def step_spread(steps: Sequence[StepRow] | Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """Shortest, longest and interquartile range of the included steps' durations (ns)."""
    durations = (s.duration_ns if isinstance(s, StepRow) else s.get("duration_ns") for s in steps)
    d = sorted(float(x) for x in durations if x is not None)
    if not d:
        return {"step_min_ns": None, "step_max_ns": None, "step_spread_ns": None, "step_iqr_ns": None}
    iqr = None
    if len(d) >= 2:
        q1, _, q3 = statistics.quantiles(d, n=4, method="inclusive")
        iqr = q3 - q1
    return {"step_min_ns": d[0], "step_max_ns": d[-1], "step_spread_ns": d[-1] - d[0], "step_iqr_ns": iqr}


def is_cpu(row: dict[str, Any]) -> bool:
    """Whether a policy row's run ran on a CPU (its compiled step's platform or its devices)."""
    return row.get("platform") == "cpu" or (row.get("device_kind") or "").lower() == "cpu"


def measured_memory(run: RunSummary | dict[str, Any]) -> tuple[int | None, int | None, str | None]:
    """(peak bytes, limit bytes, source) of the run's devices."""
    run = RunSummary.of(run)
    dm = run.runtime.get("device_memory") or (run.manifest or {}).get("device_memory") or {}
    per = [d for d in dm.get("devices") or [] if d.get("peak_bytes_in_use") is not None]
    if per:
        limits = [d["bytes_limit"] for d in per if d.get("bytes_limit") is not None]
        return max(d["peak_bytes_in_use"] for d in per), (max(limits) if limits else None), "memory_stats()"
    trace_peaks = [v for v in run.peak_memory_bytes.values() if v is not None]
    if trace_peaks:
        return max(trace_peaks), None, "CUDA memory events (trace)"
    return None, None, dm.get("note")


def device_kind(run: RunSummary | dict[str, Any]) -> str | None:
    run = RunSummary.of(run)
    devs = (run.manifest or {}).get("devices") or []
    kinds = [d.get("kind") for d in devs if d.get("kind")]
    return kinds[0] if kinds else (run.gpus or (None,))[0]


def policy_row(run: RunSummary | dict[str, Any], peak_override: float | None = None) -> dict[str, Any]:
    """Everything the per-policy table shows for one run (see the module docstring)."""
    run = RunSummary.of(run)
    comp = run.compiled or {"notes": ["run summary without the compiled step"]}
    steps = run.included_steps
    n_steps = len(run.steps)
    # per device: the trace's step and copy numbers are sums over its GPUs (an SPMD step runs on each)
    n_dev = run.device_count
    median_ns = run.median_step_ns
    peak, limit, mem_source = measured_memory(run)
    memory = comp.get("memory") or {}
    plan = comp.get("plan")
    flops = (comp.get("cost") or {}).get("flops")
    model_flops = run.runtime.get("model_flops_per_step")
    written_by = run.runtime.get("jaxlib") or ((run.manifest or {}).get("versions") or {}).get("jaxlib")
    notes = comp.get("notes") or []
    kind = device_kind(run)
    peak_tf = peak_override if peak_override is not None else peak_tflops(kind)
    secs = median_ns / 1e9 if median_ns else None
    exposed = _median([s.exposed_ns / n_dev for s in steps if s.exposed_ns is not None])
    stalls = [s.stall_ns / n_dev for s in steps if s.stall_ns is not None]
    stalled = (
        _median(stalls)
        if stalls
        else (run.stall_ns / n_steps / n_dev if run.stall_ns is not None and n_steps else None)
    )
    gpu = run.gpu_ran  # a summary without the key: say nothing of the GPU
    if not gpu:  # no GPU ran: copy time not hidden and stalls are not measured, not 0
        exposed = stalled = None
    copies = run.copies
    placements = (plan or {}).get("host_placements") or {}

    def moved(direction: str) -> float | None:
        """Bytes per step and device; none without steps (a capture is not a step)."""
        if not copies or not n_steps:
            return None
        return (copies.get(direction) or {}).get("bytes", 0) / n_steps / n_dev

    return {
        "policy": run.policy,
        "trace": run.trace,
        "gpu_activity": gpu,
        "steps": len(steps),
        "median_step_ns": median_ns,
        **step_spread(steps),
        "within_spread_of": [],
        "peak_device_bytes": peak,
        "peak_device_source": mem_source,
        "device_limit_bytes": limit,
        "compiled_device_bytes": resident_bytes(memory, is_tpu_name(kind)) if memory else None,
        "compiled_host_bytes": device_bytes(memory, host=True) if memory else None,
        "platform": comp.get("platform"),
        "host_placements": placements.get("layouts"),
        "host_placed_bytes": (placements.get("entry_parameter_bytes", 0) + placements.get("entry_output_bytes", 0))
        if placements
        else None,
        "host_in_device_memory": comp.get("platform") == "cpu",
        "planned_d2h_bytes_per_step": plan["d2h_bytes_per_step"] if plan else None,
        "planned_h2d_bytes_per_step": plan["h2d_bytes_per_step"] if plan else None,
        "moved_d2h_bytes_per_step": moved("d2h"),
        "moved_h2d_bytes_per_step": moved("h2d"),
        "devices": n_dev,
        "flops_per_step": flops,
        "tflops": flops / secs / 1e12 if flops and secs else None,
        "model_flops_per_step": model_flops,
        "mfu": model_flops / secs / (peak_tf * 1e12) if model_flops and secs and peak_tf else None,
        "device_kind": kind,
        "peak_tflops": peak_tf,
        "exposed_ns": exposed,
        "stalled_ns": stalled,
        "recompute_overhead": None,
        "step_module": comp.get("module"),
        "step_program": comp.get("step_program"),
        "step_name": comp.get("step_name"),
        "step_signature": comp.get("signature"),
        "program_differs": None,  # another program than the table's reference row's (xla.same_program)
        "hlo_fingerprint": comp.get("fingerprint"),
        "same_hlo_as": [],
        "step_chosen_by": comp.get("chosen_by"),
        "plan_note": comp.get("plan_note"),
        "notes": list(dict.fromkeys([*no_step_ranges(run), *(unparsed_why(n, written_by) for n in notes)])),
    }


def no_step_ranges(run: RunSummary) -> list[str]:
    """Why a run has no steps when the script's Python had no nvtx package: the start-up hook
    counted the step's executions but could not write them into the trace."""
    hook = (run.manifest or {}).get("startup_hook") or {}
    if run.steps or not any(str(n).startswith(NO_NVTX_NOTE) for n in hook.get("notes") or []):
        return []
    program = (run.manifest or {}).get("program") or []
    first = str(program[0]) if program else ""
    exe = hook.get("executable") or (first if Path(first).name.startswith("python") else "python")
    return [
        "no steps: the script's Python has no nvtx package, so profile-step's start-up hook counted the "
        "executions but wrote no ranges (XLA:CPU writes none of its own); install it: "
        f"{shlex.quote(exe)} -m pip install '{NVTX_REQUIREMENT}'"
    ]


def same_hlo(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Groups of different policies whose step modules have the same HLO fingerprint; fills each
    row's ``same_hlo_as`` with the other policies of its group."""
    by_fp: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("hlo_fingerprint"):
            by_fp.setdefault(r["hlo_fingerprint"], []).append(r)
    groups = []
    for fp, members in by_fp.items():
        policies = list(dict.fromkeys(r["policy"] for r in members))
        if len(policies) < 2:
            continue
        for r in members:
            r["same_hlo_as"] = [p for p in policies if p != r["policy"]]
        groups.append({"fingerprint": fp, "policies": policies, "cpu": all(is_cpu(r) for r in members)})
    return groups


def step_difference(a: dict[str, Any], b: dict[str, Any]) -> tuple[float, float] | None:
    """(difference of two rows' median steps, the larger of their spreads): the difference is within
    the noise when it is under that spread.  None when they cannot be compared: a median step or
    both spreads missing, different kinds of device (a CPU run's steps say nothing about a GPU
    run's, nor an A100's about an H100's), or different programs (``xla.same_program``)."""
    kinds = {a.get("device_kind"), b.get("device_kind")} - {None}
    if is_cpu(a) != is_cpu(b) or len(kinds) > 1 or same_program(a, b) is False:
        return None
    spreads = [x for x in (a["step_spread_ns"], b["step_spread_ns"]) if x is not None]
    if not spreads or None in (a["median_step_ns"], b["median_step_ns"]):
        return None
    return abs(a["median_step_ns"] - b["median_step_ns"]), max(spreads)


def disjoint(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether every included step of one row is shorter than every included step of the other."""
    lo_a, hi_a, lo_b, hi_b = (r.get(k) for r in (a, b) for k in ("step_min_ns", "step_max_ns"))
    if None in (lo_a, hi_a, lo_b, hi_b):
        return False
    return hi_a < lo_b or hi_b < lo_a


def within_noise(a: dict[str, Any], b: dict[str, Any]) -> bool | None:
    """Whether two rows' median steps differ by less than the larger of their spreads while their steps
    overlap (module docstring); None when they cannot be compared (``step_difference``)."""
    diff = step_difference(a, b)
    return None if diff is None else diff[0] < diff[1] and not disjoint(a, b)


def _pairs(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any], float, float]]:
    """(a, b, difference of their median steps, the larger spread) for every two rows that can be
    compared (``step_difference``)."""
    out = []
    for i, a in enumerate(rows):
        for b in rows[i + 1 :]:
            diff = step_difference(a, b)
            if diff is not None:
                out.append((a, b, *diff))
    return out


def runs_apart(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two runs of one policy whose median steps differ by more than the larger of their spreads:
    the machine changed between the runs, and neither stands for the policy."""
    return [
        {"policy": a["policy"], "median_steps_ns": [a["median_step_ns"], b["median_step_ns"]], "spread_ns": spread}
        for a, b, diff, spread in _pairs(rows)
        if a["policy"] == b["policy"] and diff > spread
    ]


def within_spread(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pairs of different policies whose median steps differ by less than the larger of their
    spreads while their steps overlap (see the module docstring); fills each row's ``within_spread_of``."""
    out = []
    for a, b, diff, spread in _pairs(rows):
        if a["policy"] != b["policy"] and diff < spread and not disjoint(a, b):
            out.append({"policies": [a["policy"], b["policy"]], "difference_ns": diff, "spread_ns": spread})
            a["within_spread_of"].append(b["policy"])
            b["within_spread_of"].append(a["policy"])
    return out


Predictor = Callable[[RunSummary, dict[str, Any]], dict[str, Any]]


def policy_table(
    runs: list[RunSummary] | list[dict[str, Any]], peak_override: float | None = None, predict: Predictor | None = None
) -> dict[str, Any]:
    """One row per run, in the runs' order; recomputation against the ``none`` policy's FLOPs;
    policies that compiled to the same step; step times within each other's spread; CPU runs.

    *predict* (run, row) -> the static prediction of the run's own step against its measurement
    (``profiler.predict.recorded.predicted``, which reads the run folder's HLO), as ``predicted``."""
    summaries = [RunSummary.of(r) for r in runs]
    rows = [policy_row(r, peak_override) for r in summaries]
    if predict is not None:
        for row, run in zip(rows, summaries, strict=True):
            row["predicted"] = predict(run, row)
    base_row = next((r for r in rows if r["policy"] == BASELINE_POLICY and r["flops_per_step"]), None)
    base = base_row["flops_per_step"] if base_row else None
    ref = mark_other_programs(rows, base_row)
    for r in rows:
        if base and r["flops_per_step"] and same_program(r, base_row or {}) is not False:
            r["recompute_overhead"] = r["flops_per_step"] / base - 1
    return {
        "baseline": BASELINE_POLICY if base else None,
        "rows": rows,
        "same_hlo": same_hlo(rows),
        "within_spread": within_spread(rows),
        "runs_apart": runs_apart(rows),
        "cpu_runs": [r["policy"] for r in rows if is_cpu(r)],
        # the row the others' programs are compared with (``program_differs``), by its trace
        "program_reference": ref["trace"] if ref is not None else None,
    }


def mark_other_programs(rows: list[dict[str, Any]], ref: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Fill ``program_differs`` of the rows whose step is another program than the reference row's
    (*ref*: the baseline's, else the first row whose program is known); returns the reference."""
    ref = ref if ref is not None and ref.get("step_name") else next((r for r in rows if r.get("step_name")), None)
    if ref is None:
        return None
    for r in rows:
        if r is not ref and same_program(r, ref) is False:
            r["program_differs"] = difference(r, ref, f"the {ref['policy']!r} run")
    return ref


# --- planned against moved ---------------------------------------------------------------------
def per_step_and_gpu(run: RunSummary | dict[str, Any]) -> tuple[int, int, str]:
    """(steps, GPUs, words): what divides a run's trace-wide byte sums (every GPU, the whole window)
    to give them per step and GPU, as the policy table shows them.  Without steps the divisor is
    1 step, and the words say so: a capture is not a step."""
    run = RunSummary.of(run)
    n_steps, n_dev = len(run.steps), run.device_count
    words = "per step and GPU" if n_steps else "per GPU, over the whole capture (no steps)"
    return max(n_steps, 1), n_dev, words


OUTSIDE = "(outside any XLA instruction range)"
# per step, less than one activation could be (METRICS.md's 1 MiB, where copies start to have a link
# rate): what the host moves itself outside the step's instructions, a scalar loss or a flag, not an offload
HOST_FETCH_BYTES = 1 << 20
HOST_FETCH = "host's own copies (< 1 MiB per step), not an offload"


def planned_vs_moved(run: RunSummary | dict[str, Any], tolerance: float = DIFF_TOLERANCE) -> dict[str, Any]:
    """Per layer and activation: planned bytes per step (the step module's plan, which each GPU
    runs) against the bytes the trace moved per step and GPU (``per_step_and_gpu``: ``per`` says
    which), matched through the XLA instruction that moved them.

    ``flag``: ``planned, not seen`` (the compiler planned an offload that never showed up),
    ``moved, not planned`` (copies the plan does not explain; ``moved (no plan to compare)`` without
    a plan), ``differs`` (more than *tolerance*
    apart), else ``ok``; the copies outside any XLA instruction, under ``HOST_FETCH_BYTES`` per step
    in each direction, are the host's own (a loss fetched, 4 bytes): ``HOST_FETCH``, not a difference.
    """
    run = RunSummary.of(run)
    comp = run.compiled or {}
    plan = comp.get("plan")
    n_steps, n_dev, per = per_step_and_gpu(run)
    share = n_steps * n_dev
    owner: dict[str, tuple[str | None, str | None]] = {}
    for m in (plan or {}).get("movements", []):
        owner.setdefault(m["instruction"], (m.get("layer"), m.get("activation")))
    # a loop the trace times as one range (a scan's while): its copies carry the loop's name, so the
    # movements inside it are one row, their layers and activations joined
    loops = _loop_keys(plan, {op["op"] for op in run.copy_ops})
    owner.update(loops)
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}

    def row(layer: str | None, act: str | None, op: str | None = None) -> dict[str, Any]:
        key = (layer, act, op)
        return rows.setdefault(
            key,
            {
                "layer": layer,
                "activation": act,
                "unplanned_op": op,
                "planned_d2h_bytes": 0,
                "planned_h2d_bytes": 0,
                "moved_d2h_bytes": 0.0,
                "moved_h2d_bytes": 0.0,
            },
        )

    for m in (plan or {}).get("movements", []):  # per step; per execution where the count is unknown
        loop = m.get("top") if m.get("top") != m["instruction"] else None
        x = row(*loops[loop]) if loop in loops else row(m.get("layer"), m.get("activation"))
        x[f"planned_{m['direction']}_bytes"] += m["bytes_per_step"] if m["bytes_per_step"] is not None else m["bytes"]
    seen = {"d2h": 0, "h2d": 0}
    for op in run.copy_ops:
        name = op["op"]
        m = _HLO_OP.match(name)
        if m and name not in owner:
            name = m.group(1)
        for d in ("d2h", "h2d"):
            b = op.get(d + "_bytes") or 0
            if not b:
                continue
            seen[d] += b
            x = row(*owner[name]) if name in owner else row(None, None, name)
            x[f"moved_{d}_bytes"] += b / share
    for d in ("d2h", "h2d"):
        rest = (run.copy(d).get("bytes") or 0) - seen[d]
        if rest > 0:
            row(None, None, OUTSIDE)[f"moved_{d}_bytes"] += rest / share
    out = []
    for x in rows.values():
        flags = []
        small = all(x[f"moved_{d}_bytes"] < HOST_FETCH_BYTES for d in ("d2h", "h2d"))
        if x["unplanned_op"] == OUTSIDE and small:
            x["flag"] = HOST_FETCH
            out.append(x)
            continue
        for d in ("d2h", "h2d"):
            p, m = x[f"planned_{d}_bytes"], x[f"moved_{d}_bytes"]
            if p and not m:
                flags.append(f"{d} planned, not seen")
            elif m and not p:
                flags.append(f"{d} moved, not planned" if plan else f"{d} moved (no plan to compare)")
            elif p and abs(m - p) > tolerance * p:
                flags.append(f"{d} differs ({100 * (m - p) / p:+.0f}%)")
        x["flag"] = "; ".join(flags) if flags else "ok"
        out.append(x)
    from profiler.units import natural_key

    out.sort(key=lambda x: (x["unplanned_op"] is not None, natural_key(x["layer"] or "~"), x["activation"] or "~"))
    return {
        "policy": run.policy,
        "trace": run.trace,
        "step_module": comp.get("module"),
        "step_program": comp.get("step_program"),
        "step_chosen_by": comp.get("chosen_by"),
        "plan_note": comp.get("plan_note"),
        "steps": n_steps,
        "included_steps": len(run.included_steps),  # the policy table's steps: those in the median
        "devices": n_dev,
        "per": per,
        "rows": out,
        "differences": sum(1 for x in out if x["flag"] not in ("ok", HOST_FETCH)),
        **_not_offloaded(plan, run.manifest),
    }


def _loop_keys(plan: dict[str, Any] | None, traced: set[str]) -> dict[str, tuple[str | None, str | None]]:
    """Per entry instruction that the trace names (*traced*: its copies' ops) and the plan moves inside
    (a scan's ``while``, timed as one range), the row it stands for: the (layer, activation) of its
    movements that the trace does not name themselves, each joined (``a, b``; None where none is known)."""
    moves = (plan or {}).get("movements", [])
    named = {m["instruction"] for m in moves}
    inside: dict[str, list[dict[str, Any]]] = {}
    for m in moves:  # a movement the trace names itself (a TPU's loop body) keeps its own row
        top = m.get("top")
        if top and top != m["instruction"] and top in traced and top not in named and m["instruction"] not in traced:
            inside.setdefault(top, []).append(m)

    def joined(values: list[str | None]) -> str | None:
        named = sorted({v for v in values if v})
        return ", ".join(named) if named else None

    return {
        top: (joined([m.get("layer") for m in ms]), joined([m.get("activation") for m in ms]))
        for top, ms in inside.items()
    }


def _not_offloaded(plan: dict[str, Any] | None, manifest: dict[str, Any] | None) -> dict[str, Any]:
    """The names the run declares it offloads (``offload_expected.declared_offloads``) that no movement of
    its compiled plan carries (``not_offloaded``; by whom they were declared: ``declared_by``); said only
    where the plan names the activation of every value it moves (else nothing can be ruled out)."""
    moved = [m.get("activation") for m in (plan or {}).get("movements") or []]
    declared = declared_offloads(manifest)
    if not moved or None in moved or declared is None:  # a movement without a name may carry any of them
        return {"not_offloaded": [], "declared_by": None}
    named = set(moved)
    names, who = declared
    return {"not_offloaded": [n for n in dict.fromkeys(names) if n not in named], "declared_by": who}


# --- plans compiled for a target (profile-step plan) -----------------------------------------
def plan_table(doc: dict[str, Any], mem_fraction: float = 0.75) -> dict[str, Any]:
    """Per (policy, batch): device and host memory, whether it fits, planned host traffic, FLOPs,
    recomputation; and per policy and batch the planned bytes per layer and activation.

    ``host_bytes`` is the most host memory one step holds at once (``memory_analysis()``: XLA
    reuses the host space of copies never in host memory together), ``planned_d2h_bytes_per_step``
    every byte sent to host in one step: the first is smaller when the schedule never keeps all
    layers' offloaded data in host memory together.  ``host_live_peak_bytes`` recomputes the
    first from the plan's schedule (a cross-check), ``late_d2h`` counts the device-to-host copies
    scheduled after the backward pass began (their data stays in device memory until then)."""
    from profiler.analysis.offload_vs_remat import calibrated_rows, offload_vs_remat, prediction_rows

    target = doc["target"]
    limit = int(target["memory_bytes"] * mem_fraction) if target.get("memory_bytes") else None
    rows, layers, predictions, calibrated = [], [], [], []
    for res in doc["results"]:
        comp = res.get("compiled") or {}
        memory = comp.get("memory") or {}
        plan = label(res.get("plan"))
        dev = device_bytes(memory) if memory else None
        rows.append(
            {
                "policy": res["policy"],
                "batch": res["batch"],
                "status": res["status"],
                "module": comp.get("module"),
                "device_bytes": dev,
                "host_bytes": device_bytes(memory, host=True) if memory else None,
                "limit_bytes": limit,
                "fits": dev <= limit if dev is not None and limit is not None else None,
                "planned_d2h_bytes_per_step": plan["d2h_bytes_per_step"] if plan else None,
                "planned_h2d_bytes_per_step": plan["h2d_bytes_per_step"] if plan else None,
                "host_live_peak_bytes": (plan or {}).get("host_live_peak_bytes"),
                "late_d2h": (plan or {}).get("late_d2h"),
                "flops_per_step": (comp.get("cost") or {}).get("flops"),
                "recompute_overhead": None,
                "remat_clones": res.get("remat_clones"),
                "hlo_fingerprint": res.get("fingerprint"),
                "step_name": comp.get("module"),
                "step_signature": comp.get("signature"),
                "program_differs": None,
                "same_hlo_as": [],
                "plan_note": res.get("plan_note"),
                "notes": list(res.get("notes") or []),
                "dir": res.get("dir"),
            }
        )
        layers.append({"policy": res["policy"], "batch": res["batch"], "layers": by_layer(plan)})
        rows[-1]["predictions"] = prediction_rows(rows[-1], res)
        pred_notes = (res.get("prediction") or {}).get("notes") or []
        rows[-1]["notes"] += [n for n in pred_notes if n not in rows[-1]["notes"]]
        predictions += rows[-1]["predictions"]
        calibrated += calibrated_rows(rows[-1], res)
    base_rows = {r["batch"]: r for r in rows if r["policy"] == BASELINE_POLICY and r["flops_per_step"]}
    base = {b: r["flops_per_step"] for b, r in base_rows.items()}
    for b in dict.fromkeys(r["batch"] for r in rows):  # one batch's policies: the same program but for the policy
        mark_other_programs([r for r in rows if r["batch"] == b], base_rows.get(b))
    same = [
        g | {"batch": b}
        for b in dict.fromkeys(r["batch"] for r in rows)
        for g in same_hlo([r for r in rows if r["batch"] == b])
    ]
    for r in rows:
        if r["same_hlo_as"]:
            r["notes"].append(
                f"the same compiled step as {', '.join(r['same_hlo_as'])} (HLO fingerprint {r['hlo_fingerprint']}): "
                "the policy had no effect on the program"
            )
        if r["program_differs"]:
            r["notes"].append(f"its step is {r['program_differs']}: no recompute percentage between them")
        if base.get(r["batch"]) and r["flops_per_step"] and not r["program_differs"]:
            r["recompute_overhead"] = r["flops_per_step"] / base[r["batch"]] - 1
        if r["remat_clones"]:
            r["notes"].append(
                f"XLA rematerialized {r['remat_clones']} instructions to fit the memory limit "
                "(.remat clones in the compiled HLO)"
                + (
                    f"; 'recompute' at this batch is against this {BASELINE_POLICY!r}, which already "
                    "recomputes (a negative value: less recomputation than XLA chose)"
                    if r["policy"] == BASELINE_POLICY
                    else ""
                )
            )
    # plan --calibrate over modules that carry XLA's own estimates took them (calibrate.calibrated_costs)
    by_xla = bool(calibrated) and all((p.get("costed") or {}).get("xla") for p in calibrated)
    cal_acc = CALIBRATED_XLA if by_xla else CALIBRATED
    acc = of_costs([p.get("cost_model") for p in predictions])
    return {
        "label": doc["label"],
        "target": target,
        "mem_fraction": mem_fraction,
        "limit_bytes": limit,
        "rows": rows,
        "layers": layers,
        "same_hlo": same,
        "links": doc.get("links") or [],
        "predictions": predictions,
        "offload_vs_remat": offload_vs_remat(predictions, acc),
        # how far such predictions were off on real steps: the line the terminal and the dashboard print
        "accuracy": acc.line() if predictions else None,
        # plan --calibrate: the same predictions with the costs a run measured
        "calibration": doc.get("calibration"),
        "calibrated": calibrated,
        "calibrated_vs_remat": offload_vs_remat(calibrated, cal_acc),
        "calibrated_accuracy": cal_acc.line() if calibrated else None,
    }


# --- the frontier: memory against speed, one point per run -------------------------------------
def frontier(tab: dict[str, Any]) -> list[dict[str, Any]]:
    """One point per row of ``policy_table``: the policy's trade of device memory against speed.

    ``memory_bytes`` is the measured peak device memory when the run has one, else the compiled
    step's (``memory_source`` says which: ``measured`` or ``compiled``; ``None`` when neither);
    ``copy_cost_ns`` = exposed + stalled copy time per step (medians, ``None`` when neither is known);
    ``step_ns`` and ``tflops`` are the table's median step and TFLOP/s per device.
    """
    out = []
    for r in tab["rows"]:
        measured, compiled = r["peak_device_bytes"], r["compiled_device_bytes"]
        if measured is not None:
            memory, source, detail = measured, "measured", r["peak_device_source"]
        elif compiled is not None:
            memory, source, detail = compiled, "compiled", "memory_analysis() of the step's module"
        else:
            memory, source, detail = None, None, r["peak_device_source"]
        costs = [c for c in (r["exposed_ns"], r["stalled_ns"]) if c is not None]
        out.append(
            {
                "policy": r["policy"],
                "trace": r["trace"],
                "step_ns": r["median_step_ns"],
                "tflops": r["tflops"],
                "memory_bytes": memory,
                "memory_source": source,
                "memory_detail": detail,
                "limit_bytes": r["device_limit_bytes"],
                "copy_cost_ns": sum(costs) if costs else None,
            }
        )
    return out
