"""Savings: what fixing a finding gives back, by the what-if replay (METRICS.md "Savings").

``saving = replayed span with nothing changed - replayed span with the change``, on a window:
one device's window, the windows of every device summed, the capture's GPU time (first GPU op
to last, over all devices), or per step: the median over the included steps of each step's
saving, each step predicted as ``whatif`` predicts it (``whatif.step_rows``), on the device
where that median is largest.  Host synchronization is modeled as ``whatif`` models it by
default.

One ``Replays`` per run holds what every replay shares: the dependencies (the stalls' pass),
the blocking calls, the steps and the replay with nothing changed.  The copy-free replay
removes every h2d/d2h copy, on every device: no saving of a change that only removes or
shortens copies or drops waits on copies exceeds it on the same window, whichever GPUs' copies
the change touches (the replay never makes anything later when ops get shorter or lose inputs).

A change is replayed by waves (``replay_waves.Waves``) where the trace allows it, else by the
scalar replay (``replay.replay``); both give the same timeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from profiler.analysis.dependencies import D2H, H2D, NO_TIME, Dependencies, dependencies, index_dtype
from profiler.analysis.hostsync import HostSyncs, host_syncs
from profiler.analysis.replay import NO_CHANGE, Change, Recorded, Replay, replay
from profiler.analysis.replay_waves import Waves
from profiler.analysis.whatif import OP_KEYS, keyed_step_ops, step_frames, step_rows
from profiler.trace.loader import Trace

if TYPE_CHECKING:
    from profiler.analysis.breakdown import Breakdown

DEVICE, WINDOWS, CAPTURE, STEPS = "device", "windows", "capture", "steps"
WAVE_MIN_OPS = 50_000  # below this many ops the scalar replay is as fast


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
    paced: dict[str, int] | None = None  # ``Replays.host_paced`` of the device asked for, when found

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
        self._recorded: Recorded | None = None
        ops = self.deps.ops
        order = np.argsort(ops.device, kind="stable")
        dev = ops.device[order]
        cut = np.flatnonzero(np.r_[True, dev[1:] != dev[:-1]]) if dev.size else np.zeros(0, dtype=np.int64)
        self._order, self._cut = order, cut
        self.devices = [str(int(d)) for d in dev[cut]]
        self.w0 = dict(zip(self.devices, np.minimum.reduceat(ops.start[order], cut).tolist(), strict=True))
        self.recorded_end = dict(zip(self.devices, np.maximum.reduceat(ops.end[order], cut).tolist(), strict=True))
        self._frames: dict[int, tuple] = {}

    # --- the run's steps ------------------------------------------------------------------------
    @cached_property
    def _steps(self) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame] | None:
        frames = step_frames(self.breakdown)
        if frames is None:
            return None
        steps, step_ops = frames
        keyed = self._keyed_by_position(step_ops)
        if keyed is None:
            keyed = keyed_step_ops(self.deps.ops, step_ops.select("index", *OP_KEYS))
        # what ``step_rows`` reads of them (the other keys, and the step ops themselves, not kept)
        return steps, step_ops.clear(), keyed.select("index", "device", "start", "row")

    def _keyed_by_position(self, step_ops: pl.DataFrame) -> pl.DataFrame | None:
        """``keyed_step_ops`` of *step_ops* without its join: each op's row of ``deps.ops`` from its
        row of the breakdown's ops (the same ops, in input order), checked against the keys.  None
        where that cannot be shown to be the join's answer: keys that differ, or two ops sharing
        their keys (the join pairs a step's op with each of them)."""
        inv = self._of_input
        if inv is None or step_ops.height == 0 or "op_id" not in step_ops.columns:
            return None
        op_id = step_ops["op_id"].to_numpy().astype(np.int64)
        if int(op_id.min()) < 0 or int(op_id.max()) >= inv.size:
            return None
        ops = self.deps.ops
        rows = inv[op_id]
        keyed = step_ops.select("index", *(pl.col(k).cast(pl.Int64).fill_null(-1) for k in OP_KEYS)).with_columns(
            pl.Series("row", rows, pl.Int64)
        )
        mine = dict(zip(OP_KEYS, (ops.pid, ops.device, ops.stream, ops.corr, ops.start), strict=True))
        if not all(np.array_equal(keyed[k].to_numpy(), mine[k][rows].astype(np.int64)) for k in OP_KEYS):
            return None
        # keys unique: in (device, stream, start) order two ops with the same keys would be neighbours
        d, s, t = ops.device, ops.stream, ops.start
        step = (d[1:] > d[:-1]) | ((d[1:] == d[:-1]) & ((s[1:] > s[:-1]) | ((s[1:] == s[:-1]) & (t[1:] > t[:-1]))))
        return keyed if bool(step.all()) else None

    @cached_property
    def included(self) -> set[int]:
        s = self._steps
        if s is None:
            return set()
        return set(s[0].filter(pl.col("excluded").is_null())["index"].to_list())

    def prepare(self) -> Replays:
        """Make now what every replay shares (the recorded graph, the replay with nothing changed,
        the steps, the dependency pass's lazy parts), so that replays can then run side by side in
        threads without making any of it twice."""
        _ = self.deps.ops.prev, self.deps.blockers_of, self.recorded, self.included, self._last
        if len(self.deps.ops) >= self.wave_min_ops:
            _ = self._graph
        _ = self.base
        return self

    # --- replays ----------------------------------------------------------------------------------
    def replay(self, change: Change = NO_CHANGE) -> Replay:
        """The replay with *change*: by waves where the trace allows it (see the module), else scalar."""
        if len(self.deps.ops) >= self.wave_min_ops and self._graph is not None:
            got = self._graph.replay(change)
            if got is not None:
                return got
        return replay(self.deps, 1.0, self.host, change, self.recorded)

    wave_min_ops = WAVE_MIN_OPS

    @property
    def recorded(self) -> Recorded:
        """The recorded graph every replay of this run shares."""
        if self._recorded is None:
            self._recorded = Recorded.of(self.deps, self.host if self.host is not None and len(self.host) else None)
        return self._recorded

    @cached_property
    def _graph(self) -> Waves | None:
        return Waves.of(self.deps, self.host, self.recorded)

    def outcome(self, change: Change = NO_CHANGE) -> Outcome:
        rp = self.replay(change)
        return self.outcome_of(rp)

    def outcome_of(self, rp: Replay) -> Outcome:
        ends = self._ends_of(rp)
        per_step = None
        if self._steps is not None:
            steps, step_ops, keyed = self._steps
            rows = step_rows(rp, steps, step_ops, keyed)
            index = dict(zip(steps["name"].to_list(), steps["index"].to_list(), strict=True))
            per_step = {
                str(dev): {int(index[r["name"]]): int(r["predicted_ns"]) for r in rs} for dev, rs in rows.items()
            }
        return Outcome(dict(zip(self.devices, ends, strict=True)), per_step, rp.host_sync_modeled)

    def _ends_of(self, rp: Replay) -> list[int]:
        """Per device, the last replayed end: the recorded one where an op that ended last is untouched
        by the replay (a replay only moves ends earlier), else over the device's ops."""
        if not self._cut.size:
            return []
        if rp.touched is None:
            return np.maximum.reduceat(rp.end[self._order], self._cut).tolist()
        hit = np.zeros(len(self.deps.ops), dtype=bool)
        hit[rp.touched] = True
        out = []
        bounds = np.r_[self._cut, self._order.size]
        for i, d in enumerate(self.devices):
            last = self._last[d]
            if not hit[last].all():
                out.append(self.recorded_end[d])
            else:
                rows = self._order[bounds[i] : bounds[i + 1]]
                out.append(int(rp.end[rows].max()))
        return out

    @cached_property
    def _last(self) -> dict[str, np.ndarray]:
        """Per device, the ops that end last in the recorded timeline."""
        ops = self.deps.ops
        on = {d: np.flatnonzero(ops.device == int(d)) for d in self.devices}
        return {d: rows[ops.end[rows] == self.recorded_end[d]] for d, rows in on.items()}

    @cached_property
    def base(self) -> Outcome:
        """The replay with nothing changed (the recorded timeline, unless clock skew made a cycle)."""
        return self.outcome(NO_CHANGE)

    def saving(self, change: Change, paced: tuple[str, int] | None = None) -> Saving:
        """What *change* gives back, per device and per step.  *paced* (device, limit): when the saving
        on that device's window is under *limit*, also whether its host paces it (``host_paced``)."""
        rp = self.replay(change)
        s = self.saving_of(change.what, self.outcome_of(rp))
        if paced is not None and s.window_ns.get(paced[0], 0) < paced[1]:
            s = replace(s, paced=self._paced(rp, change, paced[0]))
        return s

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

    def copy_free(self) -> Change:
        """Every h2d/d2h copy removed, on every device (zero time, and no op waits for them)."""
        return Change("every h2d/d2h copy removed", removed=self.copy_rows())

    def rows_of(self, frame: pl.DataFrame) -> np.ndarray:
        """The rows of ``deps.ops`` of the ops in *frame* (keyed by pid, device, stream, correlation_id,
        start, as every op table of the tool is); ops not found are left out."""
        if frame.height == 0:
            return np.zeros(0, dtype=np.int64)
        keyed = frame.select(*(pl.col(k).cast(pl.Int64).fill_null(-1) for k in OP_KEYS)).join(
            self.key_table, on=OP_KEYS, how="inner"
        )
        return np.unique(keyed["row"].to_numpy())

    def rows_of_ops(self, frame: pl.DataFrame) -> np.ndarray:
        """``rows_of`` of rows of the breakdown's ops (with their ``op_id``): by position where
        ``_keyed_by_position`` shows that to be the join's answer, else by the join."""
        keyed = self._keyed_by_position(frame.with_columns(pl.lit(0, pl.Int64).alias("index")))
        return self.rows_of(frame) if keyed is None else np.unique(keyed["row"].to_numpy())

    def op_rows(self, frame: pl.DataFrame, picked: np.ndarray, part: str) -> tuple[np.ndarray, np.ndarray]:
        """The ops of the rows *picked* (positions) of *frame*, the trace's kernels (*part*
        ``"kernel"``) or copies (``"copy"``) as the trace reads them: (which of *picked* are ops,
        their rows of ``deps.ops`` in that order).  By position among the valid rows (the order the
        dependency pass read them in), checked against the op keys; by key where they differ."""
        picked = np.asarray(picked, dtype=np.int64)
        ops = self.deps.ops
        ok, index = self._columns(frame)
        inv = self._of_input
        found = ok[picked] if picked.size else np.zeros(0, dtype=bool)
        if inv is not None:
            sel = picked[found]
            idx = index[sel].astype(np.int64) + (0 if part == "kernel" else self._valid_kernels)
            if idx.size == 0:
                return found, idx
            if int(idx.max()) < inv.size:
                rows = inv[idx]
                got = frame.select("start", "correlation_id", "device")[sel]
                same = ops.start[rows] == got["start"].to_numpy()
                same &= ops.corr[rows] == got["correlation_id"].fill_null(-1).to_numpy()
                same &= ops.device[rows] == got["device"].fill_null(-1).to_numpy()
                if same.all():
                    return found, rows
        keyed = (
            frame[picked]
            .select(*(pl.col(k).cast(pl.Int64).fill_null(-1) for k in OP_KEYS))
            .with_row_index("_pos")
            .join(self.key_table, on=list(OP_KEYS), how="inner")
            .unique("_pos", keep="first")
            .sort("_pos")
        )
        found = np.zeros(picked.size, dtype=bool)
        found[keyed["_pos"].to_numpy()] = True
        return found, keyed["row"].to_numpy()

    def _columns(self, frame: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """Of an op frame: which rows are valid, and each valid row's index among them (once per frame)."""
        key = id(frame)
        if key not in self._frames:
            ok = frame.select((pl.col("end") >= pl.col("start")).fill_null(False)).to_series().to_numpy()
            index = (np.cumsum(ok) - 1).astype(index_dtype(ok.size))
            self._frames[key] = (ok, index, frame)  # the frame held: its id stays its own
        return self._frames[key][0], self._frames[key][1]

    @cached_property
    def _of_input(self) -> np.ndarray | None:
        row = self.deps.ops.row
        if row is None:
            return None
        inv = np.empty(row.size, dtype=np.int64)
        inv[row.astype(np.int64)] = np.arange(row.size, dtype=np.int64)
        return inv

    @cached_property
    def _valid_kernels(self) -> int:
        k = self.trace.kernel_ops
        return int(k.select((pl.col("end") >= pl.col("start")).fill_null(False).sum()).item())

    @cached_property
    def key_table(self) -> pl.DataFrame:
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

    def host_paced(self, change: Change, device: str | int, most: int = 10_000) -> dict[str, int] | None:
        """``_paced`` of the replay with *change*."""
        return self._paced(self.replay(change), change, device, most)

    def _paced(self, rp: Replay, change: Change, device: str | int, most: int = 10_000) -> dict[str, int] | None:
        """In the replay with *change*, the chain of inputs that ends the window of *device*, followed
        back from its last op (each op's latest input: the op before it on its stream, an op it
        waits for, or its launch) to the first op whose latest input is its launch: how long before
        the end the host launched it, how many ops the chain holds and the blocking call its launch
        moved with (``call``: a row of ``host``, -1 for none).  None when the chain does not
        reach a launch within *most* ops (GPU work, not the host, paces the window)."""
        ops = self.deps.ops
        on = np.flatnonzero(ops.device == int(device))
        if on.size == 0:
            return None
        launch = rp.launch if rp.launch is not None else ops.launch
        tgt, blk = self.deps.blockers_of
        keep = change.edges_kept(tgt, blk, len(ops))
        end_of_window = int(rp.end[on].max())
        op = int(on[np.argmax(rp.end[on])])
        for n in range(1, most + 1):
            p = int(ops.prev[op])
            best, via = (int(rp.end[p]), p) if p >= 0 else (NO_TIME, -1)
            a, b = np.searchsorted(tgt, op), np.searchsorted(tgt, op, "right")
            for e in range(a, b):
                if keep[e] and rp.end[blk[e]] > best:
                    best, via = int(rp.end[blk[e]]), int(blk[e])
            if launch[op] != NO_TIME and launch[op] >= best:
                # the blocking call of the launching thread the launch moved with (-1: none)
                return {
                    "before_end_ns": end_of_window - int(launch[op]),
                    "ops": n,
                    "call": int(self.recorded.epoch[op]),
                }
            if via < 0:
                return None
            op = via
        return None

    # --- the bound ------------------------------------------------------------------------------------
    @cached_property
    def copy_free_saving(self) -> Saving:
        """The copy-free replay's saving per device (every copy removed: none, and nothing replayed,
        without copies)."""
        change = self.copy_free()
        return self.saving(change) if change.removed.size else self.saving_of(change.what, self.base)

    def copy_free_doc(self) -> dict[str, Any]:
        """Per device: its window, the copy-free replay's span and saving, and per step (median)."""
        out: dict[str, Any] = {}
        base = self.base
        s = self.copy_free_saving
        for d in self.devices:
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
