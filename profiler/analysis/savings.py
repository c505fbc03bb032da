"""Savings: what fixing a finding gives back, by the what-if replay (METRICS.md "Savings").

``saving = replayed span with nothing changed - replayed span with the change``, on a window:
one device's window, the windows of every device summed, the capture's GPU time (first GPU op
to last, over all devices), or per step: the median over the included steps of each step's
saving, each step predicted as ``whatif`` predicts it (``whatif._step_rows``), on the device
where that median is largest.  Host synchronization is modeled as ``whatif`` models it by
default.

One ``Replays`` per run holds what every replay shares: the dependencies (the stalls' pass),
the blocking calls, the steps and the replay with nothing changed.  The copy-free replay of a
device removes every h2d/d2h copy of that device: no saving of a change that only removes or
shortens copies or drops waits on copies exceeds it on the same window.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from profiler.analysis.dependencies import D2H, H2D, Dependencies, dependencies
from profiler.analysis.hostsync import HostSyncs, host_syncs
from profiler.analysis.replay import NO_CHANGE, Change, Replay, replay
from profiler.analysis.whatif import _KEYS, _step_rows, keyed_step_ops, step_frames
from profiler.trace.loader import Trace

if TYPE_CHECKING:
    from profiler.analysis.breakdown import Breakdown

DEVICE, WINDOWS, CAPTURE, STEPS = "device", "windows", "capture", "steps"


@dataclass(frozen=True)
class Window:
    """Where a saving is measured: one device's window, every device's window summed, the capture's
    GPU time, or per step (the median over the included steps)."""

    kind: str
    device: str | None = None


@dataclass(frozen=True)
class Outcome:
    """One replay reduced to what savings read: per device the last replayed end, and per device
    and step the predicted step time (``None`` without steps)."""

    ends: dict[str, int]
    steps: dict[str, dict[int, int]] | None
    host_sync_modeled: bool


@dataclass(frozen=True)
class Saving:
    """A change's saving per device: on its window and, with steps, per step (median)."""

    window_ns: dict[str, int]  # per device: base end - changed end
    step_ns: dict[str, int | None]  # per device: median over included steps of the step's saving
    steps: int  # included steps
    host_sync_modeled: bool
    change: str = ""
    capture_ns: int = 0  # the capture's GPU time: last end over all devices, base - changed
    per_step: dict[str, list[int]] = field(default_factory=dict, repr=False)

    def on(self, window: Window) -> int | None:
        """The saving on *window* (None: per step, and no device has included steps)."""
        if window.kind == DEVICE:
            return self.window_ns.get(str(window.device), 0)
        if window.kind == WINDOWS:
            return sum(self.window_ns.values())
        if window.kind == CAPTURE:
            return self.capture_ns
        medians = [v for v in self.step_ns.values() if v is not None]
        return max(medians) if medians else None

    def device_on_steps(self) -> str | None:
        """The device whose median step saving is the largest (ties: the smallest id)."""
        best = [(v, d) for d, v in self.step_ns.items() if v is not None]
        return min(best, key=lambda x: (-x[0], int(x[1])))[1] if best else None

    def to_json(self) -> dict[str, Any]:
        return {
            "change": self.change,
            "host_sync_modeled": self.host_sync_modeled,
            "devices": {
                d: {"window_saving_ns": self.window_ns[d], "step_saving_ns": self.step_ns.get(d)}
                for d in self.window_ns
            },
            "steps": self.steps,
        }


class Replays:
    """The replays of one run, sharing one dependency pass, its blocking calls and its steps."""

    def __init__(self, trace: Trace, breakdown: Breakdown, model_host: bool = True) -> None:
        self.trace = trace
        self.breakdown = breakdown
        stalls = breakdown.stalls
        self.deps: Dependencies = stalls.deps if stalls is not None else dependencies(trace)
        self.host: HostSyncs | None = host_syncs(trace, self.deps) if model_host else None
        ops = self.deps.ops
        order = np.argsort(ops.device, kind="stable")
        dev = ops.device[order]
        cut = np.flatnonzero(np.r_[True, dev[1:] != dev[:-1]]) if dev.size else np.zeros(0, dtype=np.int64)
        self._order, self._cut = order, cut
        self.devices = [str(int(d)) for d in dev[cut]]
        self.w0 = dict(zip(self.devices, np.minimum.reduceat(ops.start[order], cut).tolist(), strict=True))
        self.recorded_end = dict(zip(self.devices, np.maximum.reduceat(ops.end[order], cut).tolist(), strict=True))

    # --- the run's steps ------------------------------------------------------------------------
    @cached_property
    def _steps(self) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame] | None:
        frames = step_frames(self.breakdown)
        if frames is None:
            return None
        steps, step_ops = frames
        return steps, step_ops, keyed_step_ops(self.deps.ops, step_ops.select("index", *_KEYS))

    @cached_property
    def included(self) -> set[int]:
        s = self._steps
        if s is None:
            return set()
        return set(s[0].filter(pl.col("excluded").is_null())["index"].to_list())

    # --- replays ----------------------------------------------------------------------------------
    def replay(self, change: Change = NO_CHANGE) -> Replay:
        return replay(self.deps, 1.0, self.host, change)

    def outcome(self, change: Change = NO_CHANGE) -> Outcome:
        rp = self.replay(change)
        return self.outcome_of(rp)

    def outcome_of(self, rp: Replay) -> Outcome:
        ends = np.maximum.reduceat(rp.end[self._order], self._cut).tolist() if self._cut.size else []
        per_step = None
        if self._steps is not None:
            steps, step_ops, keyed = self._steps
            rows = _step_rows(rp, steps, step_ops, keyed)
            index = dict(zip(steps["name"].to_list(), steps["index"].to_list(), strict=True))
            per_step = {
                str(dev): {int(index[r["name"]]): int(r["predicted_ns"]) for r in rs} for dev, rs in rows.items()
            }
        return Outcome(dict(zip(self.devices, ends, strict=True)), per_step, rp.host_sync_modeled)

    @cached_property
    def base(self) -> Outcome:
        """The replay with nothing changed (the recorded timeline, unless clock skew made a cycle)."""
        return self.outcome(NO_CHANGE)

    def saving(self, change: Change) -> Saving:
        """What *change* gives back, per device and per step."""
        return self.saving_of(change.what, self.outcome(change))

    def saving_of(self, what: str, out: Outcome) -> Saving:
        base = self.base
        window = {d: int(base.ends[d] - out.ends[d]) for d in self.devices}
        capture = int(max(base.ends.values(), default=0) - max(out.ends.values(), default=0))
        step_ns: dict[str, int | None] = {d: None for d in self.devices}
        per_step: dict[str, list[int]] = {}
        if base.steps is not None and out.steps is not None:
            for d in self.devices:
                b, c = base.steps.get(d, {}), out.steps.get(d, {})
                got = [b[i] - c[i] for i in sorted(self.included) if i in b and i in c]
                if got:
                    per_step[d] = got
                    step_ns[d] = int(np.median(got))  # halves of an even count: rounded down
        return Saving(window, step_ns, len(self.included), out.host_sync_modeled, what, capture, per_step)

    # --- changes ------------------------------------------------------------------------------------
    def copy_rows(self, device: str | int | None = None) -> np.ndarray:
        """Rows of the h2d and d2h copies (of *device*, else of every device)."""
        ops = self.deps.ops
        sel = (ops.kind == H2D) | (ops.kind == D2H)
        if device is not None:
            sel &= ops.device == int(device)
        return np.flatnonzero(sel)

    def copy_free(self, device: str | int) -> Change:
        """Every h2d/d2h copy of *device* removed (zero time, and no op waits for them)."""
        return Change(f"every h2d/d2h copy of GPU {device} removed", removed=self.copy_rows(device))

    def rows_of(self, frame: pl.DataFrame) -> np.ndarray:
        """The rows of ``deps.ops`` of the ops in *frame* (keyed by pid, device, stream, correlation_id,
        start, as every op table of the tool is); ops not found are left out."""
        if frame.height == 0:
            return np.zeros(0, dtype=np.int64)
        keyed = frame.select(*(pl.col(k).cast(pl.Int64).fill_null(-1) for k in _KEYS)).join(
            self._key_table, on=_KEYS, how="inner"
        )
        return np.unique(keyed["row"].to_numpy())

    @cached_property
    def _key_table(self) -> pl.DataFrame:
        ops = self.deps.ops
        return pl.DataFrame(
            {
                "pid": ops.pid.astype(np.int64),
                "device": ops.device.astype(np.int64),
                "stream": ops.stream.astype(np.int64),
                "correlation_id": ops.corr.astype(np.int64),
                "start": ops.start,
                "row": np.arange(len(ops), dtype=np.int64),
            }
        )

    # --- the bound ------------------------------------------------------------------------------------
    @cached_property
    def copy_free_savings(self) -> dict[str, Saving]:
        """Per device, the copy-free replay's saving (that device's copies removed)."""
        return {d: self.saving(self.copy_free(d)) for d in self.devices}

    def copy_free_doc(self) -> dict[str, Any]:
        """Per device: its window, the copy-free replay's span and saving, and per step (median)."""
        out: dict[str, Any] = {}
        base = self.base
        for d in self.devices:
            s = self.copy_free_savings[d]
            span = int(self.recorded_end[d] - self.w0[d])
            out[d] = {
                "window_ns": span,
                "replayed_span_ns": int(base.ends[d] - self.w0[d]),
                "copy_free_span_ns": int(base.ends[d] - s.window_ns[d] - self.w0[d]),
                "saving_ns": s.window_ns[d],
                "steps": s.steps if s.step_ns[d] is not None else 0,
                "step_saving_ns": s.step_ns[d],
            }
        return {"host_sync_modeled": self.base.host_sync_modeled, "devices": out}
