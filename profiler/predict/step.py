"""A compiled step's predictions on a target and host links: what ``plan`` and ``analyze`` call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profiler.analysis.accuracy import cost_model
from profiler.analysis.links import Link
from profiler.predict import roofline, schedule
from profiler.predict.simulate import Prediction, simulate
from profiler.xla.compiled import load_module
from profiler.xla.hlo import HloError, Module

# what a predicted number is: the compiled schedule replayed, each kernel at XLA's own estimate where the
# module carries one (roofline.with_xla), else at the roofline
COSTED = "the compiled schedule replayed, kernels at XLA's estimates or the roofline"
LABEL = f"predicted ({COSTED}; not measured)"


def label_of(costed: str) -> str:
    """``LABEL`` for predictions all costed one way (``Accuracy.costed``: the roofline alone, XLA's own
    kernel estimates), so that a table's head names the cost model its error line is about."""
    return f"predicted (the compiled schedule replayed, costed by {costed}; not measured)"


def predict_module(module: Module, device: roofline.Device, links: list[Link]) -> tuple[list[Prediction], int]:
    """One prediction per link (the costs computed once), and how many instructions XLA's own estimate
    costed (``roofline.with_xla``)."""
    sched = schedule.build(module)
    costs, taken = roofline.with_xla(sched, roofline.costs(sched, device, xla=False))
    return [simulate(sched, costs, link) for link in links], len(taken)


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
    try:
        preds, by_xla = predict_module(module, device, links)
    except (ValueError, KeyError, IndexError, TypeError, ZeroDivisionError) as exc:  # a module the replay misreads
        out["notes"].append(f"no prediction: the replay of {hlo.name} failed ({type(exc).__name__}: {exc})")
        return out
    # how the kernels were costed, as the accuracy of such predictions is named: XLA's estimates where the
    # module carries them (a compile by plan or tune), else the roofline
    model = cost_model(by_xla)
    out["cost_model"], out["xla_costed"] = model, by_xla
    for link, pred in zip(links, preds, strict=True):
        out["predictions"].append({**pred.doc(), "link_name": link.name, "link_gbps": link.gbps, "cost_model": model})
    return out
