"""``step.predict_file``, what ``plan`` and ``analyze`` call for a compiled step: one prediction per link,
the device it priced on, and a note (never an exception) for what it cannot read."""

from __future__ import annotations

import math
from pathlib import Path
from unittest import mock

from profiler.analysis.links import parse_link
from profiler.predict import roofline, step
from profiler.predict.step import LABEL, predict_file, predict_module
from profiler.xla.hlo import parse_text
from profiler.xla.targets import TARGETS

H100 = TARGETS["h100"]
# a kernel (a negate of 1,000 floats: 8,000 bytes) and a copy of it out to host memory and back
STEP = """HloModule step, is_scheduled=true

ENTRY %e (v: f32[1000]) -> f32[1000] {
  %v = f32[1000]{0} parameter(0)
  %n = f32[1000]{0} negate(%v)
  %cs = (f32[1000]{0:S(5)}, f32[1000]{0}, u32[]) copy-start(%n)
  %cd = f32[1000]{0:S(5)} copy-done(%cs)
  %back = (f32[1000]{0}, f32[1000]{0:S(5)}, u32[]) copy-start(%cd)
  ROOT %bd = f32[1000]{0} copy-done(%back)
}
"""


def test_one_prediction_per_link_with_the_device_it_priced_on(tmp_path):
    """On the H100 (3.35 TB/s): the negate's 8,000 bytes take ceil(8,000 / 3,350) = 3 ns; each copy of
    4,000 bytes takes ceil(4,000 / 1) ns on a link of 1 GB/s and ceil(4,000 / 450) = 9 ns on NVLink-C2C;
    the copy back waits for the copy out, so the step is the kernel and both copies in a row."""
    hlo = tmp_path / "step.hlo.txt"
    hlo.write_text(STEP)
    links = [parse_link("1"), parse_link("nvlink-c2c")]
    doc = predict_file(hlo, H100.spec_text(), links)
    assert doc["label"] == LABEL and doc["notes"] == []
    dev = roofline.device_from_spec(H100.spec_text())
    assert doc["device"] == {
        "name": "NVIDIA H100 80GB HBM3",
        "matmul_tflops": dev.matmul_flops / 1e12,
        "vector_tflops": dev.vector_flops / 1e12,
        "hbm_gbps": dev.hbm_bytes_s / 1e9,
        "interconnect_gbps": 450.0,
    }
    slow, fast = doc["predictions"]
    assert (slow["link_name"], slow["link_gbps"]) == (links[0].name, 1.0)
    assert (fast["link_name"], fast["link_gbps"]) == (links[1].name, 450.0)
    kernel = math.ceil(8000 / dev.hbm_bytes_s * 1e9)
    assert kernel == 3
    assert slow["predicted_step_ns"] == kernel + 4000 + 4000
    assert fast["predicted_step_ns"] == kernel + 9 + 9
    preds, by_xla = predict_module(parse_text(STEP), dev, links)
    assert [p.doc() for p in preds] == [
        {k: v for k, v in p.items() if k not in ("link_name", "link_gbps", "cost_model")} for p in doc["predictions"]
    ]
    # a module compiled without XLA's own estimates is costed by the roofline alone, and says so
    assert by_xla == doc["xla_costed"] == 0
    assert doc["cost_model"] == "roofline" and {p["cost_model"] for p in doc["predictions"]} == {"roofline"}


def test_what_it_cannot_read_is_a_note(tmp_path):
    hlo = tmp_path / "step.hlo.txt"
    hlo.write_text(STEP)
    link = [parse_link("pcie5")]
    missing = predict_file(tmp_path / "absent.hlo.txt", H100.spec_text(), link)
    assert missing["predictions"] == [] and missing["device"] is None
    (note,) = missing["notes"]
    assert note.startswith("no prediction: ") and "absent.hlo.txt" in note
    no_bw = "\n".join(line for line in H100.spec_text().splitlines() if "memory_bandwidth" not in line)
    bad = predict_file(hlo, no_bw, link)
    assert bad["notes"] == ["no prediction: the target description has no memory_bandwidth"]
    assert bad["device"] is None and bad["predictions"] == []
    garbage = tmp_path / "garbage.hlo.txt"
    garbage.write_text("this is no HLO\n")
    doc = predict_file(garbage, H100.spec_text(), link)
    assert doc["predictions"] == [] and doc["notes"][0].startswith("no prediction: ")
    assert predict_file(Path(hlo), H100.spec_text(), [])["predictions"] == []  # no link asked: none predicted
    # a module the replay misreads (here made to fail by hand): its name and the error, in one note
    with mock.patch.object(step, "predict_module", side_effect=KeyError("%lost")):
        misread = predict_file(hlo, H100.spec_text(), link)
    assert misread["notes"] == ["no prediction: the replay of step.hlo.txt failed (KeyError: '%lost')"]
    assert misread["predictions"] == [] and misread["device"]["name"] == "NVIDIA H100 80GB HBM3"


def test_a_given_peak_replaces_the_targets(tmp_path):
    hlo = tmp_path / "step.hlo.txt"
    hlo.write_text(STEP)
    doc = predict_file(hlo, H100.spec_text(), [parse_link("pcie5")], peak_bf16_tflops=500.0)
    assert doc["device"]["matmul_tflops"] == 500.0
