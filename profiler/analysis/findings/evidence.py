"""What the findings read: the numbers the tool already computes, each computed once, on demand.

A rule asks the ``Evidence`` for what it needs; when the trace or the run
cannot provide it (no runtime table, no manifest, no steps, no waits), the
accessor raises ``CannotDecide`` with the reason, and the rule is listed as
skipped instead of guessing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import polars as pl

from profiler.analysis.breakdown import Breakdown
from profiler.analysis.findings.config import FindingsConfig
from profiler.analysis.intervals import Intervals, difference, union
from profiler.analysis.kernels_slowed import add_kernels_beside
from profiler.analysis.links import Link
from profiler.analysis.offload_expected import recorded_backend
from profiler.analysis.overlap import device_metrics
from profiler.analysis.policies import step_compiled
from profiler.analysis.savings import CAPTURE as CAPTURE_WINDOW
from profiler.analysis.savings import DEVICE, STEPS, WINDOWS, Replays, Window
from profiler.analysis.stalls import Stalls, add_stalls
from profiler.trace.loader import RUNTIME_TABLE, Trace
from profiler.units import count

CAPTURE = "the capture's GPU time"  # from the first GPU op of the capture to the last, over all GPUs


class CannotDecide(Exception):
    """A rule's input is missing: the rule says nothing, and the output says why."""


@dataclass
class Evidence:
    """One run: its trace, its manifest, and the analysis shared by every rule."""

    trace: Trace
    manifest: dict[str, Any] | None
    breakdown: Breakdown
    config: FindingsConfig = field(default_factory=FindingsConfig)
    _devices: dict[str, Any] | None = None
    link: Link | None = None  # the host link the command was given (--link), else each GPU's own (links.run_link)

    # --- the run ---------------------------------------------------------------------------
    @cached_property
    def devices(self) -> dict[str, Any]:
        """The METRICS.md devices object, with stalls."""
        if self._devices is not None:
            return self._devices
        bd = self.breakdown
        doc = device_metrics(
            bd.kernels, self.trace.copies, self.trace.memsets, kernel_sets=bd.kernel_sets, contexts=bd.copy_contexts
        )
        add_stalls(doc, bd.stalls, self.trace.waits_recorded)
        add_kernels_beside(doc, self.trace.kernels, self.trace.copies, bd.kernel_groups)
        return doc

    @cached_property
    def policy(self) -> str | None:
        """The policy of the run: the manifest's (profile-step's --policy), else the script's policy= range."""
        return (self.manifest or {}).get("policy") or self.breakdown.policy

    @cached_property
    def compiled_step(self) -> dict[str, Any] | None:
        """The step program's compiled module (``policies.step_compiled``: the program whose executions
        are the steps, by the one rule), None without a compiled.json beside the trace."""
        compiled = self.breakdown.compiled
        return step_compiled(compiled, self.breakdown.module_steps.step) if compiled else None

    @cached_property
    def backend(self) -> str | None:
        """The backend the run recorded (``offload_expected.recorded_backend``)."""
        return recorded_backend(self.manifest, bool(self.devices))

    @cached_property
    def on_tpu(self) -> bool:
        """Whether the devices were TPUs (a converted TPU trace, or a run on backend ``tpu``): XLA:GPU's
        flags do not apply to them."""
        from profiler.trace.jax_profile import DEVICE_KIND_KEY

        return self.trace.meta.get(DEVICE_KIND_KEY) == "TPU" or self.backend == "tpu"

    @property
    def device_word(self) -> str:
        """What the findings call a device: ``TPU`` on a TPU, else ``GPU``."""
        return "TPU" if self.on_tpu else "GPU"

    @cached_property
    def is_xla(self) -> bool:
        """Whether the run is a JAX/XLA program: a manifest naming a JAX version, or XLA's NVTX ranges."""
        if ((self.manifest or {}).get("versions") or {}).get("jax"):
            return True
        r = self.breakdown.ranges.ranges
        return bool(r.height) and bool(r["xla_kind"].is_in(["module", "thunk"]).any())

    def need_manifest(self) -> dict[str, Any]:
        if not self.manifest:
            raise CannotDecide("no manifest.json beside the trace (a run folder made by profile-step has one)")
        return self.manifest

    @cached_property
    def xla_flags(self) -> dict[str, str | None]:
        """The final XLA_FLAGS of the run, parsed (``CannotDecide`` without a manifest)."""
        return parse_flags((self.need_manifest().get("xla_flags") or {}).get("final") or "")

    @cached_property
    def gpu_names(self) -> dict[str, str]:
        return {str(d): str(n) for d, n in self.trace.devices.select("id", "name").iter_rows() if n is not None}

    @cached_property
    def sm_counts(self) -> dict[str, int]:
        """Each GPU's SMs: the export's ``smCount``, else the built-in target of its name; GPUs of
        neither are left out."""
        from profiler.xla.targets import sm_count

        out = {}
        for d, name, sms in self.trace.devices.select("id", "name", "sm_count").iter_rows():
            n = sms or sm_count(name)
            if n:
                out[str(d)] = int(n)
        return out

    # --- the window of a finding's time (keyword arguments of a Finding) --------------------------
    def basis_device(self, dev: str | int) -> dict[str, Any]:
        """Time on one GPU: a share of its window (``span_ns``); its saving on that window."""
        d = self.devices.get(str(dev))
        return {
            "attributed_basis_ns": int(d["span_ns"]) if d else 0,
            "attributed_basis": f"{self.device_word} {dev}'s window",
            "window": Window(DEVICE, str(dev)),
        }

    def basis_windows(self) -> dict[str, Any]:
        """Time summed over the GPUs: a share of their windows, summed; the savings summed too."""
        n = len(self.devices)
        if n == 1:
            return self.basis_device(next(iter(self.devices)))
        return {
            "attributed_basis_ns": int(sum(d["span_ns"] for d in self.devices.values())),
            "attributed_basis": f"the summed windows of {n} {self.device_word}s",
            "window": Window(WINDOWS),
        }

    def basis_capture(self) -> dict[str, Any]:
        """Wall-clock time (the host's): a share of the time from the first GPU op of the capture to
        the last, over all GPUs; the saving on that time."""
        if not self.devices:
            return {"attributed_basis_ns": 0, "attributed_basis": CAPTURE, "window": Window(CAPTURE_WINDOW)}
        w0 = min(d["window_ns"][0] for d in self.devices.values())
        w1 = max(d["window_ns"][1] for d in self.devices.values())
        return {"attributed_basis_ns": int(w1 - w0), "attributed_basis": CAPTURE, "window": Window(CAPTURE_WINDOW)}

    def basis_steps(self, steps: list[dict[str, Any]]) -> dict[str, Any]:
        """Time inside steps: a share of their durations, summed; the saving per step (median)."""
        return {
            "attributed_basis_ns": int(sum(s["duration_ns"] for s in steps)),
            "attributed_basis": f"the {count(len(steps), 'step')}",
            "window": Window(STEPS),
        }

    # --- the replay ----------------------------------------------------------------------------
    @cached_property
    def replays(self) -> Replays:
        """The run's replays (one dependency pass, host synchronization modeled), for the savings."""
        return Replays(self.trace, self.breakdown)

    def exposed(self, copies: pl.DataFrame) -> Intervals:
        """Per device, when the given copies ran and no kernel did (METRICS.md's exposed time, as
        intervals: their length per device is ``exposed_ns`` of those copies)."""
        u = union(copies["device"].to_numpy(), copies["start"].to_numpy(), copies["end"].to_numpy())
        return difference(u, self.breakdown.kernel_sets.any)

    @cached_property
    def exposed_offload(self) -> Intervals:
        """``exposed`` of the valid h2d and d2h copies."""
        return self.exposed(self.offload_copies)

    @cached_property
    def pageable_copies(self) -> pl.DataFrame:
        """The valid h2d and d2h copies whose host side is pageable memory."""
        return self.offload_copies.filter(pl.col("host_kind") == "pageable")

    @cached_property
    def exposed_pageable(self) -> Intervals:
        """``exposed`` of the pageable h2d and d2h copies."""
        return self.exposed(self.pageable_copies)

    # --- steps and layers ---------------------------------------------------------------------
    @cached_property
    def steps(self) -> dict[str, Any]:
        return self.breakdown.by_step()

    def need_steps(self) -> list[dict[str, Any]]:
        steps = self.steps["steps"]
        if not steps:
            raise CannotDecide("no steps found (profile-step's step=N ranges, XLA's modules, or --step-range)")
        return steps

    @cached_property
    def included_steps(self) -> list[dict[str, Any]]:
        return [s for s in self.need_steps() if not s["excluded"]]

    @cached_property
    def layers(self) -> list[dict[str, Any]]:
        """The rows of ``by_layer`` with what the rules read of them: name, device and the offload
        class's exposure and stalls (``overlap.exposure_metrics``), not every copy-class number."""
        return self.breakdown.by_layer(top_kernels=False, narrow=True)

    @cached_property
    def xla_ops(self) -> list[dict[str, Any]]:
        """The rows of ``by_op`` that are XLA instructions (thunks' ``hlo_op``), without their top
        kernels: only the ops assigned to one are measured, none when no range names one."""
        bd = self.breakdown
        hlo = bd.ranges.ranges["hlo_op"].drop_nulls().unique()
        if hlo.len() == 0:
            return []
        assigned = bd.op_assignment().filter(pl.col("group").is_in(hlo.implode()))
        return bd.measure(assigned, distinct=True, top_kernels=False)

    @property
    def has_ranged_ops(self) -> bool:
        """Whether any GPU op is in an NVTX range (``by_op`` has rows)."""
        return self.breakdown.pairs.height > 0

    # --- stalls --------------------------------------------------------------------------------
    def need_stalls(self) -> Stalls:
        st = self.breakdown.stalls
        if st is None or sum(d["stalls"]["waits"]["total"] for d in self.devices.values()) == 0:
            raise CannotDecide("no stream waits in this trace: stalls cannot be measured")
        return st

    # --- host side ------------------------------------------------------------------------------
    def need_runtime(self, pattern: str | None = None, without: str | None = None) -> pl.DataFrame:
        """The CUDA API calls (those whose name matches the regex *pattern*, when given, and does not
        contain the text *without*)."""
        if not self.trace.has(RUNTIME_TABLE):
            raise CannotDecide("no CUDA API rows in the export (profile with nsys --trace=cuda)")
        return self.trace.runtime_calls_named(pattern, without)

    # --- GPU ops ------------------------------------------------------------------------------
    @cached_property
    def kernels(self) -> pl.DataFrame:
        """Valid kernels with names: device, stream, start, end, name, is_nccl."""
        k = self.trace.kernels
        return k.filter(pl.col("end") >= pl.col("start")).select("device", "stream", "start", "end", "name", "is_nccl")

    @cached_property
    def kernel_columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """device, start, end of ``kernels`` as NumPy arrays (device -1 where unknown)."""
        k = self.kernels
        return k["device"].fill_null(-1).to_numpy(), k["start"].to_numpy(), k["end"].to_numpy()

    @cached_property
    def kernel_bounds(self) -> dict[int, tuple[int, int]]:
        """Per device: the first start and the last end of its valid kernels."""
        agg = self.kernels.group_by("device").agg(pl.col("start").min(), pl.col("end").max())
        return {int(d): (int(s), int(e)) for d, s, e in agg.iter_rows() if d is not None}

    @cached_property
    def kernel_groups(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Every group of METRICS.md "Kernels slowed by copies" that counts, and the calls per side."""
        return self.breakdown.kernel_groups

    @cached_property
    def offload_positions(self) -> np.ndarray:
        """The rows of the trace's copies that ``offload_copies`` holds, in its order."""
        c = self.trace.copies
        ok = c.select(((pl.col("end") >= pl.col("start")) & pl.col("cls").is_in(["h2d", "d2h"])).fill_null(False))
        return np.flatnonzero(ok.to_series().to_numpy())

    @cached_property
    def offload_copies(self) -> pl.DataFrame:
        """Valid h2d and d2h copies."""
        return self.trace.copies[self.offload_positions]


LHS = "--xla_gpu_enable_latency_hiding_scheduler"
PIPELINED = "--xla_gpu_enable_pipelined_host_offloading"


def parse_flags(text: str) -> dict[str, str | None]:
    """``XLA_FLAGS`` text as {name: value}, None for a flag given without ``=``."""
    out: dict[str, str | None] = {}
    for tok in text.split():
        name, sep, value = tok.partition("=")
        out[name] = value if sep else None
    return out


def flag_value(flags: dict[str, str | None], name: str) -> bool | None:
    """True/False for a boolean XLA flag set in *flags*, None when it is not set."""
    if name not in flags:
        return None
    value = (flags[name] or "true").strip().lower()
    return value in ("true", "1", "yes")


def version_tuple(text: str | None) -> tuple[int, ...] | None:
    """``0.4.26`` -> (0, 4, 26); None for what does not start with a version."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return tuple(int(g) for g in m.groups() if g is not None) if m else None


def per_device(values: dict[str, Any], key: str) -> dict[str, Any]:
    """``{device: values[device][key]}``."""
    return {d: v[key] for d, v in values.items()}


def median(values: np.ndarray) -> float:
    return float(np.median(values)) if values.size else float("nan")
