"""Terminal tables for the policy decision: the per-policy table, planned vs moved per layer,
and a plan compiled for a GPU target."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

from profiler.analysis.policies import HOST_FETCH
from profiler.report.table import table
from profiler.units import count, human_bytes, ms, pct, si, signed_pct, tflops
from profiler.xla.names import ACTIVATION_NAMES
from profiler.xla.same_program import short_difference


def size(b: float | None) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1, two decimals: ``1.50 GiB``; under
    1 KiB rounded, not cut (bytes per step and device need not be whole)."""
    return f"{b:.0f} B" if b is not None and abs(b) < 1024 else human_bytes(b, places=(2, 2, 2))


POLICY_HEADERS = (
    "policy",
    "steps",
    "step ms",
    "min-max ms",
    "peak dev",
    "compiled dev",
    "compiled host",
    "D2H planned",
    "D2H moved",
    "FLOPs",
    "TFLOP/s",
    "recompute",
    "MFU",
    "exposed ms",
    "stalled ms",
)
POLICY_LEGEND = (
    "per step and per device: step ms = median step, min-max ms = its shortest and longest included step; "
    "peak dev = measured peak device memory; compiled dev/host = "
    "the step's compiled module (arguments + outputs - aliased + temporaries); D2H planned = the compiler's "
    "offload plan; D2H moved = the trace; exposed/stalled = median copy time not hidden / compute waiting on copies"
)


def rate_legend(rows: list[dict[str, Any]], headers: tuple[str, ...] | list[str]) -> str:
    """What the TFLOP/s and MFU columns are, where shown: they count different FLOPs (so a policy that
    recomputes more can gain TFLOP/s and lose MFU), MFU against each device's peak and its source."""
    from profiler.xla.targets import peak_source, peak_tflops

    out = ""
    if "TFLOP/s" in headers:
        out += (
            "; TFLOP/s = the compiled step's FLOPs (the FLOPs column: XLA's count, recomputation included) / "
            "median step"
        )
    if "MFU" in headers:
        peaks = {}
        for r in rows:
            if r.get("mfu") is not None and r.get("peak_tflops"):
                mine = peak_tflops(r.get("device_kind")) == r["peak_tflops"]
                source = peak_source(r.get("device_kind")) if mine else "--peak-tflops"
                peaks[f"{r.get('device_kind') or '?'} {r['peak_tflops']:g} TFLOP/s, {source}"] = None
        out += (
            "; MFU = the model's FLOPs per step (the script's model_flops_per_step, no recomputation) / median "
            f"step / the device's dense bf16 peak ({'; '.join(peaks)})"
        )
    return out


def render_policy_comparison(tab: dict[str, Any]) -> str:
    """The per-policy table with notes on what is missing and why."""
    rows = []
    notes: dict[str, list[str]] = {}

    def note(policy: str, text: str) -> None:
        notes.setdefault(text, []).append(policy)

    names = [r["policy"] for r in tab["rows"]]
    for r in tab["rows"]:
        marks = (
            ("=" if r.get("same_hlo_as") else "")
            + ("~" if r.get("within_spread_of") else "")
            + (OTHER_PROGRAM if r.get("program_differs") else "")
        )
        name = r["policy"]
        if name == "default" and names.count(name) > 1 and r.get("trace"):  # traces without a manifest
            name += f" ({Path(r['trace']).stem})"
        rows.append(
            [
                name + (f" {marks}" if marks else ""),
                str(r["steps"]),
                ms(r["median_step_ns"]),
                spread(r.get("step_min_ns"), r.get("step_max_ns")),
                size(r["peak_device_bytes"]),
                size(r["compiled_device_bytes"]),
                compiled_host(r),
                size(r["planned_d2h_bytes_per_step"]),
                size(r["moved_d2h_bytes_per_step"]),
                si(r["flops_per_step"]),
                tflops(r["tflops"]),
                recompute(r),
                pct(r["mfu"]),
                ms(None if r["exposed_ns"] is None else int(r["exposed_ns"])),
                ms(None if r["stalled_ns"] is None else int(r["stalled_ns"])),
            ]
        )
        if not r["steps"] and r.get("gpu_activity", True):
            note(r["policy"], "no steps found (no step=N ranges, no XLA module that ran repeatedly): per-step "
                 "columns are not known (-); `profile-step analyze TRACE` shows the whole capture")  # fmt: skip
        if not r.get("gpu_activity", True):
            note(r["policy"], "no GPU activity: exposed and stalled time are not measured (-)")
        if r["peak_device_bytes"] is None and r["peak_device_source"]:
            note(r["policy"], f"no measured peak: {r['peak_device_source']}")
        if r["plan_note"]:
            note(r["policy"], r["plan_note"])
        if r["model_flops_per_step"] and r["mfu"] is None:
            note(r["policy"], f"no MFU: no peak FLOP/s known for device {r['device_kind'] or '?'} (--peak-tflops)")
        if r.get("step_program") or r["step_module"]:
            note(r["policy"], step_sentence(r.get("step_program") or r["step_module"], r.get("step_chosen_by")))
        for n in r["notes"]:
            note(r["policy"], n)
    headers, rows, empty = drop_empty_columns(POLICY_HEADERS, rows)
    out = [table(headers, rows), *textwrap.wrap(POLICY_LEGEND + rate_legend(tab["rows"], headers), 118)]
    if empty:
        out.append(f"left out, no value in any run: {', '.join(empty)}")
    if tab.get("baseline"):
        out.append(f"recompute: FLOPs per step against the {tab['baseline']!r} policy")
    marks = policy_marks(tab)
    if len(tab.get("cpu_runs") or []) == len(tab["rows"]):  # all on a CPU: said before the numbers, not after
        out = [f"{m}: {text}" for m, text in marks if m == "cpu"] + out
        marks = [(m, text) for m, text in marks if m != "cpu"]
    out += [f"{m}: {text}" for m, text in marks]
    out += fold_notes(notes, len(tab["rows"]))
    from profiler.report.predict_text import render_against

    out += render_against(tab)
    return "\n".join(out)


def _shape(text: str) -> str:
    """A note with its numbers taken out: notes of one kind (``FLOPs counted from the HLO (99.22 T)``,
    ``... (85.98 T)``) have the same shape."""
    import re

    return re.sub(r"\d+(?:[.,:]\d+)*", "#", text)


def folded(notes: dict[str, list[str]], every: int, where: str = "--json") -> list[tuple[str, str]]:
    """(scope, text) once per kind of note (*notes*: text -> the runs that have it; *every*: how many runs):
    the runs whose notes differ only in their numbers share one, with the first run's numbers, said so
    (each run's are in *where*)."""
    kinds: dict[str, list[tuple[str, list[str]]]] = {}
    for text, who in notes.items():
        kinds.setdefault(_shape(text), []).append((text, who))
    out = []
    for same in kinds.values():
        who = [p for _, ps in same for p in ps]  # one per run: two runs of one policy count twice
        scope = "all runs" if len(who) == every and every > 1 else ", ".join(dict.fromkeys(who))
        if len(same) > 1:
            scope += f"; the numbers are {same[0][1][0]}'s, each run's in {where}"
        out.append((scope, same[0][0]))
    return out


def fold_notes(notes: dict[str, list[str]], every: int) -> list[str]:
    """``note (WHO): TEXT`` once per kind of note (``folded``)."""
    return [f"note ({scope}): {text}" for scope, text in folded(notes, every)]


def drop_empty_columns(
    headers: tuple[str, ...], rows: list[list[str]], keep: int = 3
) -> tuple[tuple[str, ...], list[list[str]], list[str]]:
    """The columns after the first *keep* whose every row is ``-`` taken out (a CPU run has no FLOPs,
    copies or memory to show, and the table then fits the terminal); their names, to be said."""
    if not rows:
        return headers, rows, []
    gone = [i for i in range(keep, len(headers)) if all(r[i] == "-" for r in rows)]
    stay = [i for i in range(len(headers)) if i not in gone]
    return tuple(headers[i] for i in stay), [[r[i] for i in stay] for r in rows], [headers[i] for i in gone]


def spread(lo: float | None, hi: float | None) -> str:
    return "-" if lo is None or hi is None else f"{lo / 1e6:.3f}-{hi / 1e6:.3f}"


def compiled_host(r: dict[str, Any]) -> str:
    """Compiled host memory; on XLA:CPU, where host memory is the device's, what the HLO places there."""
    if r.get("host_in_device_memory"):
        placed = r.get("host_placed_bytes") or 0
        return f"{size(placed)} (CPU: in device memory)" if placed else "none (CPU)"
    return size(r["compiled_host_bytes"])


OTHER_PROGRAM = "≠"  # the row's step is another program than the reference row's (xla.same_program)


def recompute(r: dict[str, Any]) -> str:
    """The recompute cell: no percentage between different programs (``other program``)."""
    return "other program" if r.get("program_differs") else signed_pct(r["recompute_overhead"])


SIGNATURE_CHARS = 120  # a program's parameter list, in a mark's sentence, before it is cut (--json has it whole)


def _short_signature(text: str) -> str:
    """*text* with each parenthesized parameter or result list longer than ``SIGNATURE_CHARS`` cut
    to its start and its count of entries."""

    def cut(m: re.Match[str]) -> str:
        body = re.sub(r"/\*index=\d+\*/", "", m.group(1))
        if len(body) <= SIGNATURE_CHARS:
            return m.group(0)
        n = len(re.findall(r"\w+\[[\d,]*\]", body))
        return f"({body[:SIGNATURE_CHARS].rsplit(', ', 1)[0]}, … {n} in all)"

    return re.sub(r"\(((?:[^()]|\([^()]*\))*)\)", cut, text)


def other_program_marks(tab: dict[str, Any]) -> list[tuple[str, str]]:
    """One ``≠`` sentence per other program: the runs that ran it, the reference run, and how the
    programs differ in a few words (each row's whole ``program_differs`` is in --json)."""
    rows = tab.get("rows") or []
    marked = [r for r in rows if r.get("program_differs")]
    ref = next((r for r in rows if r["trace"] == tab.get("program_reference")), None)
    if ref is None:  # a table without its reference (a plan's): each row's own sentence
        return [(OTHER_PROGRAM, f"{r['policy']}'s step is {_short_signature(r['program_differs'])}: no percentage "
                 "between them") for r in marked]  # fmt: skip
    groups: dict[str, list[str]] = {}
    for r in marked:
        groups.setdefault(short_difference(r, ref), []).append(r["policy"])
    return [
        (OTHER_PROGRAM, f"{', '.join(names)} {'runs' if len(names) == 1 else 'run'} another program than "
         f"{ref['policy']}: {_short_signature(how)}: no percentage between them")
        for how, names in groups.items()
    ]  # fmt: skip


def policy_marks(tab: dict[str, Any]) -> list[tuple[str, str]]:
    """(mark, sentence) for the table's marked rows and its CPU runs: same step, within the noise,
    another program."""
    out = other_program_marks(tab)
    for g in tab.get("same_hlo") or []:
        out.append(
            (
                "=",
                f"{', '.join(g['policies'])} compiled to the same step (HLO fingerprint {g['fingerprint']}): "
                "the policy had no effect on the program; does the script read $PROFILE_STEP_POLICY "
                "(or the flag --policy-arg passes)?",
            )
        )
    for w in tab.get("within_spread") or []:
        a, b = w["policies"]
        out.append(
            (
                "~",
                f"{a} and {b} differ by {w['difference_ns'] / 1e6:.3f} ms per step, less than the spread of their "
                f"steps ({w['spread_ns'] / 1e6:.3f} ms): not a measured difference",
            )
        )
    for w in tab.get("runs_apart") or []:
        a, b = (f"{t / 1e6:.3f}" for t in w["median_steps_ns"])
        out.append(
            (
                "!",
                f"two runs of {w['policy']} took {a} and {b} ms per step, further apart than the spread of their "
                f"steps ({w['spread_ns'] / 1e6:.3f} ms): the machine changed between the runs",
            )
        )
    cpu = tab.get("cpu_runs") or []
    if cpu:
        who = "all runs" if len(cpu) == len(tab["rows"]) else ", ".join(dict.fromkeys(cpu))
        out.append(
            (
                "cpu",
                f"{who} ran on a CPU, which does not stand for a GPU: step times, memory and copies differ there "
                "(XLA:CPU does not offload); use it to check the script, not to choose a policy",
            )
        )
    return out


def render_planned_vs_moved_all(pvms: list[dict[str, Any]], whole: bool = False) -> str:
    """Planned vs moved for every run; runs with nothing planned nor moved share one line per reason (a run
    whose every planned copy moved as planned: one line, its table with *whole*, ``--wide``)."""
    empty: dict[str, list[str]] = {}
    # runs that planned nothing and moved only the host's own copies, per step: one line for those of one amount
    own: dict[int, list[dict[str, Any]]] = {}
    for p in pvms:
        host_only = p["rows"] and all(x["flag"] == HOST_FETCH for x in p["rows"])
        if host_only and not whole and p["per"] == "per step and GPU":
            own.setdefault(sum(x["moved_d2h_bytes"] + x["moved_h2d_bytes"] for x in p["rows"]), []).append(p)
    alone = {id(p) for runs in own.values() if len(runs) == 1 for p in runs}
    out = []
    for p in pvms:
        if p["rows"] and (id(p) in alone or not any(p in runs for runs in own.values())):
            out.append(render_planned_vs_moved(p, whole))
        elif not p["rows"]:
            empty.setdefault(p.get("plan_note") or "no plan and no copies", []).append(p["policy"])
    for moved, runs in own.items():
        if len(runs) > 1:
            names = ", ".join(dict.fromkeys(p["policy"] for p in runs))
            out.append(f"planned vs moved per step, {names}: nothing planned; the host's own copies moved "
                       f"{size(moved)} each, not an offload")  # fmt: skip
    for why, policies in empty.items():
        out.append(f"planned vs moved, {', '.join(dict.fromkeys(policies))}: nothing planned and nothing moved ({why})")
    return "\n\n".join(out)


def step_sentence(program: str, chosen_by: str | None) -> str:
    """``step: jit_step (program 6): ran 5 times, ...``: the step program and how it was chosen, once."""
    if not chosen_by:
        return f"step: {program}"
    return f"step: {chosen_by}" if chosen_by.startswith(program) else f"step: {program} ({chosen_by})"


def _as_planned(pvm: dict[str, Any], head: str) -> str | None:
    """One line where every row moved as planned (flag ``ok``) but the host's own copies: what moved, how many
    layers and activations; None where a row says otherwise (the table shows it)."""
    rows = pvm["rows"]
    ok = [x for x in rows if x["flag"] == "ok"]
    host = [x for x in rows if x["flag"] == HOST_FETCH]
    if len(ok) + len(host) != len(rows) or 0 < len(ok) <= 3:  # a few rows: the table is as short
        return None
    own = sum(x["moved_d2h_bytes"] + x["moved_h2d_bytes"] for x in host)
    host_said = f"the host's own copies moved {size(own)}, not an offload" if host else ""
    if not ok:
        return f"{head}: nothing planned; {host_said}"
    layers = list(dict.fromkeys(x["layer"] or "-" for x in ok))
    acts = list(dict.fromkeys(x["activation"] or UNNAMED for x in ok))
    where = layers[0] if len(layers) == 1 else f"{len(layers)} layers ({layers[0]} to {layers[-1]})"
    d2h, h2d = (sum(x[f"moved_{d}_bytes"] for x in ok) for d in ("d2h", "h2d"))
    return (
        f"{head}: every planned copy moved as planned, {size(d2h)} D2H and {size(h2d)} H2D: {where} x "
        f"{', '.join(acts)} ({count(len(ok), 'row')}: --wide lists them){'; ' + host_said if host else ''}"
    )


def render_planned_vs_moved(pvm: dict[str, Any], whole: bool = True) -> str:
    """A run's planned against moved copies, a row per (layer, activation) or unplanned op; without *whole*,
    one line where every copy moved as planned (``_as_planned``)."""
    shown = pvm.get("step_program") or (pvm["step_module"] or "").split(".", 1)[-1]
    module = f"step {shown}" if shown else "no step program"
    stepped = pvm["per"] == "per step and GPU"
    steps = f"{pvm['steps']} step ranges" if stepped else "no steps"
    if stepped and pvm.get("included_steps") is not None and pvm["included_steps"] != pvm["steps"]:
        steps += f", of which the {pvm['included_steps']} in the table's median"
    head = f"planned vs moved{' per step' if stepped else ''}, {_run_name(pvm)} ({steps}; {module})"
    if not pvm["rows"]:
        why = pvm.get("plan_note") or "no plan and no copies"
        return f"{head}: nothing planned and nothing moved ({why})"
    if not pvm["step_module"] and not any(x["planned_d2h_bytes"] or x["planned_h2d_bytes"] for x in pvm["rows"]):
        d2h, h2d = (sum(x[f"moved_{d}_bytes"] for x in pvm["rows"]) for d in ("d2h", "h2d"))
        return (
            f"{head}: no compiled plan to compare with; the trace moved {size(d2h)} D2H and {size(h2d)} H2D "
            f"{pvm['per'] if stepped else 'per GPU over the whole capture'} "
            f"({len(pvm['rows'])} {'op' if len(pvm['rows']) == 1 else 'ops'})"
        )
    if not whole and (line := _as_planned(pvm, head)):
        return "\n".join([line, *not_offloaded_line(pvm)])
    rows = [
        [
            x["layer"] or "-",
            x["activation"] or "-",
            x["unplanned_op"] or "",
            size(x["planned_d2h_bytes"]),
            size(x["moved_d2h_bytes"]),
            size(x["planned_h2d_bytes"]),
            size(x["moved_h2d_bytes"]),
            x["flag"],
        ]
        for x in pvm["rows"]
    ]
    return "\n".join(
        [
            head,
            table(
                ("layer", "activation", "op (no plan)", "D2H planned", "D2H moved", "H2D planned", "H2D moved", "flag"),
                rows,
                left=(0, 1, 2, 7),
            ),
            *not_offloaded_line(pvm),
        ]
    )


def not_offloaded_line(pvm: dict[str, Any]) -> list[str]:
    """One line for the names declared for offloading that the compiled step never moves, if any."""
    gone = pvm.get("not_offloaded") or []
    if not gone:
        return []
    return [
        f"named for offloading by {pvm['declared_by']}, moved by no copy of the compiled step: {', '.join(gone)} "
        "(XLA offloads a named value only where the backward pass saves it: a name the model never tags, or a "
        "value the backward pass recomputes or does not need, is never sent)"
    ]


def _run_name(pvm: dict[str, Any]) -> str:
    """``policy NAME``; a run without a manifest (policy ``default``) also by its trace's name."""
    if pvm["policy"] == "default" and pvm.get("trace"):
        return f"policy default ({Path(pvm['trace']).stem})"
    return f"policy {pvm['policy']}"


UNNAMED = "(unnamed)"


def layer_pivot(layers: list[dict[str, Any]]) -> str:
    """One row per layer, one column per activation: D2H bytes per step; H2D only where it differs."""
    order = {n: i for i, n in enumerate(ACTIVATION_NAMES)}  # model order: q, k, v, out, mlp
    acts = sorted(dict.fromkeys(x["activation"] or UNNAMED for x in layers), key=lambda a: order.get(a, len(order)))
    names = list(dict.fromkeys(x["layer"] or "-" for x in layers))
    cell: dict[tuple[str, str], dict[str, Any]] = {}
    for x in layers:
        cell[(x["layer"] or "-", x["activation"] or UNNAMED)] = x
    rows, notes = [], []
    for name in names:
        row, total = [name], 0
        for act in acts:
            x = cell.get((name, act))
            if x is None:
                row.append("")
                continue
            total += x["d2h_bytes"]
            text = size(x["d2h_bytes"])
            if x["h2d_bytes"] != x["d2h_bytes"]:
                text += f" (back {size(x['h2d_bytes'])})"
            if not x["exact"]:
                text += "*"
                notes.append("* a while loop with no known trip count: bytes of one execution")
            row.append(text)
        rows.append([*row, size(total)])
    out = table(("layer", *acts, "total"), rows)
    if UNNAMED in acts:
        notes.append(f"{UNNAMED}: no activation name in the op_name paths around it (jax.named_scope names it)")
    notes.append("the same bytes come back host-to-device in the backward pass unless noted (back ...)")
    return "\n".join([out, *dict.fromkeys(notes)])


PLAN_LEGEND = (
    "device, host = the most memory one step holds at once on the device and in host memory (memory_analysis()); "
    "D2H/step, H2D/step = every byte the plan sends to host and back in one step"
)


def _reuse_and_late(r: dict[str, Any]) -> tuple[tuple[int, int, int | None] | None, dict[str, Any] | None]:
    """A plan row's (host, sent, the schedule's peak) where its host memory is under what it sends to host,
    and its device-to-host copies scheduled late (``late_d2h``) where any is; None for either otherwise."""
    host, sent, peak = r.get("host_bytes"), r.get("planned_d2h_bytes_per_step"), r.get("host_live_peak_bytes")
    late = r.get("late_d2h")
    return ((host, sent, peak) if host is not None and sent and host < sent else None), (
        late if late and late["late"] else None
    )


def plan_notes(r: dict[str, Any]) -> list[str]:
    """Why a plan row's host memory is smaller than what it sends to host, and offloads scheduled late."""
    out = []
    reuse, late = _reuse_and_late(r)
    if reuse is not None:
        host, sent, peak = reuse
        check = ""
        if peak is not None:
            check = f" (the plan's schedule gives {size(peak)}" + (", the same)" if peak == host else ")")
        out.append(
            f"host {size(host)} against {size(sent)} sent to host per step: at most {size(host)} of offloaded data is "
            f"in host memory at once{check}; XLA reuses the host space of copies that are never there together"
        )
    if late is not None:
        out.append(
            f"XLA scheduled {late['late']} of {late['of']} device-to-host copies ({size(late['late_bytes'])}) after "
            "the first copy back to the device (the backward pass had begun): their data stays in device memory "
            "until then"
        )
    return out


def _by_policy(said: list[tuple[dict[str, Any], str]]) -> str:
    """``offload_qkv batch 4 X, batch 16 Y; offload_mlp ...``: one figure per compile, grouped by policy."""
    per: dict[str, list[str]] = {}
    for r, text in said:
        per.setdefault(r["policy"], []).append(text if r["batch"] is None else f"batch {r['batch']} {text}")
    return "; ".join(f"{policy} {', '.join(texts)}" for policy, texts in per.items())


def folded_plan_notes(rows: list[dict[str, Any]]) -> list[str]:
    """``plan_notes``' two kinds, one line each over every compile (the terminal's plan had twelve lines
    for an example of three offload policies at two batches): host memory under what is sent to host,
    and the device-to-host copies scheduled after the first copy back (why offloading lowers the device
    peak less than it moves)."""
    reuse, late = [], []
    for r in rows:
        under, lt = _reuse_and_late(r)
        if under is not None:
            host, sent, peak = under
            other = "" if peak is None or peak == host else f", the plan's schedule {size(peak)}"
            reuse.append((r, f"{size(host)} of {size(sent)}{other}"))
        if lt is not None:
            late.append((r, f"{lt['late']} of {lt['of']} ({size(lt['late_bytes'])})"))
    out = []
    if reuse:
        out.append(
            "note: host memory under what is sent to host per step (at most that much offloaded data is in host "
            f"memory at once: XLA reuses the host space of copies that are never there together): {_by_policy(reuse)}"
        )
    if late:
        out.append(
            "note: device-to-host copies XLA scheduled after the first copy back to the device (the backward pass "
            "had begun: their data stays in device memory until then, so offloading lowers the device peak less "
            f"than it moves): {_by_policy(late)}"
        )
    return out


def grouped_plan_notes(rows: list[dict[str, Any]]) -> list[str]:
    """``note: WHO: TEXT`` once per text: a note every compile has (how the step was found) is one line
    naming the policies (``every compile`` when all have it), not one line per policy; ``plan_notes``'
    figures folded into a line each (``folded_plan_notes``)."""
    who: dict[str, list[str]] = {}
    for r in rows:
        at = "" if r["batch"] is None else f" batch {r['batch']}"
        for n in r["notes"]:
            who.setdefault(n, []).append(f"{r['policy']}{at}")
    said = [f"note: {'every compile' if len(w) == len(rows) > 1 else ', '.join(w)}: {n}" for n, w in who.items()]
    return [*said, *folded_plan_notes(rows)]


def render_plan(tab: dict[str, Any]) -> str:
    """A plan compiled for a target: fits per policy and batch, then bytes per layer and activation."""
    t = tab["target"]
    lim = tab["limit_bytes"]
    mem = t.get("memory_bytes")
    out = [
        f"== {tab['label']} ==",
        f"device memory {size(mem)}" + (f" ({mem / 2**20:,.0f} MiB)" if mem else "") + f"; usable {size(lim)} "
        f"(XLA_PYTHON_CLIENT_MEM_FRACTION {tab['mem_fraction']:g}); one device, no sharding",
    ]
    rows = []
    for r in tab["rows"]:
        fits = "-" if r["fits"] is None else ("yes" if r["fits"] else "NO")
        rows.append(
            [
                r["policy"],
                "-" if r["batch"] is None else str(r["batch"]),
                r["status"],
                size(r["device_bytes"]),
                pct(r["device_bytes"] / lim) if r["device_bytes"] is not None and lim else "-",
                fits,
                size(r["host_bytes"]),
                size(r["planned_d2h_bytes_per_step"]),
                size(r["planned_h2d_bytes_per_step"]),
                si(r["flops_per_step"]),
                recompute(r),
            ]
        )
    out.append(
        table(
            (
                "policy",
                "batch",
                "compile",
                "device",
                "of usable",
                "fits",
                "host",
                "D2H/step",
                "H2D/step",
                "FLOPs/step",
                "recompute",
            ),
            rows,
            left=(0, 2, 5),
        )
    )
    out += textwrap.wrap(PLAN_LEGEND, 118)
    fitting: dict[Any, list[str]] = {}
    for r in tab["rows"]:
        if r["fits"]:
            fitting.setdefault(r["batch"], []).append(r["policy"])
    for batch in dict.fromkeys(r["batch"] for r in tab["rows"]):
        names = fitting.get(batch, [])
        label = "" if batch is None else f"at batch {batch}: "
        failed = [r["policy"] for r in tab["rows"] if r["batch"] == batch and r["status"] != "ok"]
        if len(failed) == sum(r["batch"] == batch for r in tab["rows"]):
            out.append(f"{label}no policy compiled ({', '.join(failed)}): nothing known about memory")
            continue
        line = f"{label}{', '.join(names) + ' fit' if names else 'no policy fits'} in device memory"
        out.append(line + (f" ({', '.join(failed)} not compiled)" if failed else ""))
    out += grouped_plan_notes(tab["rows"])
    # per layer: for each policy, the largest batch compiled
    chosen: dict[str, dict[str, Any]] = {}
    compiled = {(r["policy"], r["batch"]) for r in tab["rows"] if r["status"] == "ok"}
    for entry in tab["layers"]:
        if (entry["policy"], entry["batch"]) not in compiled:
            continue  # a failed compile: nothing known about its host memory
        prev = chosen.get(entry["policy"])
        if prev is None or (entry["batch"] or 0) >= (prev["batch"] or 0):
            chosen[entry["policy"]] = entry
    quiet = []
    for policy, entry in chosen.items():
        batch = "" if entry["batch"] is None else f", batch {entry['batch']}"
        if not entry["layers"]:
            quiet.append(policy)
            continue
        out.append(f"\nhost offload plan, {policy}{batch}: bytes sent to host per step ({tab['label']})")
        out.append(layer_pivot(entry["layers"]))
    if quiet:
        out.append(f"\n{', '.join(quiet)}: the compiler placed nothing in host memory (no offload)")
    from profiler.report.predict_text import render_predictions

    out += render_predictions(tab)
    return "\n".join(out)
