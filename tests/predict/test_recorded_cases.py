"""A run's own step predicted against what it measured (``profiler.predict.recorded``: the policy
table's predicted columns), on run folders built by hand: which module and target description a
run's folder gives, when there is no prediction and what it says, the host link, and every field of
the comparison (the step, the exposed copy time, per layer per step and device, what ``tune
--verify`` had predicted).  Written for the mutation run of ``recorded.py`` (docs/testing.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from profiler.analysis.links import LINKS, host_link
from profiler.predict.recorded import against_measured, predicted, run_prediction
from profiler.predict.step import LABEL, predict_file
from profiler.xla.targets import TARGETS
from tests.helpers.hlo_programs import chain_lines

H100 = "NVIDIA H100 80GB HBM3"
T = "f32[512,512]{1,0}"
HOST = "f32[512,512]{1,0:S(5)}"
# four kernels and a matmul; the second's result (of layer 3: its producer's op_name) copied to the host
LINES = chain_lines(4, T, HOST, copy_of=1, done_after=3)
LINES[2] = LINES[2].replace("(%k0)", '(%k0), metadata={op_name="jit(step)/layers_3/mlp/neg"}')
HLO = (
    "HloModule jit_step, is_scheduled=true\n\nENTRY %main (x: f32[512,512]) -> f32[512,512] {\n"
    + "\n".join(LINES)
    + f"\n  %d = {T} dot(%k3, %k3), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}"
    + f"\n  ROOT %out = {T} add(%d, %d)\n}}\n"
)
AFTER = "module_0007.jit_step.sm_9.0_gpu_after_optimizations.txt"


def run_folder(
    tmp_path: Path, *, dump: bool = True, target: bytes | None = None, dump_dir: str | None = "dump"
) -> Path:
    """A run folder with compiled.json naming the step module (by its label), its HLO in the dump
    folder ``dump/`` (or, without *dump*, in the run folder itself), with *target* the dump's target
    description; beside it a module whose file is missing, one known by its proto's name only
    (``after_proto``) and one with no file at all."""
    folder = tmp_path / "run"
    where = folder / (dump_dir or "xla_dump")  # compiled.json without dump_dir: XLA's default folder
    where.mkdir(parents=True)
    (where if dump else folder).joinpath(AFTER).write_text(HLO)
    files = {"after": AFTER, **({"target": "gpu_target_config.pbtxt"} if target else {})}
    if target:
        (where / "gpu_target_config.pbtxt").write_bytes(target)
    mods = [
        {"name": "jit_other", "files": {"after": "nope.txt"}},
        {"name": "jit_x", "label": "jit_step", "files": files},
        {"name": "jit_proto", "files": {"after_proto": AFTER}},
        {"name": "jit_bare"},
    ]
    (folder / "compiled.json").write_text(json.dumps({"modules": mods, **({"dump_dir": dump_dir} if dump_dir else {})}))
    return folder


def summary(folder: Path, gpus: tuple[str, ...] = (H100,), **more) -> dict:
    return {"policy": "offload", "trace": str(folder / "trace.sqlite"), "gpus": list(gpus), **more}


ROW = {"step_module": "jit_step", "median_step_ns": 400_000, "exposed_ns": 10_000, "device_kind": H100}


def test_the_step_predicted_on_the_gpus_own_target_and_link(tmp_path):
    folder = run_folder(tmp_path)
    out = run_prediction(summary(folder), ROW)
    spec = TARGETS["h100"].spec_text()
    link = host_link([H100])
    want = predict_file(folder / "dump" / AFTER, spec, [link.link])
    assert out == {
        "label": LABEL,
        "prediction": want["predictions"][0],
        "target": f"profile-step's h100 target ({H100})",
        "link": {"key": link.link.key, "name": link.link.name, "why": link.why},
        "notes": want["notes"],
    }
    assert link.link is LINKS["pcie5"] and out["prediction"]["link_name"] == "PCIe Gen5 x16"
    # the row's own peak (its matmul TFLOP/s) goes to the roofline; a name that only contains the
    # target's, or is contained in it, finds it too
    peaked = run_prediction(summary(folder), {**ROW, "peak_tflops": 1.0})
    assert peaked["prediction"] == predict_file(folder / "dump" / AFTER, spec, [link.link], 1.0)["predictions"][0]
    assert peaked["prediction"] != out["prediction"]  # the matmul at 1 TFLOP/s
    for name in ("nvidia h100 80gb hbm3 (rev 2)", "h100 80gb"):
        got = run_prediction(summary(folder, (name,)), {**ROW, "device_kind": None})
        assert got["target"] == f"profile-step's h100 target ({H100})", name
    older = run_folder(tmp_path / "older", dump_dir=None)  # a compiled.json that names no dump folder
    assert run_prediction(summary(older), ROW)["prediction"] == out["prediction"]
    # the row's device kind alone names the GPU; a module known by its proto's file name
    assert run_prediction(summary(folder, ()), ROW)["prediction"] == out["prediction"]
    assert run_prediction(summary(folder), {**ROW, "step_module": "jit_proto"})["prediction"] == out["prediction"]
    # a file in the run folder of the dump's file's name does not replace the dump's
    (folder / AFTER).write_text("not the step")
    assert run_prediction(summary(folder), ROW)["prediction"] == out["prediction"]
    # the module changed on disk: predicted again, not taken from the cache
    (folder / "dump" / AFTER).write_text(HLO.replace("f32[512,512]", "f32[1024,1024]"))
    later = (folder / "dump" / AFTER).stat().st_mtime + 5
    os.utime(folder / "dump" / AFTER, (later, later))
    assert (
        run_prediction(summary(folder), ROW)["prediction"]["predicted_step_ns"] > out["prediction"]["predicted_step_ns"]
    )
    # a module the prediction cannot read: no prediction, the reason in the notes
    (folder / "dump" / AFTER).write_text("this is no HLO module")
    os.utime(folder / "dump" / AFTER, (later + 5, later + 5))
    broken = run_prediction(summary(folder), ROW)
    assert broken["prediction"] is None and broken["notes"] and broken["notes"][0].startswith("no prediction: ")


def test_the_dumps_own_target_and_the_hlo_handed_over(tmp_path):
    """The dump's target description (read whatever its bytes: a comment in Latin-1 here) over the
    GPU's name; the HLO the script wrote into the run folder when the dump lacks it."""
    spec = TARGETS["a100"].spec_text()
    folder = run_folder(tmp_path, dump=False, target=b"# r\xe9glages\n" + spec.encode())
    out = run_prediction(summary(folder), ROW)
    assert out["target"] == "the dump's gpu_target_config.pbtxt"
    read = "# r\ufffdglages\n" + spec
    assert out["prediction"] == predict_file(folder / AFTER, read, [host_link([H100]).link])["predictions"][0]
    assert out["prediction"]["predicted_step_ns"] != run_prediction(summary(run_folder(tmp_path / "own")), ROW)[
        "prediction"]["predicted_step_ns"]  # an A100's description, not the H100's  # fmt: skip


def test_no_prediction_and_why(tmp_path):
    folder = run_folder(tmp_path)

    def notes(run: dict, row: dict) -> list[str]:
        out = run_prediction(run, row)
        assert out["prediction"] is None and out["target"] is None and out["link"] is None
        return out["notes"]

    cpu = "no prediction: a CPU run's compiled step is XLA:CPU's, with no GPU schedule"
    assert notes(summary(folder), {**ROW, "platform": "cpu"}) == [cpu]
    assert notes(summary(folder), {**ROW, "device_kind": "CPU"}) == [cpu]
    no_module = "no prediction: no compiled step module in the run folder"
    assert notes({**summary(folder), "trace": None}, ROW) == [no_module]
    assert notes(summary(folder), {**ROW, "step_module": None}) == [no_module]
    no_hlo = "no prediction: the step module's HLO is not in the run folder's dump"
    assert notes(summary(folder), {**ROW, "step_module": "jit_other"}) == [no_hlo]  # its file is not there
    assert notes(summary(folder), {**ROW, "step_module": "jit_unknown"}) == [no_hlo]
    assert notes(summary(folder), {**ROW, "step_module": "jit_bare"}) == [no_hlo]
    assert notes(summary(tmp_path / "elsewhere"), ROW) == [no_hlo]  # no compiled.json
    assert notes(summary(folder, ("Some Future GPU", "Another")), {**ROW, "device_kind": None}) == [
        "no prediction: no target description for Some Future GPU, Another"
    ]
    assert notes(summary(folder, ()), {**ROW, "device_kind": "cpu"}) == [cpu]
    assert notes(summary(folder, ("cpu",)), {**ROW, "device_kind": None}) == [
        "no prediction: no target description for an unnamed GPU"
    ]


def test_predicted_against_measured_per_step_device_and_layer(tmp_path):
    """Two steps, two devices: a layer's measured exposed time per step and device is its total / 4;
    the step's error against the row's median, the exposed time's difference in ns."""
    folder = run_folder(tmp_path)
    run = summary(folder, steps=[{"name": "s0", "duration_ns": 1}, {"name": "s1", "duration_ns": 1}],
                  devices={"0": {}, "1": {}},
                  layers={"layers_3": {"offload": {"exposed_ns": 8_000}}, "layers_9": {"offload": {}}})  # fmt: skip
    doc = predicted(run, ROW)
    own = run_prediction(run, ROW)
    pred = own["prediction"]
    step, exposed = pred["predicted_step_ns"], pred["predicted_exposed_ns"]
    (layer,) = pred["layers"]
    assert layer["layer"] == "layers_3"
    assert doc == {
        "link": "PCIe Gen5 x16",
        "target": f"profile-step's h100 target ({H100})",
        "predicted_step_ns": step,
        "predicted_exposed_ns": exposed,
        "measured_step_ns": 400_000,
        "measured_exposed_ns": 10_000,
        "step_error": step / 400_000 - 1,
        "cost_model": "roofline",  # the run's own dump: compiled without XLA's estimates
        "exposed_error_ns": exposed - 10_000,
        "layers": [
            {
                "layer": "layers_3",
                "predicted_exposed_ns": layer["exposed_ns"],
                "measured_exposed_ns": 2_000.0,
                "error_ns": layer["exposed_ns"] - 2_000.0,
            }
        ],
        "notes": own["notes"],
        "tune": None,
    }
    # nothing measured or predicted: no errors; a layer the trace does not name: no measured time
    bare = against_measured({}, summary(folder), {"prediction": {"layers": [{"layer": None, "exposed_ns": 5}]}})
    assert bare["step_error"] is None and bare["exposed_error_ns"] is None and bare["link"] is None
    assert bare["layers"] == [{"layer": None, "predicted_exposed_ns": 5, "measured_exposed_ns": None, "error_ns": None}]
    one = summary(folder, steps=[{"name": "s0", "duration_ns": 1}], layers={"layers_9": {"offload": {}}})
    got = against_measured(
        {}, one, {"prediction": {"layers": [{"layer": "layers_9", "exposed_ns": 5}]}, "notes": ["n"]}
    )
    assert got["layers"][0]["measured_exposed_ns"] == 0 and got["notes"] == ["n"]
    one = summary(folder, steps=[{"name": "s0", "duration_ns": 1}], layers={"layers_3": {"offload": {"exposed_ns": 6}}})
    assert against_measured({}, one, {"prediction": {"layers": [{"layer": "layers_3", "exposed_ns": 5}]}})["layers"][
        0]["measured_exposed_ns"] == 6.0  # one step, one device  # fmt: skip
    zero = against_measured({"median_step_ns": 0, "exposed_ns": 0}, summary(folder), {"prediction": {
        "predicted_step_ns": 10, "predicted_exposed_ns": 3}})  # fmt: skip
    assert zero["step_error"] is None and zero["exposed_error_ns"] == 3


def test_what_tune_verify_had_predicted(tmp_path):
    """The folder's tune_prediction.json: the candidate's predicted step against the measured one, the
    errors only for a GPU run (a run predicted for its GPU), nothing without the file or a candidate."""
    folder = run_folder(tmp_path)
    candidate = {"label": "offload mlpwo", "predicted_step_ns": 500_000, "predicted_exposed_ns": 1_000}
    told = {"tune": {"choice": "x"}, "target": {"label": H100}, "link": {"name": "NVLink-C2C"}, "candidate": candidate}
    (folder / "tune_prediction.json").write_text(json.dumps(told))
    doc = predicted(summary(folder), ROW)
    assert doc["tune"] == {
        "label": "offload mlpwo", "target": H100, "link": "NVLink-C2C", "predicted_step_ns": 500_000,
        "predicted_exposed_ns": 1_000, "step_error": 500_000 / 400_000 - 1, "exposed_error_ns": 1_000 - 10_000,
        "tune": {"choice": "x"},
    }  # fmt: skip
    cpu = predicted(summary(folder), {**ROW, "platform": "cpu"})["tune"]
    assert cpu["step_error"] is None and cpu["exposed_error_ns"] is None and cpu["predicted_step_ns"] == 500_000
    (folder / "tune_prediction.json").write_text(json.dumps({**told, "candidate": "not a dict"}))
    assert predicted(summary(folder), ROW)["tune"] is None
    (folder / "tune_prediction.json").unlink()
    assert predicted(summary(folder), ROW)["tune"] is None
    assert against_measured(ROW, {**summary(folder), "trace": None}, {})["tune"] is None


def test_a_scanned_layer_is_measured_as_the_trace_names_its_iterations():
    """The prediction names a scan's body by its family (``layers``); the trace names it ``layers (every
    iteration)`` where the loop ran as one range (command buffers), or ``layers[k]`` per iteration: the
    scanned run read 'measured -: no layer ranges' beside analyze's 178.8 ms of its layers."""
    from profiler.predict.recorded import _measured_layer

    assert _measured_layer({"layers (every iteration)": 5.0, "embed": 1.0}, "layers") == 5.0
    assert _measured_layer({"layers[0]": 2.0, "layers[1]": 3.0, "layers[x]": 9.0, "layersX[0]": 9.0}, "layers") == 5.0
    assert _measured_layer({"layers": 7.0, "layers[0]": 2.0}, "layers") == 7.0  # the very name first
    assert _measured_layer({"mlp": 1.0}, "layers") is None
