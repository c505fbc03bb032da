"""One step on two accelerators (benchmarks/cross_device.py): the figures benchmarks/README.md states
for a calibration carried from one recording to another ("Issue 42: one step on two accelerators")
hold, recomputed from the recordings."""

from __future__ import annotations

import pytest

from benchmarks import cross_device, h200_predictions
from tests.helpers.paths import SHARED_TRACES

HERE = all(p.is_dir() for p in (cross_device.TPU_SHAPE, cross_device.TPU_D2048, h200_predictions.H200))
pytestmark = pytest.mark.skipif(not HERE, reason="the TPU v5e or H200 sample recordings are absent")
PAX = SHARED_TRACES / "jax-toolbox" / h200_predictions.PAX[0]
TOL = 0.005  # half a percentage point

# (source, target) -> (lowest error, highest error, policies ordered as measured, tie), as the README says
STATED = {
    ("roofline (uncalibrated)", "TPU v5e, H200 shape"): (-0.201, -0.086, False, 0.071),
    ("roofline (uncalibrated)", "TPU v5e, d_model 2048"): (-0.140, -0.030, True, 0.092),
    ("roofline (uncalibrated)", "H200"): (-0.326, -0.204, False, 0.104),
    ("TPU d2048 remat-scan", "TPU v5e, H200 shape"): (-0.087, -0.023, False, 0.025),
    ("TPU d2048 remat-scan", "TPU v5e, d_model 2048"): (-0.021, 0.016, True, 0.028),
    ("TPU d2048 remat-scan", "H200"): (-0.253, -0.172, False, 0.108),
    ("TPU H200-shape remat-scan", "TPU v5e, H200 shape"): (-0.048, 0.005, True, 0.016),
    ("TPU H200-shape remat-scan", "TPU v5e, d_model 2048"): (0.010, 0.037, True, 0.022),
    ("TPU H200-shape remat-scan", "H200"): (-0.219, -0.140, False, 0.101),
    ("H200 offload_qkv", "TPU v5e, H200 shape"): (0.128, 0.184, False, 0.022),
    ("H200 offload_qkv", "TPU v5e, d_model 2048"): (0.185, 0.202, True, 0.008),
    ("H200 offload_qkv", "H200"): (-0.019, 0.105, False, 0.089),
    ("Pax A100 proc0", "TPU v5e, H200 shape"): (-0.009, 0.047, True, 0.024),
    ("Pax A100 proc0", "TPU v5e, d_model 2048"): (0.037, 0.093, True, 0.054),
    ("Pax A100 proc0", "H200"): (-0.162, -0.060, False, 0.082),
}


@pytest.fixture(scope="module")
def doc(tmp_path_factory) -> dict:
    """The whole matrix (about 30 s: 25 recordings, 5 calibrations)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROFILE_STEP_CACHE", str(tmp_path_factory.mktemp("cache")))
        return cross_device.matrix(SHARED_TRACES if PAX.is_file() else None)


def test_the_carried_calibrations_are_what_the_readme_says(doc):
    cells = {(c["source"], c["target"]): c for c in doc["cells"]}
    for key, (lo, hi, ordered, tie) in STATED.items():
        if key[0].startswith("Pax") and not PAX.is_file():
            continue
        c = cells[key]
        assert c["error_min"] == pytest.approx(lo, abs=TOL), key
        assert c["error_max"] == pytest.approx(hi, abs=TOL), key
        assert (not c["swapped"]) == ordered, (key, c["swapped"])
        assert c["tie"] == pytest.approx(tie, abs=TOL), key
    # a source among the target's runs is left out of its cell, and only there
    inside = {
        ("TPU H200-shape remat-scan", "TPU v5e, H200 shape"),
        ("TPU d2048 remat-scan", "TPU v5e, d_model 2048"),
        ("H200 offload_qkv", "H200"),
    }
    for (src, tgt), c in cells.items():
        assert (c["left_out"] is not None) == ((src, tgt) in inside), (src, tgt)
        assert c["left_out"] not in c["errors"]


def test_a_scanned_h200_run_calibrates_nothing_and_says_so(doc):
    """Its layers ran as two loops, each timed as one range: only what ran outside them is named (8 of
    256 ms, its command buffers'), too little of the step to fit a scale (a 25% floor), so a calibration
    from it is the roofline's; the notes say so and the matrix gives it no row. The unrolled run, whose
    command buffers' kernels are named now, is fitted on nearly all of its step."""
    scan = next(s for s in doc["sources"] if s["source"] == "H200 offload_qkv-scan")
    assert scan["scale"] == {} and 0 < scan["named_ns"] < 0.05 * scan["step_ns"]
    assert any("7.84 ms of the 256 ms step, under 25%: too little to fit a scale" in n for n in scan["notes"])
    assert any("a calibration from this run is the roofline's" in n for n in scan["notes"])
    assert not any(c["source"] == "H200 offload_qkv-scan" for c in doc["cells"])
    unrolled = next(s for s in doc["sources"] if s["source"] == "H200 offload_qkv")
    assert (
        set(unrolled["scale"]) == {"matmul", "fusion", "reduction"} and unrolled["named_ns"] > 0.9 * unrolled["step_ns"]
    )


def test_the_carried_figures_accuracy_states_are_the_cells_between_a_tpu_and_a_gpu(doc):
    """``accuracy.TPU_TO_GPU`` and ``GPU_TO_TPU`` (what ``plan --from`` states for a prediction on the
    other kind of device) span exactly the cells fitted on one kind and applied to the other."""
    from profiler.analysis.accuracy import GPU_TO_TPU, TPU_TO_GPU

    def is_tpu(name: str) -> bool:
        return name.startswith("TPU")

    for acc, want in ((TPU_TO_GPU, (True, False)), (GPU_TO_TPU, (False, True))):
        if want[1] and not PAX.is_file():
            continue  # the Pax A100's cells are among them: without ../shared they cannot be recomputed
        fitted = [c for c in doc["cells"] if not c["source"].startswith("roofline")]
        cells = [c for c in fitted if (is_tpu(c["source"]), is_tpu(c["target"])) == want]
        assert len(cells) >= 2, acc.kind
        assert acc.step_low == pytest.approx(min(c["error_min"] for c in cells), abs=TOL)
        assert acc.step_high == pytest.approx(max(c["error_max"] for c in cells), abs=TOL)
        assert acc.tie == pytest.approx(max(c["tie"] for c in cells), abs=TOL)


def test_plan_from_states_the_carried_error_on_the_other_kind_of_device():
    from profiler.analysis.accuracy import GPU_TO_TPU, TPU_TO_GPU
    from profiler.predict.from_recording import from_recording

    tpu = next(cross_device.TPU_SHAPE.glob("*-remat-scan-*"))
    h200, own = from_recording(tpu, ["h200", "tpu-v5e"])["predicted"]
    assert h200["link"] == "PCIe Gen5 x16" and h200["error"] is None  # the target's own link
    assert (
        h200["expected_error"]
        == f"calibrated on a TPU: {TPU_TO_GPU.error_text()}"
        == "calibrated on a TPU: 14-25% short"
    )
    assert own["link"] == "TPU v5e host link as measured" and abs(own["error"]) < 0.01  # its own step, in-sample
    gpu = next(h200_predictions.H200.glob("*-offload_qkv-b50f27"))
    (tpu_pred,) = from_recording(gpu, ["tpu-v5e"])["predicted"]
    assert tpu_pred["expected_error"] == f"calibrated on a GPU: {GPU_TO_TPU.error_text()}"
