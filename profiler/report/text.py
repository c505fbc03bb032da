"""Terminal tables: the same numbers as the JSON, in units chosen for people."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from profiler.analysis.links import Link, run_link
from profiler.report.costs_text import context_table, kernels_beside_lines, short_name, stall_lines
from profiler.report.table import table
from profiler.units import UNITS_NOTE, Units, gbps, human_bytes, human_time, ms, pct, wrap
from profiler.xla.targets import sm_count


def offload_headers(u: Units) -> tuple[str, ...]:
    return (
        "copies",
        "count",
        u.size,
        "GB/s",
        f"busy {u.time}",
        "occupancy",
        f"w/ compute {u.time}",
        f"w/ NCCL {u.time}",
        f"exposed {u.time}",
        "hidden",
        "pageable",
    )


def offload_units(copies: dict[str, dict[str, Any]]) -> Units:
    return Units.of([copies["offload"]["bytes"]], [copies["offload"]["busy_ns"]])


def offload_rows(
    copies: dict[str, dict[str, Any]], with_occupancy: bool = True, u: Units | None = None
) -> list[list[str]]:
    """One row per h2d / d2h / offload class."""
    u = u or offload_units(copies)
    rows = []
    for cls in ("h2d", "d2h", "offload"):
        m = copies[cls]
        rows.append(
            [
                cls,
                str(m["count"]),
                u.b(m["bytes"]),
                gbps(m["gbps"]),
                u.t(m["busy_ns"]),
                pct(m.get("occupancy")) if with_occupancy else "-",
                u.t(m["overlap_compute_ns"]),
                u.t(m["overlap_nccl_ns"]),
                u.t(m["exposed_ns"]),
                pct(m["hidden_fraction"]),
                str(m["pageable_count"]),
            ]
        )
    return rows


NO_GPU = "No GPU activity in this trace (a CPU-only run?): no kernels, copies or memsets."


def render_devices(doc: dict[str, Any], link: Link | None = None, wide: bool = False) -> str:
    """The readable form of ``analyze --json``; each GPU with copies says which host link its GB/s
    compare with (*link*, ``--link``, else its device model's, else assumed and said so); kernel
    names shortened unless *wide*."""
    info = doc.get("trace", {})
    if info.get("source"):  # a conversion in the user's cache: the file the user named, then what it is
        head = f"{info.get('origin') or info.get('path', '')}  (a {info['source']}, read through {info.get('path')})"
    else:
        made = f"nsys {info.get('nsys_version') or '?'}, schema {info.get('schema_version') or '?'}"
        head = f"{info.get('path', '')}  ({made})"
    window = info.get("window")
    if window:
        head += "\n" + window_line(window)
    devices = doc["devices"]
    if not devices:
        return head + "\n" + NO_GPU
    out = [head]
    gpus = info.get("gpus", {})
    for dev, d in devices.items():
        name = gpus.get(dev, "")
        out.append("")
        w = d["window_ns"]
        span = human_time(d["span_ns"]) if w else "no valid ops"
        out.append(
            f"Device {dev} ({name or 'unknown GPU'}): window {span}"
            + (f", {d['invalid_ops']} invalid ops ignored" if d["invalid_ops"] else "")
        )
        out.append(
            f"  compute: {d['compute']['count']} kernels, busy {human_time(d['compute']['busy_ns'], nanoseconds=True)}"
            f"   NCCL: {d['nccl']['count']} kernels, busy {human_time(d['nccl']['busy_ns'], nanoseconds=True)}"
        )
        if d["copies"]["offload"]["count"]:
            u = offload_units(d["copies"])
            out.append(table(offload_headers(u), offload_rows(d["copies"], u=u)))
        else:
            out.append("  no host-device copies (D2H or H2D) on this device")
        out += stall_lines(d.get("stalls")) + context_table(d["copies"])
        if d["copies"]["offload"]["count"]:
            chosen = run_link(gpus, dev, link)
            out.append(f"  host link: {chosen.link.name} ({chosen.link.gbps:g} GB/s per direction), {chosen.why}")
        out += kernels_beside_lines(
            d.get("kernels_beside_copies"), d["compute"]["count"] + d["nccl"]["count"], wide=wide, sms=sm_count(name)
        )
        kinds = [c for c in ("d2d", "p2p", "other") if d["copies"][c]["count"]]
        if kinds:
            u = Units.of([d["copies"][c]["bytes"] for c in kinds], [d["copies"][c]["busy_ns"] for c in kinds])
            others = [
                [c, str(d["copies"][c]["count"]), u.b(d["copies"][c]["bytes"]), u.t(d["copies"][c]["busy_ns"])]
                for c in kinds
            ]
            out.append("")
            out.append(table(("other copies", "count", u.size, f"busy {u.time}"), others))
        if d["streams"]:
            st = d["streams"]
            u = Units.of([s.get("bytes") for s in st], [s["busy_ns"] for s in st])
            out.append("")
            out.append(
                table(
                    ("copy stream", "classes", "count", u.size, "GB/s", f"busy {u.time}", "occupancy"),
                    [
                        [
                            str(s["stream"]),
                            ",".join(s["classes"]),
                            str(s.get("count", "-")),
                            u.b(s.get("bytes")),
                            gbps(s.get("gbps")),
                            u.t(s["busy_ns"]),
                            pct(s["occupancy"]),
                        ]
                        for s in st
                    ],
                )
            )
    out.append("")
    out.append(f"units: {UNITS_NOTE}")
    return "\n".join(out)


def window_line(w: dict[str, Any]) -> str:
    """The analysis window (``trace.window`` of the JSON) in one line."""
    if w.get("start_ns") is None:
        return "analysis window: the whole recording" + (f" ({w['note']})" if w.get("note") else "")
    span = human_time(w["duration_ns"]) if w.get("duration_ns") is not None else "to the end of the recording"
    return f"analysis window: {w['source']}, {span}" + (f" ({w['note']})" if w.get("note") else "")


def steps_line(summary: dict[str, Any]) -> str:
    """A run's steps in one line: how many, from where, their median over the included steps (those
    ``analyze --by step`` includes), the warm-up and outliers left out."""
    if not summary.get("steps"):
        return f"no steps: {summary.get('step_source_note') or 'no step ranges'}"
    med = summary.get("median_step_ns")
    warm = summary.get("warmup_steps")
    outliers = sum(1 for e in summary.get("excluded_steps") or [] if str(e.get("reason")).startswith("outlier"))
    included = summary.get("included_steps")
    left = [f"{warm} warm-up"] if warm else []
    left += [f"{outliers} {'outlier' if outliers == 1 else 'outliers'}"] if outliers else []
    over = f" over {included} included" if included is not None and included != summary["steps"] else ""
    return (
        f"{summary['steps']} steps from {summary.get('step_source')}"
        + (f", median {human_time(med)}{over}" if med is not None else "")
        + (f" ({' and '.join(left)} left out)" if left else "")
    )


def _steps_cell(r: dict[str, Any]) -> str:
    """The steps the median is over (the included ones, as analyze's policy table counts them), and of how many."""
    steps, included = r.get("steps"), r.get("included_steps")
    if steps is None:
        return "-"
    return str(steps) if included is None or included == steps else f"{included} of {steps}"


def render_sweep_summary(rows: list[dict[str, Any]]) -> str:
    """One line per policy run: status, steps, step time, offloaded bytes, busy/exposed copy time."""
    offs = [r.get("offload") or {} for r in rows]
    step = Units.of([], [r.get("median_step_ns") for r in rows])
    u = Units.of([o.get("bytes") for o in offs], [o.get("busy_ns") for o in offs])
    headers = (
        "policy",
        "status",
        "exit",
        "steps",
        f"median step {step.time}",
        "copies",
        f"offloaded {u.size}",
        f"copy busy {u.time}",
        f"exposed {u.time}",
        "hidden",
        "run",
    )
    parents = {str(Path(r["run_dir"]).parent) for r in rows}
    where = parents.pop() if len(parents) == 1 else None  # one folder of runs: said once, under the table
    body = []
    for r, off in zip(rows, offs, strict=True):
        body.append(
            [
                r["policy"],
                r["status"],
                str(r["exit_code"]),
                _steps_cell(r),
                step.t(r.get("median_step_ns")),
                str(off.get("count", "-")),
                u.b(off.get("bytes")),
                u.t(off.get("busy_ns")),
                u.t(off.get("exposed_ns")),
                pct(off.get("hidden_fraction")),
                Path(r["run_dir"]).name if where else r["run_dir"],
            ]
        )
    out = table(headers, body, left=(0, 1, len(headers) - 1))
    return out + (f"\n(run folders in {where})" if where else "")


def _group_row(name: str, dev: str, c: dict[str, Any], u: Units) -> list[str]:
    off = c["offload"]
    return [
        name,
        dev,
        str(off["count"]),
        u.b(c["d2h"]["bytes"]),
        u.b(c["h2d"]["bytes"]),
        u.t(off["busy_ns"]),
        pct(off["hidden_fraction"]),
        u.t(off["exposed_ns"]),
        u.t(off.get("stall_ns")),
    ]


def group_headers(u: Units) -> tuple[str, ...]:
    return (
        "device",
        "copies",
        f"d2h {u.size}",
        f"h2d {u.size}",
        f"copy {u.time}",
        "hidden",
        f"exposed {u.time}",
        f"stalled {u.time}",
    )


def group_units(copies: Iterable[dict[str, Any]]) -> Units:
    cs = list(copies)
    return Units.of([c[d]["bytes"] for c in cs for d in ("d2h", "h2d")], [c["offload"]["busy_ns"] for c in cs])


NO_NVTX = (
    "No NVTX ranges in this trace: nothing to group copies by (profile-step's annotate.step/layer ranges, "
    "XLA's per-thunk ranges, or ranges of your own)."
)
NO_LAYERS = (
    "No layers in this trace: no layer=N ranges, and no XLA thunk ranges whose op path names a layer "
    "(--layer-pattern REGEX to match other names)."
)


STEP_ENDS = 5  # a long step list shows its first and last few steps
STEP_ROWS = 2 * STEP_ENDS + 10  # ... when it has more than this many
STEP_PERCENTILES = (10, 90, 99)  # beside the median (np.median of the included steps)


def shown_steps(steps: list[dict[str, Any]], all_steps: bool) -> tuple[list[dict[str, Any]], int]:
    """The steps a table lists and how many it leaves out: all of a short list, else the first and
    last ``STEP_ENDS``."""
    if all_steps or len(steps) <= STEP_ROWS:
        return steps, 0
    return steps[:STEP_ENDS] + steps[-STEP_ENDS:], len(steps) - 2 * STEP_ENDS


def step_stats_line(steps: dict[str, Any]) -> str:
    """The one median step and what it includes, with percentiles of the included steps."""
    rows = steps["steps"]
    kept = sorted(s["duration_ns"] for s in rows if not s["excluded"])
    warm = sum(1 for s in rows if s["excluded"] and s["excluded"].startswith("warm"))
    outliers = sum(1 for s in rows if s["excluded"] and s["excluded"].startswith("outlier"))
    left_out = ", ".join(
        p for p in (f"{warm} warm-up" if warm else "", f"{outliers} outlier(s)" if outliers else "") if p
    )
    what = f"{len(kept):,} of {len(rows):,} steps" + (f"; {left_out} left out" if left_out else "")
    if not kept:
        return f"steps: none included ({what})"
    med = steps.get("median_step_ns")
    if med is None:
        med = kept[(len(kept) - 1) // 2]
    u = Units.of([], [kept[0], kept[-1], med])
    spread = [f"min {u.t(kept[0])}"]
    if len(kept) >= STEP_ROWS:  # percentiles (nearest rank) where there are enough steps to have them
        spread += [f"p{q} {u.t(kept[min(len(kept) - 1, round(q / 100 * (len(kept) - 1)))])}" for q in STEP_PERCENTILES]
    spread.append(f"max {u.t(kept[-1])} {u.time}")
    return f"median step {u.t(med)} {u.time} over the included steps ({what}); " + ", ".join(spread)


def no_groups(doc: dict[str, Any], by: str) -> str | None:
    """Why the view ``analyze --by`` asks for has nothing to show, in a sentence or two (None when it has
    something): said first, instead of the whole analysis with the sentence at its end."""
    if by == "step":
        steps = doc["steps"]
        if steps["steps"]:
            return None
        why = steps.get("source_note") or "no step=N ranges, no --step-range REGEX"
        return wrap(f"No steps in this trace: {why}.")
    key = {"layer": "layers", "range": "ranges", "op": "ops"}[by]
    if doc[key]:
        return None
    if not (doc.get("attribution") or {}).get("ranges"):
        return wrap(NO_NVTX)
    return wrap(NO_LAYERS) if by == "layer" else None


# what the attribution met among the NVTX ranges (its facts' counts), said under ``analyze --by``
RANGE_NOTES = {
    "open_ranges": "{} NVTX ranges were still open at the end (extended to the end)",
    "cross_thread_ranges": "{} start/end ranges ended on another thread (left out)",
    "malformed_xla_ranges": "{} XLA-like range names could not be parsed",
}


def render_groups(doc: dict[str, Any], by: str, all_steps: bool = False, wide: bool = False) -> str:
    """The per-step / per-layer / per-range / per-op table of ``analyze --by``; a long step list
    shows its first and last steps unless *all_steps*; names shortened unless *wide*."""
    facts = doc.get("attribution") or {}
    notes = [said.format(facts[key]) for key, said in RANGE_NOTES.items() if facts.get(key)]
    gpu = bool(doc.get("devices"))
    copies = any(d["copies"]["offload"]["count"] for d in (doc.get("devices") or {}).values())
    policy = f" (policy {facts['policy']})" if facts.get("policy") else ""
    if by == "step":
        steps = doc["steps"]
        if not steps["steps"]:
            why = steps.get("source_note") or "no step=N ranges, no --step-range REGEX"
            return f"No steps in this trace: {why}."
        source = steps.get("source") or "?"
        if steps.get("source_note"):
            source += f"; {steps['source_note']}"
        notes.append(f"steps from {source}")
        shown, hidden = shown_steps(steps["steps"], all_steps)
        u = group_units(c for s in shown for c in (s["devices"] or {}).values())
        step_u = Units.of([], [s["duration_ns"] for s in shown])
        if not gpu:  # durations only: render_devices has said that there is no GPU activity
            rows = [[s["name"], step_u.t(s["duration_ns"]), s["excluded"] or ""] for s in shown]
            out = table(("step", f"step {step_u.time}", "excluded"), rows, left=(0, 2))
            out = f"Steps{policy}:\n{out}"
        else:
            rows = []
            for s in shown:
                for dev, c in (s["devices"] or {"-": None}).items():
                    base = _group_row(s["name"], dev, c, u) if c else [s["name"], dev, *["-"] * 7]
                    rows.append([*base[:2], step_u.t(s["duration_ns"]), *base[2:], s["excluded"] or ""])
            headers = group_headers(u)
            out = table(
                ("step", "device", f"step {step_u.time}", *headers[1:], "excluded"),
                rows,
                left=(0, 1, len(headers) + 2),
            )
            out = f"Steps{policy}:\n{out}"
            notes.append(f"steps attributed by {steps['attribution']}")
        if hidden:
            out += f"\n... {hidden:,} steps not shown (the first and last {STEP_ENDS}; --all-steps lists every one)"
        out += "\n" + step_stats_line(steps)
    else:
        key = {"layer": "layers", "range": "ranges", "op": "ops"}[by]
        groups = doc[key]
        if not facts.get("ranges"):
            return NO_NVTX
        if not groups:
            if by == "layer":
                return NO_LAYERS
            if not gpu:  # render_devices has said so
                return f"{facts['ranges']:,} NVTX ranges, and no GPU activity to attribute to them."
            return (
                f"None of the {facts['ranges']:,} NVTX ranges launched GPU work (a GPU op belongs to the range "
                "in which its CUDA launch call starts, on the same thread)."
            )
        if not gpu or not copies:
            names = ", ".join(dict.fromkeys(g["name"] for g in groups))
            found = f"{len(set(g['name'] for g in groups)):,} {key} found{policy}: {names[:300]}"
            why = "no GPU activity to measure in them" if not gpu else "no host-device copies to attribute to them"
            return f"{found}; {why}."
        u = group_units(g["copies"] for g in groups)
        rows = []
        for g in groups:
            label = g["name"] + (" (index inferred)" if g.get("inferred_index") and g["name"].endswith("]") else "")
            tops = g.get("top_kernels", []) if wide else g.get("top_kernels", [])[:2]  # --wide: all, names whole
            top = ", ".join(f"{short_name(t['name'], wide, 22)} {u.t(t['overlap_ns'])}" for t in tops)
            rows.append([*_group_row(short_name(label, wide, 28), g["device"] or "-", g["copies"], u), top])
        headers = group_headers(u)
        out = table((by, *headers, f"kernels that hid the copies ({u.time})"), rows, left=(0, 1, len(headers) + 1))
        out = f"Copies per {by}{policy}, summed over the analysis window (every step in it, not per step):\n{out}"
        notes += groups_overlap_notes(groups, doc.get("devices") or {}, by, u)
        if by == "layer":
            notes += outside_layers_notes(groups, doc.get("devices") or {})
    return "\n".join([out, *(f"note: {n}" for n in notes)])


def outside_layers_notes(groups: list[dict[str, Any]], devices: dict[str, Any]) -> list[str]:
    """Per device and direction, the copy bytes launched outside every layer's ranges (in no row): a loop's
    offloads XLA pipelines out of its iterations land there, while planned vs moved, which matches a copy
    to its layer by the XLA instruction that moved it, counts them in the layer."""
    out = []
    for dev, d in devices.items():
        for direction in ("d2h", "h2d"):
            whole = (d["copies"].get(direction) or {}).get("bytes") or 0
            inside = sum((g["copies"].get(direction) or {}).get("bytes") or 0 for g in groups if g.get("device") == dev)
            if whole - inside >= 2**20:
                out.append(
                    f"device {dev}: {human_bytes(whole - inside)} of its {human_bytes(whole)} {direction} were "
                    "launched outside every layer's ranges and are in no row (as a scanned loop's offloads are where "
                    "XLA pipelines them out of its iterations); planned vs moved matches each copy to its layer by "
                    "the XLA instruction that moved it, so its layers hold them"
                )
    return out


def groups_overlap(groups: list[dict[str, Any]], devices: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per device whose groups' copy time or exposed time sums past the device's own (METRICS.md: each
    group is its own union, so copies of several groups in flight together count in each): the sums
    beside the device's ``busy_ns`` and ``exposed_ns``."""
    out: dict[str, dict[str, int]] = {}
    for dev, d in devices.items():
        mine = [g["copies"]["offload"] for g in groups if g.get("device") == dev]
        whole = d["copies"]["offload"]
        sums = {k: sum(m.get(k) or 0 for m in mine) for k in ("busy_ns", "exposed_ns")}
        if sums["busy_ns"] > whole["busy_ns"] or sums["exposed_ns"] > whole["exposed_ns"]:
            out[dev] = {"busy_sum_ns": sums["busy_ns"], "busy_ns": whole["busy_ns"],
                        "exposed_sum_ns": sums["exposed_ns"], "exposed_ns": whole["exposed_ns"]}  # fmt: skip
    return out


def groups_overlap_notes(groups: list[dict[str, Any]], devices: dict[str, Any], by: str, u: Units) -> list[str]:
    """What the per-group table's copy and exposed columns are where they do not add up to the device's."""
    stalled = any(g["copies"]["offload"].get("stall_ns") is not None for g in groups)
    return [
        f"each {by}'s copy, exposed and hidden figures are that {by}'s own union (docs/metrics.md): on device {dev} "
        f"copies of several {by}s are in flight together, so the rows overlap and do not add up (copy "
        f"{u.t(o['busy_sum_ns'])} {u.time} summed against the device's busy {u.t(o['busy_ns'])}, exposed "
        f"{u.t(o['exposed_sum_ns'])} against {u.t(o['exposed_ns'])}); a {by}'s exposed time counts gaps that "
        f"other {by}s' copies hold too"
        + ("; stalled adds up (each stall is counted at the copy it waited for)" if stalled else "")
        for dev, o in groups_overlap(groups, devices).items()
    ]


def render_ranks(doc: dict[str, Any]) -> str:
    """The cross-rank view: per rank, then per policy the spread, stragglers and sick links."""
    out = [f"{doc['analyzed']} of {doc['ranks']} ranks analyzed"]
    for f in doc["failed"]:
        out.append(f"FAILED rank {f['rank']}: {f['error']}")
    rows = [
        [
            str(r["rank"]),
            r["policy"],
            ms(r["median_step_ns"]),
            ms(r["exposed_ns"]),
            pct(r["hidden_fraction"]),
            gbps(r["d2h_gbps"]),
            gbps(r["h2d_gbps"]),
        ]
        for r in doc["per_rank"]
    ]
    if rows:
        out += [
            "",
            table(
                ("rank", "policy", "median step ms", "exposed ms", "hidden", "d2h GB/s", "h2d GB/s"),
                rows,
                left=(0, 1),
            ),
        ]
    for policy, p in doc["policies"].items():
        out += [
            "",
            f"policy {policy}: {len(p['ranks'])} ranks; exposed copy time min/median/max "
            f"{ms(p['exposed_ns']['min'])} / {ms(p['exposed_ns']['median'])} / {ms(p['exposed_ns']['max'])} ms",
        ]
        if p["layers"]:
            out.append(
                table(
                    ("layer", "ranks", "exposed min ms", "median ms", "max ms"),
                    [
                        [
                            name,
                            str(v["ranks"]),
                            ms(v["exposed_ns"]["min"]),
                            ms(v["exposed_ns"]["median"]),
                            ms(v["exposed_ns"]["max"]),
                        ]
                        for name, v in p["layers"].items()
                    ],
                )
            )
        for s in p["stragglers"]:
            out.append(f"straggler rank {s['rank']}: step {s['vs_median']:.2f}x the median; " + "; ".join(s["why"]))
        for s in p["sick_links"]:
            out.append(
                f"slow link? rank {s['rank']} {s['direction']} {s['gbps']:.1f} GB/s "
                f"vs median {s['median_gbps']:.1f} GB/s"
            )
    return "\n".join(out)
