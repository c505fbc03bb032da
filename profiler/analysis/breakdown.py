"""Copy metrics per NVTX range name, per step, per layer and per XLA operation.

Every view assigns copies to named groups through the attribution of
``attribution.py`` and then measures each group with the one definition of
the copy-class numbers (``overlap.offload_metrics``), against all kernels of
the device.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from profiler.analysis import attribution
from profiler.analysis.contexts import copy_contexts
from profiler.analysis.dependencies import D2H, H2D
from profiler.analysis.intervals import measure_within, union
from profiler.analysis.kernels_slowed import kernel_groups, kernel_sides
from profiler.analysis.offload_plan import label
from profiler.analysis.overlap import KernelSets, offload_exposure, offload_metrics, valid, windows_and_invalid
from profiler.analysis.stalls import Stalls, has_waits, trace_stalls
from profiler.analysis.xla_steps import ModuleSteps, module_steps
from profiler.conventions import DOMAIN, LAYER_PREFIX, POLICY_PREFIX, STEP_PREFIX, WARMUP_PREFIX
from profiler.stored.folder import compiled_of
from profiler.trace.loader import Trace
from profiler.units import natural_key
from profiler.xla.names import DEFAULT_LAYER_PATTERN, parse_xla
from profiler.xla.step_program import module_flops

OUTLIER_FACTOR = 2.0  # a step slower than this times the median is left out of summaries
TOP_KERNELS = 3
COPY_KINDS = (H2D, D2H)  # the stalls' op kinds of h2d and d2h copies (``Stalls.caused_by_copies``)
MEASURED_COLUMNS = ("op_id", "device", "start", "end", "cls", "bytes", "host_kind")


_ATOMS = (str, int, float, bool, type(None))


def tree_copy(doc: Any) -> Any:
    """A copy of a JSON-like document (dicts, lists, tuples of them, scalars): what ``copy.deepcopy``
    gives (other values deep-copied), several times faster; shared sub-trees come out as copies of
    their own."""
    if type(doc) is dict:
        return {k: tree_copy(v) for k, v in doc.items()}
    if type(doc) is list:
        return [tree_copy(v) for v in doc]
    if type(doc) is tuple:
        return tuple(tree_copy(v) for v in doc)
    return doc if isinstance(doc, _ATOMS) else copy.deepcopy(doc)


@dataclass
class Breakdown:
    """Attribution of one trace, computed once and shared by every view."""

    trace: Trace
    layer_pattern: str | None = DEFAULT_LAYER_PATTERN  # None: layer names by convention (xla/names.py)
    step_range: str | None = None  # a regex for user step ranges; default: step=N, else XLA's modules
    # The GPU ops attributed to ranges.  Copies alone give the same per-layer and per-step
    # copy numbers (kernels enter only as the device's kernel unions) for a fraction of the work;
    # the views then list a group only on devices where it has copies.
    kinds: tuple[str, ...] = attribution.OP_KINDS

    @cached_property
    def ops(self) -> pl.DataFrame:
        # with every kind attributed, the stalls' ops are the same ops: their launches are reused
        stalls = self.stalls if self.kinds == attribution.OP_KINDS else None
        return attribution.gpu_ops(self.trace, self.kinds, launched=stalls.deps.ops if stalls else None)

    @cached_property
    def kernels(self) -> pl.DataFrame:
        """The trace's kernels: with names and launches when they are attributed, else just spans."""
        if "kernel" in self.kinds:
            return self.trace.kernels
        # the stalls read every kernel's stream and launch: read them once, spans included
        return self.trace.kernel_ops if has_waits(self.trace) else self.trace.kernel_spans

    @cached_property
    def kernel_sets(self) -> KernelSets:
        # the four columns it reads: a filter of the whole frame would copy names and shapes too
        return KernelSets.of(valid(self.kernels.select("device", "start", "end", "is_nccl")))

    @cached_property
    def copy_contexts(self) -> np.ndarray:
        """``contexts.copy_contexts`` of every valid copy (``valid(trace.copies)``, in its order)."""
        return copy_contexts(valid(self.trace.copies), self.kernel_sets.any)

    @cached_property
    def kernel_groups(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """``kernels_slowed.kernel_groups`` of the trace's named kernels and its copies, computed once
        for the ``kernels_beside_copies`` metric and the findings that read it."""
        return kernel_groups(self.trace.kernels, self.trace.copies, self.kernel_sides)

    @cached_property
    def kernel_sides(self) -> np.ndarray:
        """``kernels_slowed.kernel_sides`` of the trace's named kernels (alone, beside copies, neither)."""
        return kernel_sides(self.trace.kernels, self.trace.copies)

    @cached_property
    def stalls(self) -> Stalls | None:
        """Stalls through CUDA events (METRICS.md), or None when the export holds no waits."""
        return trace_stalls(self.trace) if has_waits(self.trace) else None

    @cached_property
    def stall_caused(self) -> np.ndarray:
        """Per row of ``ops``: the stall time that op caused as a blocker (copies only)."""
        out = np.zeros(self.ops.height, dtype=np.int64)
        if self.stalls is None or self.ops.height == 0:
            return out
        by_position = self._stall_caused_by_position()
        if by_position is not None:
            op_id, ns = by_position
            out[op_id] = ns
            return out
        caused = self.stalls.caused_by_copies()
        if caused.height == 0:
            return out
        keys = ["pid", "device", "stream", "correlation_id", "start"]
        hit = self.ops.select("op_id", *keys).join(caused, on=keys, how="inner")
        out[hit["op_id"].to_numpy()] = hit["stall_caused_ns"].to_numpy()
        return out

    def _stall_caused_by_position(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(op_id, stall caused) of the copies that caused stalls, without ``stall_caused``'s join:
        when ``ops`` are the stalls' ops in input order (every kind attributed), each op's row is
        its input row, checked against the five keys; None where that cannot be shown to be the
        join's answer (other ops, keys that differ or are missing, two ops sharing their keys)."""
        deps = self.stalls.deps.ops if self.stalls is not None else None
        keys = ["pid", "device", "stream", "correlation_id", "start"]
        if deps is None or self.kinds != attribution.OP_KINDS or not attribution._same_ops(self.ops, deps):
            return None
        if any(self.ops[k].null_count() for k in keys):
            return None
        # keys unique: in (device, stream, start) order two ops with the same keys would be neighbours
        d, st, t = deps.device, deps.stream, deps.start
        later = (d[1:] > d[:-1]) | ((d[1:] == d[:-1]) & ((st[1:] > st[:-1]) | ((st[1:] == st[:-1]) & (t[1:] > t[:-1]))))
        if not bool(later.all()):
            return None
        caused = self.stalls.caused
        rows = np.flatnonzero((caused > 0) & np.isin(deps.kind, COPY_KINDS))
        op_id = deps.row[rows]
        mine = (deps.pid, deps.device, deps.stream, deps.corr, deps.start)
        for k, theirs in zip(keys, mine, strict=True):
            if not np.array_equal(self.ops[k].gather(op_id).to_numpy(), theirs[rows]):
                return None
        return op_id, caused[rows]

    @cached_property
    def trace_end(self) -> int | None:
        """The last end of any valid GPU op (open NVTX ranges are closed there)."""
        win, _ = windows_and_invalid(self.kernels, self.trace.copies, self.trace.memsets)
        return max((w1 for _, w1 in win.values()), default=None)

    @cached_property
    def ranges(self) -> attribution.Ranges:
        rng = attribution.nvtx_ranges(self.trace.nvtx, self.trace_end)
        parsed = parse_xla(rng.ranges, "name", "domain", self.layer_pattern)
        return attribution.Ranges(parsed, rng.cross_thread, rng.open)

    @cached_property
    def pairs(self) -> pl.DataFrame:
        """(op_id, range_id) of every enclosing range, by launch thread and time."""
        if self.ranges.ranges.height == 0:  # no range to be in: the ops need not be built
            return pl.DataFrame(schema={"op_id": pl.Int64, "range_id": pl.Int64})
        return attribution.attribute(self.ops, self.ranges.ranges)

    @cached_property
    def policy(self) -> str | None:
        names = self.ranges.ranges.filter((pl.col("domain") == DOMAIN) & pl.col("name").str.starts_with(POLICY_PREFIX))[
            "name"
        ].unique(maintain_order=True)
        return names[0].removeprefix(POLICY_PREFIX) if names.len() == 1 else None

    def facts(self) -> dict[str, Any]:
        """What the attribution had to leave out or guess, for the reader."""
        r = self.ranges.ranges
        launched = self.ops["launch_start"].is_not_null().sum() if self.ops.height else 0
        return {
            "policy": self.policy,
            "ranges": r.height,
            "open_ranges": self.ranges.open,
            "cross_thread_ranges": self.ranges.cross_thread,
            "malformed_xla_ranges": int((r["xla_kind"] == "malformed").sum()) if r.height else 0,
            "gpu_ops": self.ops.height,
            "gpu_ops_without_launch": int(self.ops.height - launched),
            "gpu_ops_in_a_range": self.pairs["op_id"].n_unique() if self.pairs.height else 0,
        }

    # --- measuring groups -------------------------------------------------------------------
    def measure(
        self,
        assigned: pl.DataFrame,
        order: list[str] | None = None,
        top_kernels: bool = True,
        distinct: bool = False,
        labels: dict[int, str] | None = None,
        narrow: bool = False,
    ) -> list[dict[str, Any]]:
        """METRICS.md h2d/d2h/offload numbers per (group, device) for *assigned* (op_id, group)
        (*narrow*: only ``overlap.offload_exposure``'s, the offload class's exposure and stalls).

        Groups are listed for every device on which any of their (attributed)
        ops ran; each copy counts once per group.  ``distinct``: the caller
        knows the (op_id, group) pairs hold no duplicates.  *labels*: ``group`` holds integer
        codes, each group's name is ``labels[code]`` (the ops are grouped by code, not by name).
        """
        assigned = assigned.select("op_id", "group")
        if assigned.height == 0:  # no op in any group: nothing to list
            return []
        if not distinct:
            assigned = assigned.unique()
        # op_id is the row index of self.ops: a gather, not a join
        rows = assigned["op_id"].to_numpy()
        code = "group" if labels is None else "_code"
        group = assigned["group"].alias(code)
        # every op places its group on a device; only the h2d/d2h copies' other columns are read
        present = (
            self.ops.select("device", "start")[rows]
            .with_columns(group)
            .group_by(code, "device")
            .agg(pl.col("start").min().alias("first"))
        )
        if present.height == 0:
            return []
        if labels is not None:
            present = present.with_columns(pl.col(code).replace_strict(labels, return_dtype=pl.String).alias("group"))
        rank = {g: i for i, g in enumerate(order)} if order else None
        present = (
            present.sort("device", "first", "group")  # ties by name: the same order on every run
            if rank is None
            else present.with_columns(pl.col("group").replace_strict(rank, default=len(rank)).alias("_o")).sort(
                "device", "_o", "first", "group"
            )
        )
        present = present.with_row_index("key").with_columns(pl.col("key").cast(pl.Int64))
        sel = np.flatnonzero(self._offload[rows])
        rows = rows[sel]
        copies = self.ops.select(MEASURED_COLUMNS)[rows].with_columns(group.gather(sel))
        if self.trace.waits_recorded:  # else no stall is measured: the groups carry no stall_ns, not zeros
            copies = copies.with_columns(pl.Series("stall_caused_ns", self.stall_caused[rows], pl.Int64))
        copies = copies.join(present.select(code, "device", "key"), on=[code, "device"])
        keys = present["key"].to_list()
        measured = offload_exposure if narrow else offload_metrics
        metrics = measured(copies, self.kernel_sets, keys, key="key")
        top = self._top_kernels(copies) if top_kernels else {}
        return [
            {"name": g, "device": str(d), "copies": metrics[k], "top_kernels": top.get(k, [])}
            for k, g, d in present.select("key", "group", "device").iter_rows()
        ]

    @cached_property
    def _offload(self) -> np.ndarray:
        """Per row of ``ops``: whether it is an h2d or d2h copy."""
        return self.ops.select(pl.col("cls").is_in(["h2d", "d2h"]).fill_null(False)).to_series().to_numpy()

    def _top_kernels(self, copies: pl.DataFrame) -> dict[int, list[dict[str, Any]]]:
        """Per group key, the kernels that overlapped its copies most (by overlapped time)."""
        if copies.height == 0:
            return {}
        kernels = self.ops.filter(pl.col("kind") == "kernel")
        out: dict[int, list[dict[str, Any]]] = {}
        for (key,), grp in copies.group_by(["key"]):
            dev = grp["device"][0]
            cu = union(np.zeros(grp.height, dtype=np.int64), grp["start"].to_numpy(), grp["end"].to_numpy())
            lo, hi = int(grp["start"].min()), int(grp["end"].max())
            cand = kernels.filter((pl.col("device") == dev) & (pl.col("end") > lo) & (pl.col("start") < hi))
            if cand.height == 0:
                continue
            ov = measure_within(
                cu, np.zeros(cand.height, dtype=np.int64), cand["start"].to_numpy(), cand["end"].to_numpy()
            )
            best = (
                cand.with_columns(pl.Series("ov", ov))
                .filter(pl.col("ov") > 0)
                .group_by("name")
                .agg(pl.col("ov").sum(), pl.len().alias("kernels"))
                .sort(["ov", "name"], descending=[True, False])  # ties by name: the same on every run
                .head(TOP_KERNELS)
            )
            out[int(key)] = [{"name": n, "overlap_ns": int(o), "kernels": int(c)} for n, o, c in best.iter_rows()]
        return out

    # --- views --------------------------------------------------------------------------------
    def by_range(self) -> list[dict[str, Any]]:
        """METRICS.md ``ranges``: per range name and device, copies of any range of that name."""
        assigned = self.pairs.join(self.ranges.ranges.select("range_id", pl.col("name").alias("group")), on="range_id")
        return [{k: v for k, v in r.items() if k != "top_kernels"} for r in self.measure(assigned)]

    @cached_property
    def steps(self) -> StepSet:
        """The one definition of a step, shared by every view: ``--step-range REGEX`` ranges, else
        profile-step's ``step=N`` ranges, else the executions of the step program (``xla.step_program``)."""
        r = self.ranges.ranges

        def one_range_each(sel: pl.DataFrame, source: str) -> StepSet:
            frame = sel.sort("start").with_row_index("index")
            compiled = pl.Series(self._compiles_during(frame))
            frame = frame.with_columns(pl.when(compiled).then(pl.lit(COMPILED_IN_STEP)).alias("warmup"))
            return StepSet(frame, frame.select("range_id", "index"), source, None)

        if self.step_range:
            return one_range_each(
                r.filter(pl.col("name").str.contains(self.step_range)), f"--step-range {self.step_range}"
            )
        sel = r.filter((pl.col("domain") == DOMAIN) & pl.col("name").str.starts_with(STEP_PREFIX))
        if sel.height:
            return one_range_each(sel, f"profile-step {STEP_PREFIX}N ranges")
        xla = self.module_steps
        why = f"no {STEP_PREFIX}N ranges, no --step-range; " + (xla.note or "")
        return StepSet(xla.steps, xla.members, xla.source, xla.note if xla.source else why)

    def _compiles_during(self, steps: pl.DataFrame) -> np.ndarray:
        """Per step range: whether XLA compile work (``XlaCompile``, passes, autotuning) overlaps it."""
        comp = self.ranges.ranges.filter(pl.col("xla_kind") == "compile")
        if comp.height == 0 or steps.height == 0:
            return np.zeros(steps.height, dtype=bool)
        cu = union(np.zeros(comp.height, dtype=np.int64), comp["start"].to_numpy(), comp["end"].to_numpy())
        zeros = np.zeros(steps.height, dtype=np.int64)
        return measure_within(cu, zeros, steps["start"].to_numpy(), steps["end"].to_numpy()) > 0

    @cached_property
    def compiled(self) -> dict[str, Any] | None:
        """The run folder's ``compiled.json`` beside the trace (``profiler.capture.step_module``), if any;
        what one written by an older profile-step lacks comes from the dump (``xla.compiled.upgraded``)."""
        from profiler.xla.compiled import upgraded

        doc = compiled_of(self.trace.source_path)
        return upgraded(doc, Path(self.trace.source_path).parent) if doc else doc

    @cached_property
    def module_steps(self) -> ModuleSteps:
        """Steps from the step program's executions (``profiler.xla.step_program``: one rule, with
        the step the script handed over, if any), projected onto the GPU through all GPU ops
        (whatever ops this breakdown attributes), so that every view finds the same steps."""
        r = self.ranges.ranges
        modules = r.filter(pl.col("xla_kind") == "module")
        declared = ((self.compiled or {}).get("handed_over") or {}).get("module")
        if modules.height == 0:  # no XLA module executions: nothing to project, no ops to build
            return module_steps(r, self.pairs.clear(), pl.DataFrame())
        if set(self.kinds) == set(attribution.OP_KINDS):
            return module_steps(r, self.pairs, self.ops, declared, module_flops(self.compiled))
        ops = attribution.gpu_ops(self.trace, attribution.OP_KINDS)
        return module_steps(r, attribution.attribute(ops, modules), ops, declared, module_flops(self.compiled))

    def step_ranges(self) -> pl.DataFrame:
        """The steps, in time order: index, range_id (its range, or its first XLA execution), name,
        start, end (the step's span), warmup (why it is warm-up, else NULL)."""
        return self.steps.frame

    def step_assignment(self, steps: pl.DataFrame) -> tuple[pl.DataFrame, str]:
        """(op_id, range_id, index) of the GPU ops of each step in *steps* (rows of
        ``step_ranges()``), and how they were found: by launch thread in the step's ranges (every
        execution of an XLA step), else (no launches on the step ranges' threads) by GPU time."""
        if steps is self.steps.frame:  # every step: made once (the document, the findings, the replays)
            return self._all_steps_assigned
        return self._step_assignment(steps)

    @cached_property
    def _all_steps_assigned(self) -> tuple[pl.DataFrame, str]:
        return self._step_assignment(self.steps.frame)

    def _step_assignment(self, steps: pl.DataFrame) -> tuple[pl.DataFrame, str]:
        ids = steps.select("range_id", "index")
        members = self.steps.members.join(ids.drop("range_id"), on="index")
        assigned = _join_ranges(self.pairs, members, self.ranges.ranges.height)
        if self.ops.height == 0:
            return assigned, "nothing (no GPU ops)"
        if assigned.height == 0:
            by_time = attribution.attribute_by_time(self.ops, steps).join(ids, on="range_id")
            return by_time, "GPU time window (no launches on the step ranges' threads)"
        return assigned, "launch thread"

    @cached_property
    def _step_docs(self) -> dict[bool, dict[str, Any]]:
        return {}

    def by_step(self, copies: bool = True) -> dict[str, Any]:
        """Per step instance: duration, copy metrics; warm-up and outlier steps flagged and excluded.
        Made once per *copies* (the document, the findings and the what-if's steps all ask for it)
        and handed out as a copy of its own."""
        key = bool(copies)
        if key not in self._step_docs:
            self._step_docs[key] = self._by_step(key)
        return tree_copy(self._step_docs[key])

    def _by_step(self, copies: bool) -> dict[str, Any]:
        steps = self.step_ranges()
        source = {"source": self.steps.source, "source_note": self.steps.note}
        if steps.height == 0:
            return {
                "steps": [],
                "attribution": None,
                "excluded": [],
                "median_step_ns": None,
                "median_included_step_ns": None,
                "included_steps": 0,
                "outlier_reference_ns": None,
                **source,
            }
        ids = steps.select("range_id", "index", "name", "start", "end")
        label = {i: f"{n}#{i}" if self.step_range else n for i, n in ids.select("index", "name").iter_rows()}
        how, rows = None, {}
        if copies:
            assigned, how = self.step_assignment(steps)
            if len(set(label.values())) == len(label):  # each step its own label: grouped by index
                assigned = assigned.select("op_id", pl.col("index").alias("group"))
                m = self.steps.members
                # a range in one step, a step of one range: the (op, range) pairs are the (op, step) pairs
                one_each = how == "launch thread" and m["range_id"].n_unique() == m.height == m["index"].n_unique()
                if not one_each:
                    assigned = assigned.unique()
                measured = self.measure(assigned, top_kernels=False, distinct=True, labels=label)
            else:
                assigned = assigned.with_columns(pl.col("index").replace_strict(label).alias("group"))
                measured = self.measure(assigned, top_kernels=False)
            rows = {(r["name"], r["device"]): r for r in measured}
        durations = (steps["end"] - steps["start"]).to_numpy()
        marked = steps["warmup"].to_list()
        named_warm = steps["name"].str.starts_with(WARMUP_PREFIX).to_numpy()
        not_warm = steps["warmup"].is_null().to_numpy()
        median = float(np.median(durations[not_warm] if not_warm.any() else durations))
        slow = (durations > OUTLIER_FACTOR * median) & (median > 0) & (steps.height >= 3)
        warm = ~not_warm | named_warm
        leading = _leading_slow(durations, warm, median) & slow
        kept = durations[~(warm | slow)]
        included = int(np.median(kept)) if kept.size else None
        per_group: dict[str, dict[str, Any]] = {}
        for (g, d), r in rows.items():
            per_group.setdefault(g, {})[d] = r["copies"]
        out, excluded = [], []
        spans = steps.select("index", "start", "end").iter_rows()
        for pos, (idx, start, end) in enumerate(spans):
            dur = end - start
            times = f"{dur / included:.1f}x the median step" if included else "slow"
            reason = marked[pos] or ("warm-up" if named_warm[pos] else None)
            if reason is None and leading[pos]:
                reason = f"warm-up: first steps, {times} (compilation, first executions)"
            elif reason is None and slow[pos]:
                reason = f"outlier: {times}"
            lab = label[idx]
            out.append(
                {
                    "name": lab,
                    "index": idx,
                    "start_ns": start,
                    "end_ns": end,
                    "duration_ns": dur,
                    "excluded": reason,
                    "devices": per_group.get(lab, {}),
                }
            )
            if reason:
                excluded.append({"name": lab, "reason": reason})
        return {
            "steps": out,
            "attribution": how,
            "excluded": excluded,
            # one median step everywhere: over the included steps (warm-up and outliers left out)
            "median_step_ns": included,
            "median_included_step_ns": included,
            "included_steps": int(kept.size),
            # the yardstick for outliers: the median over all steps but warm-up that XLA or a range marks
            "outlier_reference_ns": int(median),
            **source,
        }

    @cached_property
    def layer_ranges(self) -> pl.DataFrame:
        """range_id, start, layer, inferred: ``layer=N`` ranges and XLA thunks that name a layer."""
        r = self.ranges.ranges
        annotated = r.filter((pl.col("domain") == DOMAIN) & pl.col("name").str.starts_with(LAYER_PREFIX)).select(
            "range_id",
            "start",
            pl.col("name").str.strip_prefix(LAYER_PREFIX).alias("layer"),
            pl.lit(False).alias("inferred"),
        )
        # thunks that name a layer, and those that name nothing (a scan's iteration may hold them)
        named = pl.col("layer").is_not_null() | pl.col("op_path").is_null()
        thunks = r.filter((pl.col("xla_kind") == "thunk") & named)
        planned = self.planned_layers
        if planned:  # a copy's thunk names no op path: its layer is the one the compiled plan gives it
            hit = pl.col("layer").is_null() & pl.col("hlo_base").is_in(list(planned))
            by_plan = pl.col("hlo_base").replace_strict(planned, default=None)
            thunks = thunks.with_columns(pl.when(hit).then(by_plan).otherwise("layer").alias("layer"))
        thunks = self._number_repeats(thunks)
        return pl.concat([annotated, thunks.select("range_id", "start", "layer", "inferred")])

    @cached_property
    def planned_layers(self) -> dict[str, str]:
        """instruction -> layer of the step's host movements, as the compiled plan labels them
        (``offload_plan.label``: the layer the copy's operand or user names; XLA gives a copy no
        op path of its own): how copies find their layer where their thunk names none."""
        comp = self.compiled or {}
        step = comp.get("step_module")
        plan = next(
            (m.get("plan") for m in comp.get("modules") or [] if m.get("label") == step and m.get("plan")), None
        )
        labelled = label(plan, self.layer_pattern)
        return {
            m["instruction"]: m["layer"]
            for m in (labelled or {}).get("movements", [])
            if m.get("layer") and re.search(r"\d", m["layer"])
        }

    def layer_assignment(self) -> pl.DataFrame:
        """op_id -> layer: the innermost (latest-starting) enclosing layer range wins.

        An op's ranges all lie on its launch thread, where range ids follow
        start times (``nvtx_ranges`` numbers them so): the innermost is the
        largest range id, found per op with one ``maximum.at``.  Made once.
        """
        return self._layer_assignment

    @cached_property
    def _layer_assignment(self) -> pl.DataFrame:
        lr = self.layer_ranges
        if lr.height == 0 or self.pairs.height == 0:  # no layer, or no op in a range: no op has a layer
            return lr.clear().select(pl.lit(None, pl.Int64).alias("op_id"), "layer", "inferred")
        n_ranges = self.ranges.ranges.height
        row_of = np.full(n_ranges, -1, dtype=np.int64)
        row_of[lr["range_id"].to_numpy()] = np.arange(lr.height)
        op, rid = self.pairs["op_id"].to_numpy(), self.pairs["range_id"].to_numpy()
        keep = row_of[rid] >= 0
        best = np.full(self.ops.height, -1, dtype=np.int64)
        np.maximum.at(best, op[keep], rid[keep])
        ops = np.flatnonzero(best >= 0)
        return lr[row_of[best[ops]]].select(pl.Series("op_id", ops, pl.Int64), "layer", "inferred")

    def _number_repeats(self, thunks: pl.DataFrame) -> pl.DataFrame:
        """Layers of a scan (lax.scan, flax ``nn.scan``, MaxText's scanned decoder): ``scan_layers``."""
        r = self.ranges.ranges
        # one execution of the step: the enclosing XlaModule range, else the step range
        bounds = r.filter(pl.col("xla_kind") == "module")["start"].sort().to_numpy()
        if bounds.size == 0:
            bounds = self.step_ranges()["start"].sort().to_numpy()
        return scan_layers(thunks, bounds)

    def by_layer(self, top_kernels: bool = True, narrow: bool = False) -> list[dict[str, Any]]:
        """Per layer and device; layers without GPU activity (a CPU run) are listed with zeros
        (*narrow*: each layer's offload exposure and stalls alone, as ``measure``)."""
        lr = self.layer_ranges
        inferred = dict(lr.group_by("layer").agg(pl.col("inferred").any()).iter_rows())
        order = sorted(inferred, key=natural_key)
        assigned = self.layer_assignment().rename({"layer": "group"})
        rows = self.measure(assigned, order=order, top_kernels=top_kernels, distinct=True, narrow=narrow)
        seen = {r["name"] for r in rows}
        rows += [
            {"name": name, "device": None, "copies": self.zero_metrics, "top_kernels": []}
            for name in order
            if name not in seen
        ]
        for r in rows:
            r["inferred_index"] = bool(inferred.get(r["name"], False))
            r["policy"] = self.policy
        return rows

    @cached_property
    def zero_metrics(self) -> dict[str, dict[str, Any]]:
        """The h2d/d2h/offload numbers of a group without copies."""
        empty = self.ops.clear().with_columns(pl.lit(0, pl.Int64).alias(c) for c in ("key", "stall_caused_ns"))
        return offload_metrics(empty, self.kernel_sets, [0], key="key")[0]

    def op_assignment(self) -> pl.DataFrame:
        """op_id -> group: the XLA instruction (thunk ``hlo_op``) of its innermost range, else that
        range's name."""
        r = self.ranges.ranges.with_columns(pl.coalesce("hlo_op", "name").alias("op"))
        return (
            self.pairs.join(r.select("range_id", "start", "op"), on="range_id")
            .sort("start", descending=True)
            .unique("op_id", keep="first")
            .select("op_id", pl.col("op").alias("group"))
        )

    def by_op(self, top_kernels: bool = True) -> list[dict[str, Any]]:
        """Per XLA instruction (thunk ``hlo_op``), else per innermost range name."""
        return self.measure(self.op_assignment(), distinct=True, top_kernels=top_kernels)


COMPILED_IN_STEP = "warm-up: XLA compiled during it"


def _join_ranges(pairs: pl.DataFrame, members: pl.DataFrame, n_ranges: int) -> pl.DataFrame:
    """``pairs.join(members, on="range_id")`` (the same rows and columns, in pairs' order): a lookup
    by range id (the row index of the ranges) where each range is in *members* once, else the join."""
    rid = members["range_id"]
    if members.height == 0 or rid.null_count() or rid.n_unique() != members.height:
        return pairs.join(members, on="range_id")
    m = rid.to_numpy()
    if int(m.min()) < 0 or int(m.max()) >= n_ranges:
        return pairs.join(members, on="range_id")
    row_of = np.full(n_ranges, -1, dtype=np.int64)
    row_of[m] = np.arange(members.height)
    row = row_of[pairs["range_id"].to_numpy()]
    keep = np.flatnonzero(row >= 0)
    return pairs[keep].hstack(members.drop("range_id")[row[keep]])


def _leading_slow(durations: np.ndarray, warm: np.ndarray, median: float) -> np.ndarray:
    """Per step: whether it is slow (over OUTLIER_FACTOR x *median*) and comes before the run's first
    step that is neither slow nor warm-up: the first executions, which compile (a CPU run has no
    compile ranges to show it)."""
    slow = durations > OUTLIER_FACTOR * median
    normal = np.flatnonzero(~(slow | warm))
    first = normal[0] if normal.size else durations.size
    return slow & (np.arange(durations.size) < first)


SCAN_FAMILY_FALLBACK = "scan"  # the family of a scan whose paths name no layer component


def scan_family(labels: pl.Series) -> str:
    """One name for the scanned layers of a trace: the layer-like path component most of its thunks
    carry (``decoder/layers`` counts as ``layers``; ``while/body`` names no layer), ties by name."""
    named = labels.str.split("/").list.last().filter(labels != "while/body")
    if named.len() == 0:
        return SCAN_FAMILY_FALLBACK
    counts = named.value_counts(name="n").sort(["n", named.name], descending=[True, False])
    return str(counts[named.name][0])


def scan_layers(thunks: pl.DataFrame, bounds: np.ndarray) -> pl.DataFrame:
    """*thunks* (range_id, start, global_tid, hlo_base, layer, backward) with ``layer`` numbered where
    it names a scan (no digit in it) and ``inferred`` set there.

    Under a scan the loop body's thunks repeat once per iteration, and iteration k is layer k.  The
    rule, per execution of the step (*bounds*: the executions' starts), launch thread and direction
    (forward; backward, ``transpose(`` in the path, which runs the layers in reverse):

    - every scanned thunk is one family, whatever component named it (``decoder``, ``layers``,
      ``while/body``): a step holds one stack of scanned layers, named by ``scan_family``;
    - the loop's trip count N is the most times one instruction (its name less the suffixes of
      XLA's passes, so a peeled first iteration counts) ran, a loop inside a layer (``while/body``
      twice in the path: it runs more often) left out; the loop body's first instruction is the
      earliest of those that ran N times, and each of its runs starts an iteration;
    - a scanned thunk belongs to the iteration whose start it follows; one before the first
      iteration, or after the last run of a body instruction without ``while/body`` in its path
      (``decoder/decoder_norm``), lies outside the loop (no layer);
    - a loop that ran once per execution (timed as one range: its body's thunks are not) is named
      ``<family> (every iteration)``, not ``<family>[0]``;
    - a thunk with no op path (``Thunk:#hlo_op=copy-start.4#``: a third of real thunks) takes the
      layer of the thunk with a path before it on its thread, when that one is in an iteration;
      elsewhere it has no layer.
    A step with two scanned stacks (an encoder and a decoder) shows them as one family; a loop of one
    iteration cannot be told from the code around it by repetition (that code joins its layer).
    """
    if thunks.height == 0:
        return thunks.with_columns(pl.lit(False).alias("inferred"))
    scanned = (~pl.col("layer").str.contains(r"\d")).fill_null(False)
    family = scan_family(thunks.filter(scanned)["layer"])
    step_of = np.searchsorted(bounds, thunks["start"].to_numpy(), side="right") - 1
    loop = ["_step", "global_tid", "backward"]
    # a loop inside the layer's body (``while/body`` twice in the path) runs more often: the trip
    # count is read from the outermost loop's thunks only
    depth = pl.col("op_path").str.count_matches("while/body", literal=True).fill_null(0)
    outer = pl.col("_scan") & (pl.col("_depth") <= 1)
    t = (
        thunks.with_columns(
            pl.Series("_step", step_of),
            scanned.alias("_scan"),
            pl.int_range(pl.len()).alias("_row"),
            depth.alias("_depth"),
        )
        .sort("start", "_row")
        .with_columns(pl.len().over([*loop, "_scan", "hlo_base"]).alias("_runs"), outer.alias("_outer"))
        .with_columns(pl.col("_runs").filter(pl.col("_outer")).max().over(loop).alias("_trips"))
    )
    body = pl.col("_outer") & (pl.col("_runs") == pl.col("_trips"))
    head = pl.col("hlo_base").filter(body).first().over(loop)
    t = t.with_columns((body & (pl.col("hlo_base") == head)).alias("_head"), body.alias("_body"))
    t = t.with_columns(
        (pl.col("_head").cum_sum().over(loop) - 1).alias("_k"),
        pl.col("_body").cum_sum(reverse=True).over(loop).alias("_later"),
    )
    k = pl.when(pl.col("backward")).then(pl.col("_trips") - 1 - pl.col("_k")).otherwise(pl.col("_k"))
    # after the loop body's last run: still inside when the path says so (``while/body``)
    inside = (pl.col("_k") >= 0) & ((pl.col("_later") > 0) | (pl.col("_depth") >= 1))
    # a loop timed as one range (its body's thunks not timed per iteration: command buffers, or XLA's
    # while thunk alone) runs once per execution: its one "iteration" is every layer, not layer 0
    numbered = pl.when(pl.col("_trips") > 1).then(pl.format("{}[{}]", pl.lit(family), k))
    layer = (
        pl.when(~pl.col("_scan"))
        .then(pl.col("layer"))
        .when(inside)
        .then(numbered.otherwise(pl.lit(f"{family} (every iteration)")))
        .otherwise(None)
    )
    t = t.with_columns(layer.alias("layer"), pl.col("_scan").alias("inferred"))
    t = _unnamed_in_iterations(t)
    return (
        t.filter(pl.col("layer").is_not_null())
        .sort("_row")
        .drop("_step", "_scan", "_row", "_runs", "_trips", "_head", "_body", "_k", "_later", "_depth", "_outer")
    )


def _unnamed_in_iterations(t: pl.DataFrame) -> pl.DataFrame:
    """*t* (sorted by start) with each thunk that has no op path given the layer of the thunk with a
    path before it on its thread in the same execution, when that one ran in a scan's iteration."""
    unnamed = pl.col("op_path").is_null() & pl.col("layer").is_null()
    if not t.select(unnamed.any()).item():
        return t
    in_iteration = pl.when(pl.col("_scan") & pl.col("layer").is_not_null()).then(pl.col("layer")).otherwise(pl.lit(""))
    last = pl.when(~unnamed).then(in_iteration).forward_fill().over("_step", "global_tid")
    t = t.with_columns(last.alias("_last"))
    given = unnamed & (pl.col("_last").fill_null("") != "")
    return t.with_columns(
        pl.when(given).then(pl.col("_last")).otherwise(pl.col("layer")).alias("layer"),
        (pl.col("inferred") | given).alias("inferred"),
    ).drop("_last")


@dataclass(frozen=True)
class StepSet:
    """The steps of a trace and where they came from."""

    frame: pl.DataFrame  # one row per step, in time order: index, range_id, name, start, end, warmup, ...
    members: pl.DataFrame  # range_id, index: the ranges each step's ops are launched in
    source: str | None  # None: no steps
    note: str | None  # why there are none, or what was chosen among what
