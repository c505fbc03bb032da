"""The predicted step of the real two-layer H100 step (../shared/hlo) against the plain replay of
tests/reference_predict.py, and its copy times by hand."""

from __future__ import annotations

import math

import pytest

from profiler.analysis.links import parse_link
from profiler.predict.step import predict_file
from profiler.xla.hlo import parse_text
from profiler.xla.targets import TARGETS
from tests.helpers import reference_predict
from tests.helpers.paths import AOT_HLO

H100 = TARGETS["h100"]


@pytest.mark.shared
@pytest.mark.parametrize(("link", "gbps"), [("pcie4", 31.5), ("pcie5", 63.0), ("nvlink-c2c", 450.0), ("1", 1.0)])
def test_real_step_against_the_reference_replay(link, gbps):
    if not AOT_HLO.is_file():
        pytest.skip("../shared/hlo is absent")
    (got,) = predict_file(AOT_HLO, H100.spec_text(), [parse_link(link)])["predictions"]
    want = reference_predict.predicted(parse_text(AOT_HLO.read_text()), H100.spec_text(), gbps)
    assert {k: got[k] for k in want} == want
    assert got["predicted_step_ns"] == got["predicted_compute_ns"] + got["predicted_exposed_ns"]  # no collectives
    # two f32[256,4096] copies each way (4 MiB each): 2 * ceil(4_194_304 / gbps) ns per direction
    each = 2 * math.ceil(256 * 4096 * 4 / gbps)
    assert got["predicted_copy_ns"] == {"d2h": each, "h2d": each}
    assert got["costed_by"] == {"given": 25, "link": 4, "missing": 0}  # 4 copy-starts priced over the link
