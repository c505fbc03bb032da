"""Terminal tables: the same numbers as the JSON, in units chosen for people."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def ms(ns: int | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.3f}"


def mib(b: int | None) -> str:
    return "-" if b is None else f"{b / 2**20:.2f}"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def gbps(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: Sequence[int] = (0,)) -> str:
    """A plain, aligned table: the *left* columns (the first by default) left, the others right."""
    cells = [list(headers), *[list(map(str, r)) for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def fmt(r: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(cells[0]), sep, *(fmt(r) for r in cells[1:])])


OFFLOAD_HEADERS = (
    "copies",
    "count",
    "MiB",
    "GB/s",
    "busy ms",
    "occupancy",
    "w/ compute ms",
    "w/ NCCL ms",
    "exposed ms",
    "hidden",
    "pageable",
)


def offload_rows(copies: dict[str, dict[str, Any]], with_occupancy: bool = True) -> list[list[str]]:
    """One row per h2d / d2h / offload class."""
    rows = []
    for cls in ("h2d", "d2h", "offload"):
        m = copies[cls]
        rows.append(
            [
                cls,
                str(m["count"]),
                mib(m["bytes"]),
                gbps(m["gbps"]),
                ms(m["busy_ns"]),
                pct(m.get("occupancy")) if with_occupancy else "-",
                ms(m["overlap_compute_ns"]),
                ms(m["overlap_nccl_ns"]),
                ms(m["exposed_ns"]),
                pct(m["hidden_fraction"]),
                str(m["pageable_count"]),
            ]
        )
    return rows


def render_devices(doc: dict[str, Any]) -> str:
    """The readable form of ``analyze --json``."""
    from profiler.report.costs_text import context_table, stall_lines

    info = doc.get("trace", {})
    head = (
        f"{info.get('path', '')}  (nsys {info.get('nsys_version') or '?'}, schema {info.get('schema_version') or '?'})"
    )
    window = info.get("window")
    if window:
        head += "\n" + window_line(window)
    devices = doc["devices"]
    if not devices:
        return head + "\nNo GPU activity in this trace (a CPU-only run?): no kernels, copies or memsets."
    out = [head]
    gpus = info.get("gpus", {})
    for dev, d in devices.items():
        name = gpus.get(dev, "")
        out.append("")
        w = d["window_ns"]
        span = f"{ms(d['span_ns'])} ms" if w else "no valid ops"
        out.append(
            f"Device {dev}{' (' + name + ')' if name else ''}: window {span}"
            + (f", {d['invalid_ops']} invalid ops ignored" if d["invalid_ops"] else "")
        )
        out.append(
            f"  compute: {d['compute']['count']} kernels, busy {ms(d['compute']['busy_ns'])} ms"
            f"   NCCL: {d['nccl']['count']} kernels, busy {ms(d['nccl']['busy_ns'])} ms"
        )
        out.append(table(OFFLOAD_HEADERS, offload_rows(d["copies"])))
        out += stall_lines(d.get("stalls")) + context_table(d["copies"])
        others = [
            [c, str(d["copies"][c]["count"]), mib(d["copies"][c]["bytes"]), ms(d["copies"][c]["busy_ns"])]
            for c in ("d2d", "p2p", "other")
            if d["copies"][c]["count"]
        ]
        if others:
            out.append("")
            out.append(table(("other copies", "count", "MiB", "busy ms"), others))
        if d["streams"]:
            out.append("")
            out.append(
                table(
                    ("copy stream", "classes", "busy ms", "occupancy"),
                    [
                        [str(s["stream"]), ",".join(s["classes"]), ms(s["busy_ns"]), pct(s["occupancy"])]
                        for s in d["streams"]
                    ],
                )
            )
    return "\n".join(out)


def window_line(w: dict[str, Any]) -> str:
    """The analysis window (``trace.window`` of the JSON) in one line."""
    if w.get("start_ns") is None:
        return "analysis window: the whole recording" + (f" ({w['note']})" if w.get("note") else "")
    span = f"{ms(w['duration_ns'])} ms" if w.get("duration_ns") is not None else "to the end of the recording"
    return f"analysis window: {w['source']}, {span}" + (f" ({w['note']})" if w.get("note") else "")


def steps_line(summary: dict[str, Any]) -> str:
    """A run's steps in one line: how many, from where, their median, the warm-up left out."""
    if not summary.get("steps"):
        return f"no steps: {summary.get('step_source_note') or 'no step ranges'}"
    med = summary.get("median_step_ns")
    warm = summary.get("warmup_steps")
    return (
        f"{summary['steps']} steps from {summary.get('step_source')}"
        + (f", median {ms(med)} ms" if med is not None else "")
        + (f", {warm} warm-up left out" if warm else "")
    )


def render_policy_table(rows: list[dict[str, Any]]) -> str:
    """One line per policy run: status, steps, step time, offloaded bytes, busy/exposed copy time."""
    headers = (
        "policy",
        "status",
        "exit",
        "steps",
        "median step ms",
        "offload MiB",
        "copy busy ms",
        "exposed ms",
        "hidden",
        "run",
    )
    body = []
    for r in rows:
        off = r.get("offload") or {}
        body.append(
            [
                r["policy"],
                r["status"],
                str(r["exit_code"]),
                str(r.get("steps", "-")),
                ms(r.get("median_step_ns")),
                mib(off.get("bytes")),
                ms(off.get("busy_ns")),
                ms(off.get("exposed_ns")),
                pct(off.get("hidden_fraction")),
                r["run_dir"],
            ]
        )
    return table(headers, body, left=(0, 1, len(headers) - 1))


def _group_row(name: str, dev: str, c: dict[str, Any]) -> list[str]:
    off = c["offload"]
    return [
        name,
        dev,
        mib(c["d2h"]["bytes"]),
        mib(c["h2d"]["bytes"]),
        ms(off["busy_ns"]),
        pct(off["hidden_fraction"]),
        ms(off["exposed_ns"]),
        ms(off.get("stall_ns")),
    ]


GROUP_HEADERS = ("device", "d2h MiB", "h2d MiB", "copy ms", "hidden", "exposed ms", "stalled ms")


def render_groups(doc: dict[str, Any], by: str) -> str:
    """The per-step / per-layer / per-range / per-op table of ``analyze --by``."""
    facts = doc.get("attribution") or {}
    notes = []
    if facts.get("open_ranges"):
        notes.append(f"{facts['open_ranges']} NVTX ranges were still open at the end (extended to the end)")
    if facts.get("cross_thread_ranges"):
        notes.append(f"{facts['cross_thread_ranges']} start/end ranges ended on another thread (left out)")
    if facts.get("malformed_xla_ranges"):
        notes.append(f"{facts['malformed_xla_ranges']} XLA-like range names could not be parsed")
    if by == "step":
        steps = doc["steps"]
        if not steps["steps"]:
            why = steps.get("source_note") or "no step=N ranges, no --step-range REGEX"
            return f"No steps in this trace: {why}."
        rows = []
        for s in steps["steps"]:
            for dev, c in (s["devices"] or {"-": None}).items():
                base = _group_row(s["name"], dev, c) if c else [s["name"], dev, "-", "-", "-", "-", "-", "-"]
                rows.append([*base[:2], ms(s["duration_ns"]), *base[2:], s["excluded"] or ""])
        out = table(
            ("step", "device", "step ms", *GROUP_HEADERS[1:], "excluded"),
            rows,
            left=(0, 1, len(GROUP_HEADERS) + 2),
        )
        source = steps.get("source") or "?"
        if steps.get("source_note"):
            source += f"; {steps['source_note']}"
        notes.append(f"steps from {source}")
        notes.append(f"steps attributed by {steps['attribution']}; median step {ms(steps['median_step_ns'])} ms")
    else:
        key = {"layer": "layers", "range": "ranges", "op": "ops"}[by]
        groups = doc[key]
        if not groups:
            return f"No {key} with GPU activity in this trace."
        rows = []
        for g in groups:
            label = g["name"] + (" (index inferred)" if g.get("inferred_index") else "")
            top = ", ".join(f"{t['name'][:40]} {ms(t['overlap_ns'])}" for t in g.get("top_kernels", []))
            rows.append([*_group_row(label, g["device"] or "-", g["copies"]), top])
        out = table((by, *GROUP_HEADERS, "kernels that hid the copies (ms)"), rows, left=(0, 1, 8))
        if by == "layer" and facts.get("policy"):
            notes.append(f"policy {facts['policy']}")
    return "\n".join([out, *(f"note: {n}" for n in notes)])


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
