"""The write-up's question on a plan's predictions: at which batch and link does offloading beat
rematerialization, and by how much.  Pure functions over ``plan_table`` rows."""

from __future__ import annotations

from typing import Any

from profiler.analysis.accuracy import ROOFLINE, Accuracy

REMAT = "remat"
OFFLOAD_PREFIX = "offload"
KEEP = (
    "link",
    "link_name",
    "link_gbps",
    "predicted_step_ns",
    "predicted_exposed_ns",
    "predicted_compute_ns",
    "predicted_copy_ns",
    "copy_bytes",
    "predicted_exposed_collective_ns",
    "layers",
    "costed_by",
    "cost_model",
    "late_copies",
    "notes",
)


def prediction_rows(row: dict[str, Any], res: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per link of a plan result's prediction, named by policy and batch."""
    pred = res.get("prediction") or {}
    return [{**_of_row(row), **{k: p.get(k) for k in KEEP}} for p in pred.get("predictions") or []]


def _of_row(row: dict[str, Any]) -> dict[str, Any]:
    """What a prediction entry takes from its plan row: policy, batch, whether and in how much it fits."""
    return {k: row.get(k) for k in ("policy", "batch", "fits", "device_bytes", "host_bytes")}


def calibrated_rows(row: dict[str, Any], res: dict[str, Any]) -> list[dict[str, Any]]:
    """``plan --calibrate``'s predictions of a plan result (``calibrated``: one per link), as
    ``prediction_rows`` names them, with how each instruction was costed."""
    return [{**_of_row(row), **{k: p.get(k) for k in KEEP}, "costed": p.get("costed")}
            for p in res.get("calibrated") or []]  # fmt: skip


def offload_vs_remat(preds: list[dict[str, Any]], accuracy: Accuracy = ROOFLINE) -> list[dict[str, Any]]:
    """Per (batch, link): the remat policy's predicted step against the fastest offload policy's
    (policies named ``offload*``) and the fastest policy that fits; ``saving`` = (remat - offload) /
    remat (positive: offloading is faster).  Only policies that fit in device memory compete (a row
    whose fit is unknown competes, marked).  A difference within the predictions' error
    (*accuracy*'s tie margin, ``tie_within``) is a tie: ``winner`` is ``tie``, and ``lighter`` names
    the side that needs less device memory (None when a side's memory is unknown or both need the same).
    Steps far shorter than the real ones the error was measured on (``Accuracy.out_of_range``) are not
    called: ``winner`` is ``unchecked``, ``checked_from_ns`` the shortest real step."""
    out = []
    keys = list(dict.fromkeys((p["batch"], p["link"]) for p in preds))
    for batch, link in keys:
        here = [p for p in preds if p["batch"] == batch and p["link"] == link and p["predicted_step_ns"] is not None]
        if not any(p["policy"] == REMAT or p["policy"].startswith(OFFLOAD_PREFIX) for p in here):
            continue  # neither side of the question was compiled
        ok = [p for p in here if p["fits"] is not False]
        remat = next((p for p in ok if p["policy"] == REMAT), None)
        offs = sorted((p for p in ok if p["policy"].startswith(OFFLOAD_PREFIX)), key=lambda p: p["predicted_step_ns"])
        best = min(ok, key=lambda p: p["predicted_step_ns"], default=None)
        entry: dict[str, Any] = {
            "batch": batch,
            "link": link,
            "link_name": here[0]["link_name"] if here else link,
            "remat_step_ns": remat["predicted_step_ns"] if remat else None,
            "offload_policy": offs[0]["policy"] if offs else None,
            "offload_step_ns": offs[0]["predicted_step_ns"] if offs else None,
            "offload_exposed_ns": offs[0]["predicted_exposed_ns"] if offs else None,
            "offload_device_bytes": offs[0].get("device_bytes") if offs else None,
            "remat_device_bytes": remat.get("device_bytes") if remat else None,
            "lighter": None,
            "fastest_fitting": best["policy"] if best else None,
            "fastest_step_ns": best["predicted_step_ns"] if best else None,
            "not_fitting": [p["policy"] for p in here if p["fits"] is False],
            "saving_ns": None,
            "saving": None,
            "winner": None,
            "tie_within": accuracy.tie,
            "error": accuracy.error_text(),
            "error_basis": accuracy.basis,
        }
        if remat and offs:
            saving = remat["predicted_step_ns"] - offs[0]["predicted_step_ns"]
            entry["saving_ns"] = saving
            entry["saving"] = saving / remat["predicted_step_ns"] if remat["predicted_step_ns"] else None
            tied = accuracy.is_tie(remat["predicted_step_ns"], offs[0]["predicted_step_ns"])
            entry["winner"] = "tie" if tied or saving == 0 else ("offload" if saving > 0 else "remat")
            if accuracy.out_of_range(remat["predicted_step_ns"], offs[0]["predicted_step_ns"]):
                entry["winner"] = "unchecked"  # too short for the error the predictions carry
                entry["checked_from_ns"] = accuracy.shortest_ns
            mem = (entry["offload_device_bytes"], entry["remat_device_bytes"])
            if entry["winner"] == "tie" and None not in mem and mem[0] != mem[1]:
                entry["lighter"] = entry["offload_policy"] if mem[0] < mem[1] else REMAT
        out.append(entry)
    return out
