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
from profiler.analysis.kernels_slowed import add_kernels_beside, kernel_groups
from profiler.analysis.overlap import device_metrics
from profiler.analysis.stalls import Stalls, add_stalls
from profiler.trace.loader import RUNTIME_TABLE, Trace


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

    # --- the run ---------------------------------------------------------------------------
    @cached_property
    def devices(self) -> dict[str, Any]:
        """The METRICS.md devices object, with stalls."""
        if self._devices is not None:
            return self._devices
        bd = self.breakdown
        doc = device_metrics(bd.kernels, self.trace.copies, self.trace.memsets, kernel_sets=bd.kernel_sets)
        add_stalls(doc, bd.stalls)
        add_kernels_beside(doc, self.trace.kernels, self.trace.copies)
        return doc

    @cached_property
    def policy(self) -> str | None:
        """The policy of the run: the manifest's (profile-step's --policy), else the script's policy= range."""
        return (self.manifest or {}).get("policy") or self.breakdown.policy

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
        flags = (self.need_manifest().get("xla_flags") or {}).get("final") or ""
        out: dict[str, str | None] = {}
        for tok in flags.split():
            name, sep, value = tok.partition("=")
            out[name] = value if sep else None
        return out

    @cached_property
    def gpu_names(self) -> dict[str, str]:
        return {str(d): str(n) for d, n in self.trace.devices.select("id", "name").iter_rows() if n is not None}

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
        return self.breakdown.by_layer(top_kernels=False)

    @cached_property
    def ops(self) -> list[dict[str, Any]]:
        return self.breakdown.by_op()

    # --- stalls --------------------------------------------------------------------------------
    def need_stalls(self) -> Stalls:
        st = self.breakdown.stalls
        if st is None or sum(d["stalls"]["waits"]["total"] for d in self.devices.values()) == 0:
            raise CannotDecide("no stream waits in this trace: stalls cannot be measured")
        return st

    # --- host side ------------------------------------------------------------------------------
    def need_runtime(self, pattern: str | None = None) -> pl.DataFrame:
        """The CUDA API calls (those whose name matches the regex *pattern*, when given)."""
        if not self.trace.has(RUNTIME_TABLE):
            raise CannotDecide("no CUDA API rows in the export (profile with nsys --trace=cuda)")
        return self.trace.runtime_calls_named(pattern)

    # --- GPU ops ------------------------------------------------------------------------------
    @cached_property
    def kernels(self) -> pl.DataFrame:
        """Valid kernels with names: device, stream, start, end, name, is_nccl."""
        k = self.trace.kernels
        return k.filter(pl.col("end") >= pl.col("start")).select("device", "stream", "start", "end", "name", "is_nccl")

    @cached_property
    def kernel_groups(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Every group of METRICS.md "Kernels slowed by copies" that counts, and the calls per side."""
        return kernel_groups(self.trace.kernels, self.trace.copies)

    @cached_property
    def offload_copies(self) -> pl.DataFrame:
        """Valid h2d and d2h copies."""
        c = self.trace.copies
        return c.filter((pl.col("end") >= pl.col("start")) & pl.col("cls").is_in(["h2d", "d2h"]))


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
