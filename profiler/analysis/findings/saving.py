"""Each finding's saving: its change replayed on its window (METRICS.md "Savings")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from profiler.analysis.dependencies import KIND_OF_CLASS
from profiler.analysis.findings.evidence import CAPTURE, Evidence
from profiler.analysis.findings.rules.text import dur
from profiler.analysis.replay import previous_call
from profiler.analysis.savings import CAPTURE as CAPTURE_WINDOW
from profiler.analysis.savings import DEVICE, STEPS, WINDOWS, Window
from profiler.threads import map_in_threads
from profiler.trace.jax_profile import NO_WAITS
from profiler.units import count

if TYPE_CHECKING:
    from profiler.analysis.findings import Finding
    from profiler.analysis.replay import Change

NO_TIME_COST = "no time cost: a note on the run or the capture"


def savings(found: list[Finding], ev: Evidence) -> tuple[list[Finding], dict[str, Any] | None]:
    """``with_saving`` of every finding and the ``copy_free`` document, the replays side by side
    (``threads.map_in_threads``); what they share is made first, in this thread.  The same
    results as one after the other."""
    if _replays_needed(found, ev):
        ev.replays.prepare()
    tasks: list[Callable[[], Any]] = [partial(with_saving, f, ev) for f in found]
    done = map_in_threads(lambda task: task(), [*tasks, partial(copy_free, ev)])
    return done[:-1], done[-1]


def _replays_needed(found: list[Finding], ev: Evidence) -> bool:
    """Whether ``with_saving`` of some finding or ``copy_free`` replays (``ev.replays``)."""
    if not ev.devices or not ev.trace.waits_recorded:
        return False
    return any(f.change is not None for f in found) or _copies_moved(ev)


def _copies_moved(ev: Evidence) -> bool:
    """Whether some GPU made an h2d/d2h copy (the copy-free replay then removes them)."""
    return any(d["copies"]["offload"]["count"] for d in ev.devices.values())


def with_saving(f: Finding, ev: Evidence) -> Finding:
    """*f* with ``saving_ns`` and its basis: its change replayed, or why there is none."""
    from profiler.analysis.findings import NOT_MODELLED

    if f.change is None:
        why = f.no_saving or (NO_TIME_COST if f.attributed_ns is None else NOT_MODELLED)
        return replace(f, saving_basis=why)
    if not ev.devices:
        return replace(f, saving_basis="no GPU activity: nothing to replay")
    if not ev.trace.waits_recorded:
        return replace(f, saving_basis=f"not modelled: {NO_WAITS}")
    window = f.window or Window(WINDOWS)
    paced = None
    if window.kind == DEVICE and f.attributed_ns is not None and f.attributed_ns >= ev.config["severity_min_cost_ns"]:
        paced = (str(window.device), -(-f.attributed_ns // 10))  # under a tenth of the attributed time
    s = ev.replays.saving(f.change, paced)
    value = s.on(window)
    if value is None:  # per step, but no device has an included step with GPU ops: the windows
        window = Window(WINDOWS) if len(ev.devices) > 1 else Window(DEVICE, next(iter(ev.devices)))
        value = s.on(window)
    basis_ns, basis = _basis(ev, window, s.device_on_steps())
    verdict = f.verdict + _why_small(ev, f, int(value), window, s.paced)
    return replace(f, verdict=verdict, saving=s, saving_ns=int(value), saving_basis_ns=basis_ns, saving_basis=basis)


def _why_small(ev: Evidence, f: Finding, saving: int, window: Window, paced: dict[str, int] | None) -> str:
    """A sentence for a saving under a tenth of the attributed time (of at least
    ``severity_min_cost_ns``) on one GPU: whether that GPU waits for its host."""
    if f.attributed_ns is None or f.attributed_ns < ev.config["severity_min_cost_ns"] or saving * 10 >= f.attributed_ns:
        return ""
    gone = f"; the replay with {f.change.what if f.change else 'this changed'} gives back only {dur(saving)}"
    if window.kind != DEVICE:
        return gone
    if paced is not None and ev.on_tpu:
        return gone + _tpu_held(ev, window, paced, f.change)
    if paced is not None:
        return (
            f"{gone}: the {ev.device_word} work that ends {ev.device_word} {window.device}'s window there "
            f"({count(paced['ops'], 'op')}) follows an op "
            f"its host launched {dur(paced['before_end_ns'])} before the end; the host paces the GPU: the program "
            "is host-bound"
        )
    return f"{gone}: other work on {ev.device_word} {window.device}'s critical path takes their place"


def _tpu_held(ev: Evidence, window: Window, paced: dict[str, int], change: Change | None) -> str:
    """Why a TPU's window stays: its launches are the conversion's issue times (no host calls), moved
    only by the core's done waits (``jax_profile``); the wait they last moved with waited for a copy the
    change leaves, whose end the replay keeps where the recording's done ended."""
    host, k = ev.replays.host, paced.get("call", -1)
    if host is not None and change is not None and change.detached.size:
        before, gone = previous_call(host), set(change.detached.tolist())
        while k in gone:  # a call the change detached returns as it begins: the one before it set its time
            k = int(before[k])
    if host is None or k < 0 or k >= len(host) or not host.blocked[k] or host.waited[k] < 0:
        return f": other work on {ev.device_word} {window.device}'s critical path takes their place"
    kind = int(ev.replays.deps.ops.kind[host.waited[k]])
    cls = next((c for c, v in KIND_OF_CLASS.items() if v == kind), "other")
    a = "an" if cls == "h2d" else "a"
    free = ev.replays.copy_free_saving.window_ns.get(str(window.device), 0)
    return (
        f": {ev.device_word} {window.device}'s work there follows its done wait on {a} {cls} copy the change "
        "leaves, which the replay ends where its done ended in the recording (a TPU copy spans from its "
        "start to the end of its done, however early its transfer ended): those recorded ends, not "
        f"a host, hold the window (the copy-free replay, every copy and wait gone, gives back {dur(free)})"
    )


def _basis(ev: Evidence, window: Window, step_device: str | None) -> tuple[int, str]:
    """The time a saving on *window* is a share of, and its name."""
    if window.kind == DEVICE:
        d = ev.devices.get(str(window.device))
        return (int(d["span_ns"]) if d else 0), f"{ev.device_word} {window.device}'s window"
    if window.kind == WINDOWS:
        n = len(ev.devices)
        word = ev.device_word
        name = f"the summed windows of {n} {word}s" if n > 1 else f"{word} {next(iter(ev.devices))}'s window"
        return int(sum(d["span_ns"] for d in ev.devices.values())), name
    if window.kind == CAPTURE_WINDOW:
        w0 = min(d["window_ns"][0] for d in ev.devices.values())
        w1 = max(d["window_ns"][1] for d in ev.devices.values())
        return int(w1 - w0), CAPTURE
    assert window.kind == STEPS
    n = ev.replays.included
    median = ev.steps.get("median_included_step_ns") or 0
    gpu = f", GPU {step_device}" if step_device is not None and len(ev.devices) > 1 else ""
    return int(median), f"the median step (of {len(n)}{gpu})"


def copy_free(ev: Evidence) -> dict[str, Any] | None:
    """Per device, the copy-free replay (every h2d/d2h copy removed, on every device): its span and
    saving on the window, and per step (median); None without GPU activity."""
    if not ev.devices:
        return None
    if not ev.trace.waits_recorded:
        return {"host_sync_modeled": False, "not_modelled": NO_WAITS, "devices": {}}
    if _copies_moved(ev) or "replays" in ev.__dict__:
        return ev.replays.copy_free_doc()
    # no h2d/d2h copy anywhere and no replay made: nothing to remove, and no dependency pass for it;
    # per step only on a GPU with ops in an included step, as the replay says
    included = [s for s in ev.steps["steps"] if not s["excluded"]]
    stepped = {str(dev) for s in included for dev in s["devices"]}
    span = {dev: int(d["span_ns"]) for dev, d in ev.devices.items()}
    doc = {"window_ns": 0, "replayed_span_ns": 0, "copy_free_span_ns": 0, "saving_ns": 0}
    return {
        "host_sync_modeled": True,
        "devices": {
            dev: doc
            | {"window_ns": v, "replayed_span_ns": v, "copy_free_span_ns": v}
            | (
                {"steps": len(included), "step_saving_ns": 0}
                if dev in stepped
                else {"steps": 0, "step_saving_ns": None}
            )
            for dev, v in span.items()
        },
    }
