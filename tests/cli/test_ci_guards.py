"""The guards that keep CI honest: in CI, a shared folder without the data the tests read fails the
run at once instead of skipping the ~100 tests that read it; with no shared folder at all those tests
skip cleanly (the project's rule), in CI too, and the run says how many."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers.paths import ROOT


def pytest_run(tmp_path, ci: bool, folder: bool = True) -> subprocess.CompletedProcess[str]:
    """pytest on one shared-data test with ../shared pointed at an empty folder (or at none)."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PROFILE_STEP_SHARED"] = str(tmp_path / "no-shared")
    if folder:
        (tmp_path / "no-shared").mkdir()
    if ci:
        env["CI"] = "true"
    test = "tests/traces/test_real_traces.py::test_catalog_counts_agree"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )


def test_ci_without_shared_data_fails_the_run(tmp_path):
    proc = pytest_run(tmp_path, ci=True)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage error: nothing ran
    assert "CI must have the shared data" in proc.stdout + proc.stderr
    assert "no-shared/traces/CATALOG.tsv" in proc.stdout + proc.stderr


def test_without_shared_data_elsewhere_the_tests_skip(tmp_path):
    proc = pytest_run(tmp_path, ci=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 skipped" in proc.stdout


def test_with_no_shared_folder_the_tests_skip_and_say_so_in_ci_too(tmp_path):
    for ci in (True, False):
        proc = pytest_run(tmp_path, ci=ci, folder=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "1 skipped" in proc.stdout
        assert f"no shared data at {tmp_path / 'no-shared'}: 1 test(s) that read it were skipped" in proc.stdout
