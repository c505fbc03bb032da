"""A run's stored document, typed: what ``compare``, the policy table, the ranks and the dashboard read.

``RunResult.to_json`` (``runs.result``) writes a run's document; the results database and the
dashboard's cache keep it as JSON.  ``RunSummary.from_json`` reads one back, a fresh run's
(``RunResult.summary()``) or one stored by an older version (a key it lacks reads as not
recorded), and gives its parts by name; ``to_json`` gives back the document it was read from,
byte for byte, so a stored run is stored again unchanged.  Trace-free and standard library
only, like ``folder``: analysis reads runs through it without reaching above its layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DIRECTIONS = ("h2d", "d2h", "offload")  # as ``analysis.run_metrics.DIRECTIONS``

Metrics = dict[str, Any]  # one copy class's METRICS.md numbers (busy_ns, exposed_ns, bytes, gbps, ...)


@dataclass(frozen=True)
class StepRow:
    """One step of the run: its time and its offload copies over all devices (and per direction)."""

    name: str
    duration_ns: int
    excluded: str | None  # why the step is left out of the median (warm-up, outlier), else None
    exposed_ns: int | None
    stall_ns: int | None
    busy_ns: int | None
    hidden_fraction: float | None
    # per direction (h2d, d2h) over all devices: count, busy_ns, exposed_ns; None: not recorded
    directions: dict[str, dict[str, int]] | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> StepRow:
        return cls(
            doc.get("name", ""),
            doc.get("duration_ns"),  # type: ignore[arg-type]
            doc.get("excluded"),
            doc.get("exposed_ns"),
            doc.get("stall_ns"),
            doc.get("busy_ns"),
            doc.get("hidden_fraction"),
            doc.get("directions"),
        )


@dataclass(frozen=True)
class LayerSummary:
    """One layer's copies over all devices (per direction) and per device, and the kernels that hid them."""

    inferred_index: int | bool | None  # False: a document recorded without it (compare prints it so)
    copies: dict[str, Metrics]  # h2d / d2h / offload, summed over devices
    devices: dict[str, dict[str, Metrics]] = field(default_factory=dict)
    top_kernels: list[dict[str, Any]] = field(default_factory=list)
    # per device; None: recorded before the kernels were split by device (top_kernels is then all GPUs')
    top_kernels_by_device: dict[str, list[dict[str, Any]]] | None = None

    @property
    def offload(self) -> Metrics:
        return self.copies.get("offload") or {}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> LayerSummary:
        return cls(
            doc.get("inferred_index", False),
            {d: doc[d] for d in DIRECTIONS if d in doc},
            doc.get("devices") or {},
            doc.get("top_kernels") or [],
            doc.get("top_kernels_by_device"),
        )


@dataclass(frozen=True)
class RunSummary:
    """One run's document, typed (``from_json``); a key missing from an older document reads as not recorded."""

    policy: str
    trace: str | None
    rank: int | None
    manifest: dict[str, Any] | None
    nsys_version: str | None
    gpus: tuple[str, ...]
    device_names: dict[str, str]  # by decimal device id, those the export names
    window: dict[str, Any] | None  # the part of the recording the numbers come from
    step_source: str | None
    steps: tuple[StepRow, ...]
    median_step_ns: int | None
    copies: dict[str, Metrics]  # per direction, over all devices
    devices: dict[str, dict[str, Metrics]] | None  # per device and direction; None: not recorded
    streams: dict[str, Any]
    stalls: dict[str, dict[str, Any]]  # per device: METRICS.md stalls
    stall_ns: int | None  # compute time stalled by offload copies, all devices
    kernels_beside_copies: dict[str, dict[str, Any]]  # per device
    kernel_excess_ns: int | None  # None: recorded without the metric
    peak_memory_bytes: dict[str, int | None]  # per device, from the trace's memory events
    compute: dict[str, dict[str, Any]]  # per device: compute, nccl, span_ns
    work: dict[str, Any] | None
    layers: dict[str, LayerSummary]
    compiled: dict[str, Any] | None  # the step's compiled module, its memory, cost and plan
    copy_ops: list[dict[str, Any]]
    findings: dict[str, Any] | None  # None: the run was recorded without findings
    doc: dict[str, Any] = field(compare=False, repr=False)  # the document read, given back by to_json

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> RunSummary:
        """A run document (``RunResult.to_json``, the results database, the dashboard's cache, the
        per-rank task's smaller one) read into its parts."""
        g = doc.get
        devices = g("devices")
        return cls(
            policy=g("policy") or "default",
            trace=g("trace"),
            rank=g("rank"),
            manifest=g("manifest"),
            nsys_version=g("nsys_version"),
            gpus=tuple(g("gpus") or ()),
            device_names=dict(g("device_names") or {}),
            window=g("window"),
            step_source=g("step_source"),
            steps=tuple(StepRow.from_json(s) for s in g("steps") or ()),
            median_step_ns=g("median_step_ns"),
            copies=dict(g("copies") or {}),
            devices=None if devices is None else dict(devices),
            streams=dict(g("streams") or {}),
            stalls=dict(g("stalls") or {}),
            stall_ns=g("stall_ns"),
            kernels_beside_copies=dict(g("kernels_beside_copies") or {}),
            kernel_excess_ns=g("kernel_excess_ns"),
            peak_memory_bytes=dict(g("peak_memory_bytes") or {}),
            compute=dict(g("compute") or {}),
            work=g("work"),
            layers={name: LayerSummary.from_json(v) for name, v in (g("layers") or {}).items()},
            compiled=g("compiled"),
            copy_ops=list(g("copy_ops") or ()),
            findings=g("findings"),
            doc=dict(doc),
        )

    @classmethod
    def of(cls, run: RunSummary | Mapping[str, Any]) -> RunSummary:
        """*run* as a summary: itself, or a run document read."""
        return run if isinstance(run, RunSummary) else cls.from_json(run)

    def to_json(self) -> dict[str, Any]:
        """The document this summary was read from, unchanged."""
        return self.doc

    # --- by name -------------------------------------------------------------------------------
    @property
    def included_steps(self) -> tuple[StepRow, ...]:
        """The steps counted in the median (warm-up and outliers left out)."""
        return tuple(s for s in self.steps if not s.excluded)

    @property
    def gpu_ran(self) -> bool:
        """Whether the trace holds GPU activity (a document without ``devices``: assumed so)."""
        return self.devices is None or bool(self.devices)

    @property
    def device_count(self) -> int:
        """The devices the trace's sums run over, at least 1."""
        return max(len(self.devices or {}), 1)

    def copy(self, direction: str) -> Metrics:
        """One direction's copy metrics over all devices (empty when not recorded)."""
        return self.copies.get(direction) or {}

    @property
    def offload(self) -> Metrics:
        return self.copy("offload")

    def device_copies(self, device: str | None) -> dict[str, Metrics]:
        """Per direction, one device's copies (empty for an unknown device or None)."""
        return (self.devices or {}).get(device) or {} if device is not None else {}

    def device_stalls(self, device: str | None) -> dict[str, Any]:
        """METRICS.md stalls of one device (empty when not recorded)."""
        return self.stalls.get(device) or {} if device is not None else {}

    def device_name(self, device: str | None) -> str | None:
        return self.device_names.get(device) if device is not None else None

    @property
    def device_ids(self) -> list[str]:
        """The devices that ran, in id order."""
        return sorted(self.devices or {}, key=int)

    @property
    def synthetic(self) -> bool:
        """A demonstration model's run, not a measurement."""
        return (self.manifest or {}).get("synthetic") is True

    @property
    def runtime(self) -> dict[str, Any]:
        """What the script reported of its run (``manifest.runtime``)."""
        return (self.manifest or {}).get("runtime") or {}

    @property
    def step_flops(self) -> float | None:
        """FLOPs per step of the compiled step module (XLA's cost analysis), if known."""
        return ((self.compiled or {}).get("cost") or {}).get("flops")

    @property
    def plan(self) -> dict[str, Any] | None:
        """The compiled step's labelled offload plan, if any."""
        return (self.compiled or {}).get("plan")

    @property
    def finding_list(self) -> list[dict[str, Any]]:
        """The findings of the run (empty when none or not recorded)."""
        return (self.findings or {}).get("findings") or []
