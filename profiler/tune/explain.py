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

from collections.abc import Callable
from typing import Any

from profiler.analysis.accuracy import CALIBRATED, CALIBRATED_XLA, XLA, Accuracy, cost_model, of_costs
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
    text = f"its {human_bytes(o.copy_bytes.get('d2h', 0))} per step on {compiler.link.name}: " + "; ".join(
        _direction(d, o.copy_ns.get(d, 0), cover.get(d)) for d in ("d2h", "h2d")
    )
    text += f"; {_t(o.exposed_ns)} exposed when it is the only one offloaded"
    if base is not None:
        text += f" (a step of {_t(o.step_ns)} against {_t(base.step_ns)} with everything recomputed)"
    return text


DIRECTION = {
    "d2h": ("to host", "the forward compute"),
    "h2d": ("back", "the backward compute"),
}


def _direction(d: str, copy_ns: int, cover: dict[str, Any] | None) -> str:
    """One direction's copies against the compute that overlaps them (what is scheduled between each
    copy's start and done): ``to host 1.07 ms under 3.21 ms of the forward compute (layer/dot_general):
    hidden``; never both directions summed against one."""
    where, compute = DIRECTION[d]
    text = f"{where} {_t(copy_ns)}"
    if not cover:
        return text + " (no copy in this direction)"
    under = cover.get("cover_ns", 0)
    text += f" under {_t(under)} of {compute} scheduled between start and done"
    if cover.get("top"):
        text += f" ({', '.join(cover['top'])})"
    return text + (": it can hide" if under >= copy_ns else f": {_t(copy_ns - under)} more than that compute")


def cost_models(compiler: Any) -> list[str]:
    """How each step the tune compiled was costed (``xla`` or ``roofline``: ``accuracy.of_costs``)."""
    cache = getattr(compiler, "cache", None) or {}
    done = [c for c in cache.values() if c is not None and c.sched is not None]
    return [cost_model(c.xla_costed) for c in done]


def accuracy_of(compiler: Any) -> Accuracy:
    """How far the tune's kind of prediction was off on real steps: by how its compiles were costed
    (XLA's estimates or the roofline), calibrated or not."""
    acc = of_costs(cost_models(compiler))
    if getattr(compiler, "calibration", None) is not None:
        return CALIBRATED_XLA if acc is XLA else CALIBRATED
    return acc


def program_of(compiler: Any, c: Candidate) -> str | None:
    """The HLO fingerprint of *c*'s compiled step (None: not compiled or not read)."""
    comp = compiler.cache.get(compiler._key(c)) if hasattr(compiler, "cache") else None
    return comp.fingerprint if comp is not None else None


def same_program(choice: Candidate, tried: list[Tried], compiler: Any) -> dict[str, list[str]]:
    """Per name of *choice*: the other placements of it that compiled to the very same program as the
    choice (its HLO fingerprint), in candidates the search tried: there the placement asked made no
    difference to what XLA compiled."""
    mine = program_of(compiler, choice)
    if mine is None:
        return {}
    place = choice.place()
    out: dict[str, list[str]] = {}
    for t in tried:
        if t.candidate.jax_policy or t.candidate.key() == choice.key() or program_of(compiler, t.candidate) != mine:
            continue
        for n, q in t.candidate.place().items():
            if n in place and q != place[n] and q not in out.get(n, []):
                out.setdefault(n, []).append(q)
    return out


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


def tie_line(
    choice: Tried,
    s: Search,
    names: list[Name],
    acc: Accuracy,
    others: list[Tried] | None = None,
    program: Callable[[Candidate], str | None] | None = None,
) -> str | None:
    """The fitting placements predicted too close to the choice to call (within the tie margin of the
    choice's own step, ``Accuracy.tie``, the percentage the line prints), among
    the search's and *others* (the presets), and the one of them that leaves the most device memory
    free; None when the choice stands alone.  With *program* (a candidate's HLO fingerprint), a
    candidate that compiled to the choice's own program is the choice, not a tie.  A step far shorter
    than the real steps the error was measured on (``Accuracy.out_of_range``) is too short to call."""
    o = choice.outcome
    if o is None:
        return None
    if acc.out_of_range(o.step_ns):
        return (
            f"too short to call: at {_t(o.step_ns)} a step is decided by kernel launches, which the prediction "
            f"does not price, and its error was measured on real steps of {_t(acc.shortest_ns)} and more: grow the "
            "step (the script's size options) before choosing by it"
        )
    mine = program(choice.candidate) if program else None
    close = [
        t
        for t in [*s.tried, *(others or [])]
        if t is not choice
        and t.candidate.key() != choice.candidate.key()
        and t.outcome is not None
        and t.outcome.fits
        and abs(t.outcome.step_ns - o.step_ns) < acc.tie * o.step_ns  # as said: within N% of the choice's step
        and (mine is None or program(t.candidate) != mine)  # type: ignore[misc]
    ]
    if not close:
        return None
    n = len(close)
    text = (
        f"a tie: {n} other fitting placement{'s are' if n > 1 else ' is'} predicted within {100 * acc.tie:.0f}% of "
        f"it, inside the error of these predictions ({acc.kind}: {acc.error_text()} on {acc.basis})"
    )
    lighter = min(close, key=lambda t: (t.outcome.device_bytes or 0, t.outcome.step_ns))  # type: ignore[union-attr]
    lo, mine_bytes = lighter.outcome.device_bytes, o.device_bytes  # type: ignore[union-attr]
    if lo is not None and mine_bytes is not None and lo < mine_bytes:
        slower = lighter.outcome.step_ns / o.step_ns - 1  # type: ignore[union-attr]
        text += (
            f"; of them {lighter.candidate.label(names)} ({100 * slower:+.1f}% predicted) leaves "
            f"{human_bytes(mine_bytes - lo)} more device memory free: pick it for headroom"
        )
    else:
        text += "; none of them leaves more device memory free"
    return text


def verdict(choice: Tried, s: Search, compiler: Any, names: list[Name], others: list[Tried]) -> str:
    """The verdict line: the choice, its step, copies and memory; a budget cut and a tie said in it."""
    c, o = choice.candidate, choice.outcome
    assert o is not None
    text = (
        f"choice: {c.label(names)}: {_t(o.step_ns)} per step predicted, {_t(o.exposed_ns)} of copies exposed, "
        f"{human_bytes(o.device_bytes)} on the device"
        + (f" of {human_bytes(compiler.limit)}" if compiler.limit else "")
        + (f", {human_bytes(o.host_bytes)} in host memory" if o.host_bytes else "")
    )
    twins = _twins(choice, [*s.tried, *others], compiler, names)
    if twins:
        text += f" (the same program as {', '.join(twins[:2])}{' and others' if len(twins) > 2 else ''})"
    if s.budget_cut:
        text += (
            f"; the search was cut short by its compile budget ({s.budget} compiles; --max-compiles raises it): "
            "a placement it did not try may be faster"
        )
    acc = accuracy_of(compiler)
    tie = tie_line(choice, s, names, acc, others, lambda cand: program_of(compiler, cand))
    return text + (f"; {tie}" if tie else "")


def _twins(choice: Tried, tried: list[Tried], compiler: Any, names: list[Name]) -> list[str]:
    """The labels of the other candidates that compiled to the choice's own program."""
    mine = program_of(compiler, choice.candidate)
    if mine is None:
        return []
    out: list[str] = []
    for t in tried:
        label = t.candidate.label(names)
        same = t.candidate.key() != choice.candidate.key() and program_of(compiler, t.candidate) == mine
        if same and label not in out:
            out.append(label)
    return out


VERB = {"device": "kept on the device", "remat": "recomputed", "offload": "offloaded"}


def lines(choice: Tried, s: Search, compiler: Any, names: list[Name], others: list[Tried] | None = None) -> list[str]:
    """One sentence per named activation of *choice* (one in all for a JAX preset), after the verdict;
    *others*: the presets compiled beside the search."""
    c, o = choice.candidate, choice.outcome
    if o is None:
        return []
    out = [verdict(choice, s, compiler, names, others or [])]
    late = o.late_h2d or {}
    if late.get("count"):
        out.append(f"late copies back: {sentence(late)}; {fix(late)}")
    if c.jax_policy:
        out.append(
            f"JAX's {c.jax_policy} is faster than every placement of the named activations the search tried: "
            "it saves values the names do not tag"
        )
        return out
    return out + name_lines(choice, s, compiler, names, others)


def name_lines(
    t: Tried, s: Search, compiler: Any, names: list[Name], others: list[Tried] | None = None, where: str = "the choice"
) -> list[str]:
    """One sentence per named activation of the placement *t* (none for a JAX preset): where it is and why;
    *where*: what *t* is to the reader (the choice, or the best placement of the names beside a JAX policy)."""
    c, o = t.candidate, t.outcome
    if o is None or c.jax_policy:
        return []
    out = []
    place = c.place()
    alike = same_program(c, [*s.tried, *(others or [])], compiler)
    for n in names:
        p = place.get(n.name)
        if p is None:
            continue
        if alike.get(n.name):
            out.append(_no_difference(n, p, alike[n.name]))
            continue
        out.append(_name_line(n, p, c, o, s, compiler, where))
    return out


def _no_difference(n: Name, asked: str, same: list[str]) -> str:
    """A name whose placement did not change the compiled program: what was asked, and that the
    program is the same with it elsewhere (so no line claims the placement did anything)."""
    other = " or ".join(VERB[q] for q in same)
    actual = " (in effect recomputed, or fused into its users)" if "remat" in same else ""
    return (
        f"{n.name}: {VERB[asked]} asked, but the compiled program is the same as with it {other}: "
        f"XLA compiled the same step either way{actual}; the placement makes no difference here"
    )


def _name_line(n: Name, p: str, c: Candidate, o: Outcome, s: Search, compiler: Any, where: str = "the choice") -> str:
    """The line of one name whose placement the compiled program follows (*where*: what *c* is to the reader)."""
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
        text += f"; in {where}, " + "; ".join(others)
    return text
