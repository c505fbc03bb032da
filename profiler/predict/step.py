"""A compiled step's predictions on a target and host links: what ``plan`` and ``analyze`` call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profiler.analysis.links import Link
from profiler.predict import roofline, schedule
from profiler.predict.simulate import Prediction, simulate
from profiler.xla.compiled import load_module
from profiler.xla.hlo import HloError, Module

LABEL = "predicted (roofline over the compiled schedule, not measured)"


def predict_module(module: Module, device: roofline.Device, links: list[Link]) -> list[Prediction]:
    """One prediction per link; the roofline costs are computed once."""
    sched = schedule.build(module)
    costs = roofline.costs(sched, device)
    return [simulate(sched, costs, link) for link in links]


def predict_file(hlo: Path, spec_text: str, links: list[Link], peak_bf16_tflops: float | None = None) -> dict[str, Any]:
    """``{"predictions": [Prediction.doc() + link name and bandwidth], "device": ..., "notes": [...]}``
    for the module in *hlo*; problems become notes and an empty list."""
    out: dict[str, Any] = {"label": LABEL, "predictions": [], "device": None, "notes": []}
    try:
        device = roofline.device_from_spec(spec_text, peak_bf16_tflops)
        module, _, _ = load_module(hlo)
    except (ValueError, HloError, OSError) as exc:
        out["notes"].append(f"no prediction: {exc}")
        return out
    out["device"] = {
        "name": device.name,
        "matmul_tflops": device.matmul_flops / 1e12,
        "vector_tflops": device.vector_flops / 1e12,
        "hbm_gbps": device.hbm_bytes_s / 1e9,
        "interconnect_gbps": device.interconnect_bytes_s / 1e9,
    }
    for link, pred in zip(links, predict_module(module, device, links), strict=True):
        out["predictions"].append({**pred.doc(), "link_name": link.name, "link_gbps": link.gbps})
    return out
