"""Why the choice puts each activation where it does: one line per name.

Three sources, all compiled and predicted by the search:

- the name moved *alone* from the resting candidate (everything recomputed): what its
  copies move and take on the link, the compute the schedule put between each copy's
  start and done (what can hide it), and how much stayed exposed; what recomputing it
  costs (the resting step minus the step with it kept on the device);
- the *choice with this one name placed otherwise*, when the search compiled it: the
  predicted step or why it does not fit, against the choice's.
"""

from __future__ import annotations

from typing import Any

from profiler.analysis.accuracy import CALIBRATED, ROOFLINE, Accuracy
from profiler.analysis.late_copies import fix, sentence
from profiler.tune.candidate import Candidate, Name
from profiler.tune.evaluate import Outcome, copy_cover
from profiler.tune.search import Search, Tried
from profiler.units import human_bytes, human_time


def _t(ns: float | None) -> str:
    return human_time(max(0, round(ns)), nanoseconds=True) if ns is not None else "?"


def recompute_ns(name: str, s: Search) -> int | None:
    """What recomputing *name* costs per step: the resting step minus that with it kept (alone);
    without that compile, the resting step minus that with it offloaded, plus its exposed copy time."""
    base = s.base.outcome if s.base else None
    dev = s.alone.get((name, "device"))
    off = s.alone.get((name, "offload"))
    if base is None:
        return None
    if dev is not None and dev.outcome is not None:
        return max(0, base.step_ns - dev.outcome.step_ns)
    if off is not None and off.outcome is not None:
        return max(0, base.step_ns - off.outcome.step_ns + off.outcome.exposed_ns)
    return None


def _copies(name: str, s: Search, compiler: Any) -> str | None:
    """``its 8.00 MiB per step take 133 µs each way on PCIe Gen5 x16, with 410 µs of compute between
    the copies (layer_0/dot_general, ...); 0 exposed``, from its offload alone."""
    off = s.alone.get((name, "offload"))
    if off is None or off.outcome is None:
        return None
    comp = compiler.cache.get(compiler._key(off.candidate))
    cover = copy_cover(comp, compiler.link) if comp is not None else {}
    o = off.outcome
    base = s.base.outcome if s.base else None
    if not o.copy_bytes.get("d2h"):
        return "nothing moves (the program keeps no copy of it for the backward pass)"
    d2h = cover.get("d2h", {})
    h2d = cover.get("h2d", {})
    under = (d2h.get("cover_ns", 0) + h2d.get("cover_ns", 0)) or None
    tops = list(dict.fromkeys(d2h.get("top", []) + h2d.get("top", [])))[:2]
    copy = max(o.copy_ns.get("d2h", 0), o.copy_ns.get("h2d", 0))
    text = f"its {human_bytes(o.copy_bytes.get('d2h', 0))} per step take {_t(copy)} each way on {compiler.link.name}"
    if under is not None:
        text += f", with {_t(under)} of compute scheduled between the copies"
        if tops:
            text += f" ({', '.join(tops)})"
    text += f"; {_t(o.exposed_ns)} exposed when it is the only one offloaded"
    if base is not None:
        text += f" (a step of {_t(o.step_ns)} against {_t(base.step_ns)} with everything recomputed)"
    return text


def _other(choice: Candidate, name: str, place: str, chosen: Outcome, s: Search, limit: int | None) -> str | None:
    """The choice with *name* at *place* instead, when the search compiled it."""
    seen = {t.candidate.key(): t for t in s.tried}
    t = seen.get(choice.with_(name, place).key())
    if t is None or t.outcome is None:
        return None
    o = t.outcome
    verb = {"device": "kept on the device", "remat": "recomputed", "offload": "offloaded"}[place]
    if not o.fits:
        over = f" of {human_bytes(limit)}" if limit else ""
        return f"{verb} instead: does not fit ({human_bytes(o.device_bytes)}{over})"
    diff = o.step_ns - chosen.step_ns
    sign = "+" if diff >= 0 else "-"
    return f"{verb} instead: {_t(o.step_ns)} ({sign}{_t(abs(diff))})"


def _no_faster(name: str, s: Search) -> str:
    """Why recomputing *name* costs nothing: kept alone on the device, the step is no faster."""
    dev = s.alone.get((name, "device"))
    base = s.base.outcome if s.base else None
    if dev is None or dev.outcome is None or base is None:
        return "recomputing it costs nothing measurable"
    return (
        f"kept on the device alone the step is no faster ({_t(dev.outcome.step_ns)} against {_t(base.step_ns)} "
        "recomputing it: a kept value is written out and read back, a recomputed one may be fused into its users)"
    )


def _untried(name: str, s: Search) -> str:
    """Why *name* was never moved alone: left out by --names, or the search stopped first."""
    if s.only is not None and name not in s.only:
        return "where it rests: not among --names"
    return "not tried alone: the search stopped before"


def tie_line(choice: Tried, s: Search, names: list[Name], acc: Accuracy) -> str | None:
    """The fitting placements predicted too close to the choice to call (``Accuracy.is_tie``), and the
    one of them that leaves the most device memory free; None when the choice stands alone."""
    o = choice.outcome
    if o is None:
        return None
    close = [
        t
        for t in s.tried
        if t is not choice and t.outcome is not None and t.outcome.fits and acc.is_tie(o.step_ns, t.outcome.step_ns)
    ]
    if not close:
        return None
    n = len(close)
    text = (
        f"a tie: {n} other fitting placement{'s are' if n > 1 else ' is'} predicted within {100 * acc.tie:.0f}% of "
        f"it, inside the error of these predictions ({acc.kind}: {acc.error_text()} on {acc.basis})"
    )
    lighter = min(close, key=lambda t: (t.outcome.device_bytes or 0, t.outcome.step_ns))  # type: ignore[union-attr]
    lo, mine = lighter.outcome.device_bytes, o.device_bytes  # type: ignore[union-attr]
    if lo is not None and mine is not None and lo < mine:
        slower = lighter.outcome.step_ns / o.step_ns - 1  # type: ignore[union-attr]
        text += (
            f"; of them {lighter.candidate.label(names)} ({100 * slower:+.1f}% predicted) leaves "
            f"{human_bytes(mine - lo)} more device memory free: pick it for headroom"
        )
    else:
        text += "; none of them leaves more device memory free"
    return text


def lines(choice: Tried, s: Search, compiler: Any, names: list[Name]) -> list[str]:
    """One sentence per named activation of *choice* (one in all for a JAX preset)."""
    c, o = choice.candidate, choice.outcome
    if o is None:
        return []
    head = (
        f"choice: {c.label(names)}: {_t(o.step_ns)} per step predicted, {_t(o.exposed_ns)} of copies exposed, "
        f"{human_bytes(o.device_bytes)} on the device"
        + (f" of {human_bytes(compiler.limit)}" if compiler.limit else "")
        + (f", {human_bytes(o.host_bytes)} in host memory" if o.host_bytes else "")
    )
    out = [head]
    tie = tie_line(choice, s, names, CALIBRATED if getattr(compiler, "calibration", None) is not None else ROOFLINE)
    if tie:
        out.append(tie)
    late = o.late_h2d or {}
    if late.get("count"):
        out.append(f"late copies back: {sentence(late)}; {fix(late)}")
    if c.jax_policy:
        out.append(
            f"JAX's {c.jax_policy} is faster than every placement of the named activations the search tried: "
            "it saves values the names do not tag"
        )
        return out
    place = c.place()
    for n in names:
        p = place.get(n.name)
        if p is None:
            continue
        rc = recompute_ns(n.name, s)
        copies = _copies(n.name, s, compiler)
        if p == "offload":
            text = f"{n.name}: offload; {copies or 'its copies'}"
            if rc is not None:
                text += f"; recomputing it costs {_t(rc)}"
        elif p == "remat":
            text = f"{n.name}: recompute" + (f" ({_t(rc)} per step)" if rc else "")
            if not any((n.name, q) in s.alone for q in ("device", "offload")):
                text += f" ({_untried(n.name, s)})"
            if rc == 0:
                text += f"; {_no_faster(n.name, s)}"
            if copies:
                text += f"; offloading it: {copies}"
        else:
            dev = s.alone.get((n.name, "device"))
            extra = None
            if dev is not None and dev.outcome is not None and s.base and s.base.outcome:
                extra = (dev.outcome.device_bytes or 0) - (s.base.outcome.device_bytes or 0)
            what = "kept on the device (a checkpoint input: never recomputed)" if n.is_input else "kept on the device"
            text = f"{n.name}: {what}"
            if extra is not None and not n.is_input and rc:
                text += f"; {human_bytes(max(0, extra))} more device memory saves {_t(rc)} of recomputation"
            elif rc == 0 and not n.is_input:
                text += "; kept alone it is no faster than recomputed: the choice as a whole is faster with it kept"
            elif rc is None and not n.is_input:
                text += f" ({_untried(n.name, s)})"
            if copies:
                text += f"; offloading it: {copies}"
        others = [_other(c, n.name, q, o, s, compiler.limit) for q in n.options() if q != p]
        others = [x for x in others if x]
        if others:
            text += "; in the choice, " + "; ".join(others)
        out.append(text)
    return out
