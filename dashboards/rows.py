"""The runs table: one row per (run, GPU), short labels, units chosen by magnitude, explanations.

A trace with two GPUs is two rows, never one summed row under one device name.  A row's id is
``<run id>@<device>`` (``<run id>`` alone for a run without GPU activity); the browser only ever
sends these ids back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from profiler.conventions import is_jax_trace_name
from profiler.runs import verdict
from profiler.runs.discover import RunRef
from profiler.stored.summary import RunSummary
from profiler.units import human_time, readable_byte_unit, readable_time_unit

# 4 significant digits, trailing zeros dropped, thousands separated: a column's unit is the one most of
# its values read well in (units.readable_time_unit: between 1 and 10,000), so that a 61 ms and a 3.4 s
# exposed time are 61 and 3,378 ms, and a small value still shows its digits (0.04688, never 0.00)
# beside its count; under 0.01 of the unit it shows as "<0.01"
SIGNIFICANT = ",.4~r"
TINY = 0.01  # a value under this, in its column's unit, shows as "<0.01" (the README's promise)
SOURCE_LABEL = {
    "synthetic": "SYNTHETIC demo",
    "external": "public trace",
    "run": "profile-step run",
    "trace": "trace file",
}
# a run or trace recorded by JAX's own profiler (not nsys), read through its conversion
JAX_SOURCE_LABEL = {"run": "jax.profiler run", "trace": "jax.profiler trace"}
SOURCE_NOTE = (
    "Source: SYNTHETIC demo = made by profile-step's demonstration model (sample_traces/README.md), not a "
    "measurement; public trace = a real GPU trace from a public repository (its repository, commit and "
    "licence on hover and below); profile-step run = captured by profile-step; jax.profiler run or trace = "
    "recorded by JAX's own profiler, not nsys (what such a trace measures: below the table, when one is ticked); "
    "trace file = any other nsys "
    "export. Plain traces (not made by profile-step) carry no policy=NAME or step=N ranges: their policy "
    "shows as (none) and they have no steps or median step. Sizes in binary units (1 MiB = 2^20 bytes); "
    "bandwidth in decimal GB/s (10^9 bytes/s)."
)
HEADER_TIPS = {
    "run": "policy and a short id; the whole name on hover",
    "source": "where the run comes from (see the note below the table)",
    "policy": "the offload policy: profile-step's policy=NAME NVTX range or the run's manifest; "
    "(none): a plain trace without one",
    "device": "one row per GPU: its CUDA device id and name",
    "rank": "rank of a multi-rank job: from the file or folder name (report.3.sqlite, rank3) or the manifest",
    "status": "profile-step's run status (ok, failed, interrupted, ...); plain trace: not made by profile-step",
    "steps": "steps counted in the median (step=N ranges, --step-range, or the executions of the step program, "
    "one compiled program chosen by the rule every command uses; warm-up and outliers left out; a cell's tooltip "
    "says which, and how the program was chosen); none: no steps found",
    "step": "median of the included steps' durations (whole run, all GPUs)",
    "bytes": "bytes copied host<->device (D2H and H2D added) on this GPU over the whole capture (every step of it; "
    "analyze's policy table shows D2H per step)",
    "copies": "number of D2H and H2D copies on this GPU",
    "exposed": "time on this GPU during which an h2d or d2h copy ran and no kernel did, both directions as "
    "one (docs/metrics.md exposed_ns of the offload class: their union), over the whole capture (every step of it; "
    "analyze's policy table shows the median step's): less than the D2H and H2D exposed times added when "
    "the two directions overlap",
    "hidden": "share of copy time overlapped by kernels (docs/metrics.md hidden_fraction); no offload: no copies, or "
    "none inside the steps (the host's own, between steps: a loss or a flag fetched, not an offload)",
    "date": "when the run started (UTC)",
}


@dataclass(frozen=True)
class View:
    """One (run, device) pair: what a table row, a dropdown entry and a chart row stand for."""

    rid: str
    device: str | None

    @property
    def id(self) -> str:
        return self.rid if self.device is None else f"{self.rid}@{self.device}"

    @staticmethod
    def parse(view_id: str) -> View:
        rid, _, dev = view_id.partition("@")
        return View(rid, dev or None)


Run = RunSummary | dict[str, Any]  # a run summary, or the document it is read from


def devices(run: Run) -> list[str]:
    """The run's devices with GPU activity, in numeric order."""
    return RunSummary.of(run).device_ids


def views(ref: RunRef, run: Run) -> list[View]:
    return [View(ref.id, d) for d in devices(run)] or [View(ref.id, None)]


def jax_profiled(ref: RunRef) -> bool:
    """Whether the run's trace was recorded by JAX's profiler (``jax.profiler.trace``), not by nsys."""
    return is_jax_trace_name(ref.trace.name)


def source_text(ref: RunRef) -> str:
    """The source column: where the run comes from, and for a jax.profiler trace that it is one."""
    return (JAX_SOURCE_LABEL.get(ref.source) if jax_profiled(ref) else None) or SOURCE_LABEL[ref.source]


def plain(ref: RunRef, run: Run) -> bool:
    """A trace that profile-step did not make and that names no policy."""
    return ref.manifest is None and RunSummary.of(run).policy == "default"


def short_id(ref: RunRef) -> str:
    """A few characters that tell runs apart: the run folder's id, ``synthetic``, or the trace's short name."""
    if ref.synthetic:
        return "synthetic"
    if ref.manifest is not None:
        folder = ref.trace.parent.name.removesuffix(".partial")
        rid = folder.rsplit("-", 1)[-1]
        rank = ref.manifest.get("rank")
        return f"r{rank} {rid}" if rank is not None else rid
    stem = ref.trace.name
    for suffix in (".sqlite", ".nsys-rep", ".qdrep"):
        stem = stem.removesuffix(suffix)
    stem = stem.split("__", 1)[-1] if ref.provenance is not None else stem  # catalogue names: repo__name
    stem = re.sub(r"_report$", "", stem)
    return stem if len(stem) <= 22 else stem[:21] + "…"


def policy_text(ref: RunRef, run: Run) -> str:
    return "(none)" if plain(ref, run) else RunSummary.of(run).policy


def label(ref: RunRef, run: Run, device: str | None = None) -> str:
    """Short: ``offload_qkv · synthetic · GPU 1``, ``none · 7e3b1b · GPU 0``, ``jacobi_memcpy_nvlink · GPU 3``."""
    parts = [short_id(ref)] if plain(ref, run) else [RunSummary.of(run).policy, short_id(ref)]
    if device is not None:
        parts.append(f"GPU {device}")
    return " · ".join(parts)


def device_text(run: Run, device: str | None) -> str:
    if device is None:
        return "no GPU activity"
    name = RunSummary.of(run).device_name(device)
    return f"GPU {device} · {name or 'unknown GPU (the export names none)'}"


def full_name(ref: RunRef, run: Run | None, device: str | None = None) -> str:
    """Everything that identifies a row, for hovers and tooltips."""
    out = [ref.name]
    if ref.synthetic:
        out.append("SYNTHETIC demonstration run (a model, not a measurement)")
    if ref.provenance is not None:
        p = ref.provenance
        out.append(f"public trace from {p.repo} at {p.commit[:10]} ({p.licence}): {p.description}")
    if jax_profiled(ref):
        out.append("recorded by jax.profiler, not nsys (no CUDA stream waits: stalls not measured)")
    if run is not None:
        out.append(device_text(run, device))
    out.append(str(ref.trace))
    return " — ".join(out)


def _status(ref: RunRef) -> str:
    if ref.synthetic:
        return "synthetic"
    if ref.manifest is None:
        return "plain trace"
    return str(ref.manifest.get("status") or "not recorded")  # a manifest written without a status


def offloads(run: RunSummary, off: dict[str, Any] | None) -> bool:
    """Whether a GPU's copies are an offload: a hidden share, and the run offloads as the verdict counts
    it (``runs.verdict.offloads``: the host's own fetch of a loss between steps, the H200 none run's 4
    bytes, is not one)."""
    return bool(off) and off["hidden_fraction"] is not None and verdict.offloads(run)


def raw_row(ref: RunRef, run: Run, device: str | None) -> dict[str, Any]:
    """One row with its numbers in ns and bytes (scaled to the table's units by ``table``)."""
    run = RunSummary.of(run)
    off = run.device_copies(device).get("offload") if device is not None else None
    man = ref.manifest or {}
    return {
        "id": View(ref.id, device).id,
        "run": label(ref, run),
        "source": source_text(ref),
        "policy": policy_text(ref, run),
        "device": device_text(run, device),
        "rank": run.rank,
        "status": _status(ref),
        "steps": len(run.included_steps) if run.steps else None,
        "step": run.median_step_ns,
        "bytes": off["bytes"] if off else 0,
        "copies": off["count"] if off else 0,
        "exposed": off["exposed_ns"] if off else None,
        "hidden": None if not offloads(run, off) else 100 * off["hidden_fraction"],
        "date": (man.get("started") or "")[:19].replace("T", " "),
        "_has_copies": bool(off and off["count"]),
        "_hidden": bool(off and off["hidden_fraction"]),
        "_source": ref.source,
        "_policy": not plain(ref, run),
        "_group": ref.group,
        "_full": full_name(ref, run, device),
        "_steps": steps_origin(run),
    }


def steps_origin(run: Run) -> str:
    """Where a run's steps and its analysis window come from (the steps cell's tooltip)."""
    run = RunSummary.of(run)
    excluded = [s for s in run.steps if s.excluded]
    source = run.step_source
    text = f"steps: {source}" if source else "no steps found (no step ranges, no XLA module executions)"
    chosen = (run.compiled or {}).get("chosen_by")
    if chosen and (run.compiled or {}).get("step_program"):  # how the step program was chosen, as the CLI says it
        text += f"; step: {chosen}"
    if excluded:
        text += f"; {len(excluded)} left out ({', '.join(sorted({str(s.excluded) for s in excluded}))})"
    win = run.window or {}
    if win.get("source"):
        length = f", {human_time(win['duration_ns'])}" if win.get("duration_ns") is not None else ""
        text += f". Analysis window: {win['source']}{length}"
    elif win:
        text += ". Analysis window: the whole recording" + (f" ({win['note']})" if win.get("note") else "")
    return text


def error_row(ref: RunRef, message: str) -> dict[str, Any]:
    blank = dict.fromkeys(("rank", "steps", "step", "bytes", "copies", "exposed", "hidden", "date"), "")
    return {
        **blank,  # empty, not "none" / "no copies": nothing is known about a run that cannot be read
        "id": ref.id,
        "run": short_id(ref),
        "source": source_text(ref),
        "policy": "-",
        "status": "error",
        "device": "cannot be read (see the card below)",
        "_full": f"{full_name(ref, None)} — cannot be read: {message}",
        "_has_copies": False,
        "_hidden": False,
        "_source": ref.source,
        "_policy": False,
        "_group": ref.group,
    }


def no_trace_row(ref: RunRef) -> dict[str, Any]:
    """A run folder without a trace: its one row, with the reason (no card, no number)."""
    row = error_row(ref, ref.no_trace or "")
    policy = (ref.manifest or {}).get("policy")
    reason = f"no trace: {ref.no_trace}"
    full = f"{full_name(ref, None)} — {reason}"
    return {**row, "policy": policy or "-", "status": "no trace", "device": reason, "_full": full}


def table(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Columns (units chosen by the magnitude of the rows), rows scaled to them, and tooltips."""

    def numbers(key: str) -> list[int | float]:
        return [r[key] for r in rows if isinstance(r.get(key), int | float)]

    t_name, t_div = readable_time_unit(numbers("step"))
    e_name, e_div = readable_time_unit(numbers("exposed"))
    b_name, b_div = readable_byte_unit(numbers("bytes"))
    ranks = numbers("rank")  # the rank column only where a run is a rank of a multi-rank job
    columns = [
        _col("run", "run", "text"),
        _col("source", "source", "text"),
        _col("policy", "policy", "text"),
        _col("device", "GPU", "text"),
        *([_col("rank", "rank", "numeric")] if ranks else []),
        _col("status", "status", "text"),
        _col("steps", "steps", "numeric", nully="none"),
        _col("step", f"median step ({t_name})", "numeric", SIGNIFICANT, nully="no steps"),
        # four significant digits kept, zeros too: "9" beside "8.438" read as a count, not 9.000 GiB
        _col("bytes", f"copied, D2H + H2D, whole capture ({b_name})", "numeric", ",.4r"),
        _col("copies", "copies", "numeric", ",d"),
        _col(
            "exposed",
            f"exposed copies, D2H and H2D as one, whole capture ({e_name})",
            "numeric",
            SIGNIFICANT,
            nully="-",
        ),
        _col("hidden", "hidden %", "numeric", ".1f", nully="no offload"),
        _col("date", "date (UTC)", "text"),
    ]
    scaled = []
    for r in rows:
        out = {k: v for k, v in r.items() if not k.startswith("_")}
        for key, div in (("step", t_div), ("exposed", e_div), ("bytes", b_div)):
            if isinstance(out.get(key), int | float):
                out[key] = out[key] / div
                if 0 < out[key] < TINY:  # too small to show in the column's unit: never 0.00000001863
                    out[key] = f"<{TINY:g}"
        scaled.append(out)
    tips = [
        {"run": {"value": r["_full"], "type": "text"}}
        | ({"steps": {"value": r["_steps"], "type": "text"}} if r.get("_steps") else {})
        for r in rows
    ]
    return columns, scaled, tips


def _col(cid: str, name: str, typ: str, spec: str | None = None, nully: str | None = None) -> dict[str, Any]:
    col: dict[str, Any] = {"id": cid, "name": name, "type": typ}
    fmt: dict[str, Any] = {}
    if spec:
        fmt["specifier"] = spec
    if nully:
        fmt["nully"] = nully
    if fmt:
        col["format"] = fmt
    return col


def header_tooltips(columns: list[dict[str, Any]]) -> dict[str, str]:
    return {c["id"]: HEADER_TIPS[c["id"]] for c in columns if c["id"] in HEADER_TIPS}


def default_selection(rows: list[dict[str, Any]], limit: int = 10) -> list[int]:
    """What the first view shows, measured before modelled: the policy runs of the first folder that
    has a measured policy run with host-device copies (a policy comparison); else the GPUs of the
    first public trace with hidden copies (real copies where no GPU ran here); else the SYNTHETIC
    demonstration's policy runs; else the rows with copies of the first folder that has any; else
    the first rows.  Rows of the runs given to ``dashboard --first`` (``_first``) come before all: the
    runs whose verdict the terminal printed (the quickstart's)."""
    first = [i for i, r in enumerate(rows) if r.get("_first")]
    if first:
        return first[:limit]
    policy = [i for i, r in enumerate(rows) if r["_has_copies"] and r["_policy"]]
    measured = [i for i in policy if rows[i]["_source"] != "synthetic"]
    public = [i for i, r in enumerate(rows) if r["_hidden"] and r["_source"] == "external"]
    if measured:  # the whole comparison: the group's runs without copies (none, remat) too
        group = rows[measured[0]]["_group"]
        return [i for i, r in enumerate(rows) if r["_group"] == group and r["_policy"]][:limit]
    if public:  # every GPU of that trace, with or without copies: the run as it was
        run = rows[public[0]]["id"].partition("@")[0]
        return [i for i, r in enumerate(rows) if r["id"].partition("@")[0] == run][:limit]
    if policy:
        group = rows[policy[0]]["_group"]
        return [i for i, r in enumerate(rows) if r["_group"] == group and r["_policy"]][:limit]
    with_copies = [i for i, r in enumerate(rows) if r["_has_copies"]]
    if with_copies:
        group = rows[with_copies[0]]["_group"]
        return [i for i in with_copies if rows[i]["_group"] == group][:limit]
    return list(range(min(len(rows), 6)))


def selected_first(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """*rows* with those of ``default_selection`` first, each part in its order (the selection of the
    result is its first rows: ``default_selection`` picks the same rows again)."""
    chosen = set(default_selection(rows))
    return [r for i, r in enumerate(rows) if i in chosen] + [r for i, r in enumerate(rows) if i not in chosen]
