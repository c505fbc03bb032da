"""After a run: the static prediction of the run's own compiled step on the recorded GPU and host
link, against what the trace measured (per policy and per layer).

The step's module is the one ``compiled.json`` chose (``analysis.policies.step_compiled``); the
target is the dump's own ``gpu_target_config.pbtxt`` when XLA wrote one, else the built-in target
whose name is the recorded GPU's; the link is the GPU's host link (``analysis.links.host_link``).
A CPU run has no GPU schedule: no prediction, and the row says why.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from profiler.analysis.links import Link, host_link
from profiler.predict.step import LABEL, predict_file
from profiler.stored.folder import compiled_in, tune_prediction_in
from profiler.stored.summary import RunSummary
from profiler.xla.proto import read_bytes
from profiler.xla.targets import TARGETS


def _step_files(folder: Path, label: str | None) -> tuple[Path | None, Path | None]:
    """(after-optimization module, target description) of the step module *label* in the run folder."""
    compiled = compiled_in(folder)
    if compiled is None:
        return None, None
    dump = folder / (compiled.get("dump_dir") or "xla_dump")
    mod = next((m for m in compiled.get("modules") or [] if label and (m.get("label") or m["name"]) == label), None)
    if mod is None:
        return None, None
    files = mod.get("files") or {}
    hlo = files.get("after") or files.get("after_proto")
    target = files.get("target")
    path = dump / hlo if hlo else None
    if path is not None and not path.is_file() and (folder / hlo).is_file():
        path = folder / hlo  # handed over without a dump: the text the script wrote into the run folder
    return path, (dump / target if target else None)


def _spec_for(gpus: list[str], target_file: Path | None) -> tuple[str | None, str]:
    if target_file is not None and target_file.is_file():
        return read_bytes(target_file).decode("utf-8", "replace"), f"the dump's {target_file.name}"
    for name in gpus:
        low = name.lower()
        for t in TARGETS.values():
            if t.description.lower() == low or t.description.lower() in low or low in t.description.lower():
                return t.spec_text(), f"profile-step's {t.key} target ({t.description})"
    return None, f"no target description for {', '.join(gpus) or 'an unnamed GPU'}"


@lru_cache(maxsize=64)
def _predict_cached(hlo: str, mtime: float, spec: str, link: Link, peak: float | None) -> dict[str, Any]:
    return predict_file(Path(hlo), spec, [link], peak)


def run_prediction(run: RunSummary | dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """The prediction for one policy-table row (*row*) of run summary *run*: ``{"prediction": doc or
    None, "target", "link", "notes"}``."""
    run = RunSummary.of(run)
    out: dict[str, Any] = {"label": LABEL, "prediction": None, "target": None, "link": None, "notes": []}
    if row.get("platform") == "cpu" or (row.get("device_kind") or "").lower() == "cpu":
        out["notes"].append("no prediction: a CPU run's compiled step is XLA:CPU's, with no GPU schedule")
        return out
    if not run.trace or not row.get("step_module"):
        out["notes"].append("no prediction: no compiled step module in the run folder")
        return out
    hlo, target_file = _step_files(Path(run.trace).parent, row["step_module"])
    if hlo is None or not hlo.is_file():
        out["notes"].append("no prediction: the step module's HLO is not in the run folder's dump")
        return out
    gpus = [g for g in [row.get("device_kind"), *run.gpus] if g and g.lower() != "cpu"]
    spec, why = _spec_for(gpus, target_file)
    if spec is None:
        out["notes"].append(f"no prediction: {why}")
        return out
    link = host_link(gpus)
    out["target"], out["link"] = why, {"key": link.link.key, "name": link.link.name, "why": link.why}
    doc = _predict_cached(str(hlo), hlo.stat().st_mtime, spec, link.link, row.get("peak_tflops"))
    out["notes"] += doc["notes"]
    out["prediction"] = doc["predictions"][0] if doc["predictions"] else None
    return out


def _measured_layer(measured: dict[str, float], name: str) -> float | None:
    """The measured exposed time of the layer the prediction names *name*: the trace's layer of that
    name, else its scanned family (a loop's body, ``layers``) as the trace names it: one range for every
    iteration (``layers (every iteration)``), or the iterations (``layers[0]``...) summed."""
    if name in measured:
        return measured[name]
    if f"{name} (every iteration)" in measured:
        return measured[f"{name} (every iteration)"]
    its = [
        v
        for k, v in measured.items()
        if k.startswith(f"{name}[") and k.endswith("]") and k[len(name) + 1 : -1].isdigit()
    ]
    return sum(its) if its else None


def against_measured(row: dict[str, Any], run: RunSummary | dict[str, Any], pred: dict[str, Any]) -> dict[str, Any]:
    """Predicted against measured for one row: step and exposed copy time per step and device
    (the row's medians), the error, and per layer the exposed copy time (the trace's per layer
    totals / steps / devices)."""
    p = pred.get("prediction") or {}
    step, exposed = p.get("predicted_step_ns"), p.get("predicted_exposed_ns")
    m_step, m_exp = row.get("median_step_ns"), row.get("exposed_ns")
    run = RunSummary.of(run)
    n_steps, n_dev = max(len(run.steps), 1), run.device_count
    measured_layers = {name: v.offload.get("exposed_ns", 0) / n_steps / n_dev for name, v in run.layers.items()}
    layers = []
    for x in p.get("layers") or []:
        got = _measured_layer(measured_layers, x["layer"]) if x["layer"] is not None else None
        layers.append({"layer": x["layer"], "predicted_exposed_ns": x["exposed_ns"], "measured_exposed_ns": got,
                       "error_ns": x["exposed_ns"] - got if got is not None else None})  # fmt: skip
    return {
        "link": (pred.get("link") or {}).get("name"),
        "target": pred.get("target"),
        "predicted_step_ns": step,
        "predicted_exposed_ns": exposed,
        "measured_step_ns": m_step,
        "measured_exposed_ns": m_exp,
        "step_error": step / m_step - 1 if step is not None and m_step else None,
        "cost_model": p.get("cost_model"),
        "exposed_error_ns": exposed - m_exp if exposed is not None and m_exp is not None else None,
        "layers": layers,
        "notes": pred.get("notes") or [],
        "tune": _tune_told(run, m_step, m_exp, gpu=p.get("predicted_step_ns") is not None),
    }


def _tune_told(run: RunSummary, m_step: int | None, m_exp: int | None, gpu: bool) -> dict[str, Any] | None:
    """What ``tune --verify`` predicted for the candidate this run captured (its folder's
    tune_prediction.json), against the measured step; the error only for a GPU run."""
    told = tune_prediction_in(Path(run.trace).parent) if run.trace else None
    if not told or not isinstance(told.get("candidate"), dict):
        return None
    c = told["candidate"]
    step, exposed = c.get("predicted_step_ns"), c.get("predicted_exposed_ns")
    return {
        "label": c.get("label"),
        "target": (told.get("target") or {}).get("label"),
        "link": (told.get("link") or {}).get("name"),
        "predicted_step_ns": step,
        "predicted_exposed_ns": exposed,
        "step_error": step / m_step - 1 if gpu and step is not None and m_step else None,
        "exposed_error_ns": exposed - m_exp if gpu and exposed is not None and m_exp is not None else None,
        "tune": told.get("tune"),
    }


def predicted(run: RunSummary | dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """``analysis.policies.policy_table``'s *predict*: the run's own step predicted, against the row."""
    return against_measured(row, run, run_prediction(run, row))
