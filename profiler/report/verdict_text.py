"""The verdict (``runs.verdict``) in words: at most 6 lines, the same for the terminal and the dashboard."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profiler.runs.verdict import moved
from profiler.units import COLUMNS, count, human_time, share

LABELS = {"d2h": "D2H", "h2d": "H2D"}


def t(ns: int | float | None) -> str:
    """A time in its own unit, nanoseconds below 1 µs (``80 ns``, ``0 ns``, ``1.25 ms``)."""
    return human_time(ns, nanoseconds=True)


SYNTHETIC_FLAG = "SYNTHETIC: a model, not a measurement"  # the head's last words for a demonstration run
# how the verdict's three kinds of time relate: they measure different things and need not add up
RELATION = (
    "copies above are busy time, not time lost; each saving below is one cause fixed alone, the cost every copy "
    "removed at once"
)
INDENT = "  "
KEY_WIDTH = 9  # "copies", "cost", "savings" in a column
WHY = {"fastest": ", the fastest", "most exposed": ", the most exposed copies"}  # why the verdict shows that run


def _name(policy: str, trace: str | None) -> str:
    """A run as the verdict names it: ``policy P``, or its trace's file name for the default policy."""
    return f"policy {policy}" if policy != "default" else Path(trace or "").name


def _whose(v: dict[str, Any]) -> str:
    """The head's first words: whose copies the lines below are, and why that run; when the fastest of
    several moved nothing, its name, then the fastest run that offloads, whose copies they are."""
    name = _name(v["policy"], v["trace"])
    if v["runs"] == 1:
        return f"Verdict: {name}"
    if v.get("chosen_by") == "fastest with copies":
        best = _name(v["fastest"]["policy"], v["fastest"]["trace"])
        return f"Copies: {best}, the fastest, has none; these are {name}'s, the fastest that offloads"
    return f"Its copies: {name}" + WHY.get(v.get("chosen_by") or "", "")


def _head(v: dict[str, Any]) -> str:
    """What the verdict is about, and per what its numbers are."""
    c = v["copies"]
    steps = f"{count(v['steps'], 'step')}, median {t(v['median_step_ns'])}"
    if not v["gpu"]:
        per = "no GPU activity" + (f"; {steps}" if v["steps"] else "")
    elif c["per"] == "step":
        word = c.get("device_word", "GPU")
        per = f"{count(c['gpus'], word)}, {steps}; copies per step and {word}"
    else:
        word = c.get("device_word", "GPU")
        gpus = count(c["gpus"], word)
        window = f"the {t(v['window_ns'])} window" if v.get("window_ns") else "the window"
        per = f"{gpus}, no steps: copies over {window}, the {word}s together"
    head = f"{_whose(v)} ({per})"
    if v["synthetic"]:
        head += f" {SYNTHETIC_FLAG}"
    return head


def _fastest(v: dict[str, Any]) -> str | None:
    """The policy line of several runs: the fastest that fits, its margin against the noise."""
    f = v.get("fastest")
    if v["runs"] < 2:
        return None
    if f is None:
        return f"Verdict over {v['runs']} runs: none has a median step, so none can be called fastest"
    over = _over(v["runs"], f.get("program"))
    if f["policy"] is None:
        return f"Verdict over {over}: none fits its device's memory ({', '.join(f['too_big'])} do not)"
    head = f"Verdict over {over}: policy {f['policy']} is the fastest"
    head += " that fits" if f["fit_known"] else ""
    head += f", {t(f['step_ns'])} per step"
    if f.get("next"):
        head += _margin(f["next"])
    # the qualifiers last: the most important words come first in a line cut at the terminal's width
    if not f["fit_known"]:
        ran = "each run that ran" if v.get("failed") else "each run"
        head += f"; the device's capacity not known: {ran} fit the device it ran on, by an unknown margin"
    if f["too_big"]:
        head += f"; too big: {', '.join(f['too_big'])}"
    if f.get("other"):
        head += f"; on another kind of device, not compared: {', '.join(f['other'])}"
    if f["cpu"]:
        head += "; CPU runs: they say nothing about a GPU"
    if f.get("program"):
        head += f"; {_others(f['program'])}"
    return head


def _margin(nxt: dict[str, Any]) -> str:
    """``, 32.0 ms ahead of offload_mlp, beyond the noise (spread 4.93 ms)``: a margin (``verdict.margin``)
    against the noise of the two policies' steps."""
    if not nxt["margin_ns"]:  # the same median step: no order to say, noise or not
        said = f", tied with {nxt['policy']}"
    else:
        said = f", {t(nxt['margin_ns'])} ahead of {nxt['policy']}"
    if not nxt["margin_ns"]:
        pass
    elif nxt["within_noise"] is True:
        said += f": within the noise (spread {t(nxt['spread_ns'])})"
    elif nxt["within_noise"] is False and nxt.get("disjoint") and nxt["margin_ns"] < (nxt["spread_ns"] or 0):
        said += f", each of its steps shorter than any of {nxt['policy']}'s (spread {t(nxt['spread_ns'])})"
    elif nxt["within_noise"] is False:
        said += f", beyond the noise (spread {t(nxt['spread_ns'])})"
    if nxt.get("other_program"):
        said += ": their steps are different programs"
    return said


def _offload_vs_remat(v: dict[str, Any]) -> str | None:
    """The plan's question answered by the measured runs: the fastest offload policy against remat."""
    o = (v.get("fastest") or {}).get("offload_vs_remat")
    if not o:
        return None
    return (
        f"Offloading against rematerialization, measured: {o['policy']}, {t(o['step_ns'])} per step{_margin(o['next'])}"
    )


def _over(runs: int, program: dict[str, Any] | None) -> str:
    """The runs the verdict ranked: ``10 runs``, or, where some ran another program, ``5 of 10 runs,
    one model (jit_step with 66 parameters, as remat-scan)``."""
    if not program:
        return f"{runs} runs"
    ranked = runs - len(program["others"])
    return f"{ranked} of {runs} runs, one model ({_program(program.get('name'), program.get('parameters'))})"


def _others(program: dict[str, Any]) -> str:
    """The runs not ranked: ``not ranked, another model (jit_step with 34 parameters): a, b``."""
    them = program.get("others_program")
    what = f" ({_program(them.get('name'), them.get('parameters'))})" if them else ""
    return f"not ranked, another model{what}: {', '.join(program['others'])}"


def _program(name: str | None, parameters: int | None) -> str:
    """``jit_step with 66 parameters``: a step program as the verdict names it."""
    return f"{name or 'its step'}" + (f" with {count(parameters, 'parameter')}" if parameters else "")


def _copies(v: dict[str, Any]) -> str:
    if not v["gpu"]:
        return "nothing moved between host and device"
    c = v["copies"]
    parts = []
    for d in ("d2h", "h2d"):
        m = c[d]
        if not m["count"] and not m["busy_ns"]:
            parts.append(f"{LABELS[d]} no copies")
            continue
        parts.append(
            f"{LABELS[d]} {t(m['busy_ns'])}, {share(m['hidden_fraction'] or 0)} hidden, {t(m['exposed_ns'])} exposed"
        )
    both = c.get("offload") or {}
    if all(c[d]["busy_ns"] for d in ("d2h", "h2d")) and both.get("busy_ns"):
        # the two directions overlap each other: their union is what the policy tables' exposed column counts
        parts.append(f"both as one {t(both['exposed_ns'])} exposed")
    return "; ".join(parts)


def _cost(v: dict[str, Any]) -> str:
    cost = v.get("cost")
    if not v["gpu"]:
        return "nothing to cost: no copies ran on a GPU"
    if not moved(v["copies"]):
        return "nothing to cost: no h2d/d2h copies"
    if cost is None:
        return "not computed (the replay's savings come with the findings: without --no-findings)"
    if cost.get("not_modelled"):
        return f"not modelled: {cost['not_modelled']}"
    per = "per step" if cost["per"] == "step" else "over the window"
    of = f" ({share(cost['share'])} of {'the step' if cost['per'] == 'step' else 'it'})" if cost["share"] else ""
    host = "" if cost.get("host_sync_modeled") is not False else "; host synchronization not modeled"
    without = "the step" if cost["per"] == "step" else "the window"
    word = v["copies"].get("device_word", "GPU")
    own = cost.get("own_copies_ns")
    more = (
        f" (more than {word} {cost['device']}'s own {t(own)} of copies: it also waits for the "
        f"other {word}s' work, which their copies delay; whatif says how much each {word}'s copies give back)"
        if own is not None and cost["saving_ns"] > own
        else ""
    )
    return (
        f"the copies' time costs {t(cost['saving_ns'])} {per}{of} on {word} {cost['device']}{more}: "
        f"{without} replayed without any h2d/d2h copy on any {word}, kernels at their measured times{host}; "
        f"{RELATION}"
    )


def _saving(i: int, s: dict[str, Any], word: str = "GPU") -> str:
    where = f" ({s['where']})" if s["where"] else ""
    if s["saving_ns"] and s.get("measurable") is False:
        size = f"no measurable saving ({t(s['saving_ns'])} per step, under the steps' spread of {t(s['noise_ns'])})"
    elif s["saving_ns"]:
        per = "per step" if s["per"] == "step" else "over the window"
        size = f"saves {t(s['saving_ns'])} {per}"
        if s["device"] is not None and f"{word} {s['device']}" not in s["where"]:
            size += f" on {word} {s['device']}"
    elif s.get("attributed_ns") is not None:
        basis = f" of {s['attributed_basis']}" if s.get("attributed_basis") else ""
        if basis and s.get("attributed_basis_ns"):
            n = s.get("basis_steps")
            # the window holds n steps: the line above is per step, so this one says its figure a step too
            steps = f", {count(n, 'step')}: {t(s['attributed_ns'] / n)} a step on average" if n else ""
            basis += f" ({t(s['attributed_basis_ns'])}{steps})"
        size = f"attributed {t(s['attributed_ns'])}{basis}, saving not modelled"
    else:
        size = "no time cost"
    done = s.get("tried")
    if done:  # the advice's flags were on in a sibling run: its measurement, not the advice blind
        said = f": {done['outcome']}" if done.get("outcome") else ""
        return f"{i}. {s['rule']}{where} {size}: already tried in {done['sibling']}{said} (findings: the numbers)"
    return f"{i}. {s['rule']}{where} {size}: {s['try']}"


def verdict_lines(v: dict[str, Any]) -> list[tuple[str, str]]:
    """The verdict as (key, text) lines, at most 6: the head (and the policies' line), copies, cost,
    the two largest savings; under the policies' line, one more for the runs that did not run, and one
    for the fastest offload policy against remat where both ran."""
    if not v.get("runs"):
        return []
    out: list[tuple[str, str]] = []
    several = _fastest(v)
    if several:
        out.append(("", several))
    trade = _offload_vs_remat(v)
    if trade:
        out.append(("", trade))
    if v.get("failed"):
        out.append(("", _failed(v["failed"])))
    out.append(("", _head(v)))
    out.append(("copies", _copies(v)))
    if v["gpu"]:
        out.append(("cost", _cost(v)))
    key = "savings" if any(s["saving_ns"] and s.get("measurable") is not False for s in v["savings"]) else "findings"
    for i, s in enumerate(v["savings"], start=1):
        out.append((key if i == 1 else "", _saving(i, s, v["copies"].get("device_word", "GPU"))))
    return out[: 6 + bool(v.get("failed")) + bool(trade)]


def _failed(failed: list[dict[str, Any]]) -> str:
    """``Did not run, so not ranked: none-scan (out of memory on the device: 17.95G needed, 15.75G there)``."""
    said = [f"{f['policy'] or 'a run'} ({f['why']})" for f in failed]
    return f"Did not run, so not ranked: {'; '.join(said)}"


def _wrapped(text: str, key: str | None, wide: bool) -> str:
    """One verdict line within ``COLUMNS`` columns, wrapped, never cut (its caveats come last): a keyed
    line goes on under its text, a head line two columns in; whole with *wide*."""
    import textwrap

    line = text if key is None else f"{INDENT}{key:<{KEY_WIDTH}}{text}"
    if wide or len(line) <= COLUMNS:
        return line
    hang = " " * (len(INDENT) + KEY_WIDTH) if key is not None else "  "
    return textwrap.fill(line, COLUMNS, subsequent_indent=hang, break_long_words=False, break_on_hyphens=False)


def render_verdict(v: dict[str, Any], wide: bool = False) -> str:
    """The verdict block of the terminal: each line within ``COLUMNS`` columns, wrapped (unless *wide*)."""
    lines, keyed = [], False
    for key, text in verdict_lines(v):
        keyed = keyed or bool(key)
        lines.append(_wrapped(text, key if keyed else None, wide))
    return "\n".join(lines)
