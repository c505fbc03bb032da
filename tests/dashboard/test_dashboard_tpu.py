"""The dashboard on the TPU v5e runs of sample_traces/tpu-v5e-example: every run with analyze's step,
the out-of-memory run listed without a trace, and the stalls measured (the TPU's waits) rather than
said not measured."""

from __future__ import annotations

import json
import shutil

import pytest

from profiler.trace.jax_profile import NO_WAITS
from tests.helpers.cli import run_cli
from tests.helpers.dashboard import check_page, dashboard, open_page
from tests.helpers.paths import ROOT

TPU = ROOT / "sample_traces" / "tpu-v5e-example"
ROWS_JS = """
() => [...document.querySelectorAll('#runs tr')]
  .filter(tr => tr.querySelector('td[data-dash-column]'))
  .map(tr => Object.fromEntries([...tr.querySelectorAll('td[data-dash-column]')]
    .map(td => [td.dataset.dashColumn, td.innerText.trim()])))
"""


@pytest.mark.browser
def test_the_tpu_runs_with_their_steps_and_stalls(browser, tmp_path):
    folder = tmp_path / "tpu-v5e-example"
    shutil.copytree(TPU, folder)  # the dashboard caches beside traces
    doc = json.loads(run_cli("analyze", "--json", str(folder)).stdout)
    policies = {r["policy"]: r for r in doc["policies"]["rows"]}
    with dashboard(folder) as (url, _):
        page = open_page(browser, url, 11)
        page.wait_for_function("document.querySelectorAll('#policy-bars .row-label').length >= 10", timeout=120_000)
        rows = page.evaluate(ROWS_JS)
        measured = [r for r in rows if r["policy"] in policies]
        assert len(measured) == 10 and all("TPU v5 lite" in r["device"] for r in measured)
        for r in measured:
            assert float(r["step"]) == pytest.approx(policies[r["policy"]]["median_step_ns"] / 1e6, rel=5e-4)
        (oom,) = [r for r in rows if r["policy"] not in policies]
        assert (oom["policy"], oom["status"]) == ("none-scan", "no trace") and "RESOURCE_EXHAUSTED" in oom["device"]
        bars = " ".join(page.inner_text("#policy-bars").split())
        assert NO_WAITS not in bars
        prov = " ".join(page.inner_text("#provenance").split())
        assert "Measured on a real TPU with JAX's own profiler" in prov and NO_WAITS not in prov
        check_page(page, "tpu-first-view")
