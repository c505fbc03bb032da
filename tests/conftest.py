"""Shared fixtures: the real nsys, ../shared/traces, the browser, the H200 runs and plans (helpers: tests/helpers/)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import Phase, settings

from profiler.capture import nsys_lock, step_module
from profiler.errors import NsysNotFound
from profiler.synthetic.export import ExportBuilder
from profiler.trace.nsys import find_nsys, installed_local_nsys
from tests.helpers.browser import CHROMIUM, CHROMIUM_FLAGS
from tests.helpers.cli import run_cli
from tests.helpers.paths import AOT_HLO, ROOT, SHARED, SHARED_TRACES, SMALL_STEP, in_ci
from tests.helpers.policy_runs import AOT, STEP_NS, TSL, A, step_trace

# scripts/mutation.sh: the same examples for every mutant, no shrinking (a failure is all it needs), no database
settings.register_profile("mutation", derandomize=True, database=None, phases=[Phase.explicit, Phase.generate])
if os.environ.get("HYPOTHESIS_PROFILE"):
    settings.load_profile(os.environ["HYPOTHESIS_PROFILE"])


def pytest_sessionstart(session: pytest.Session) -> None:
    """In CI, a shared folder that is there but lacks what the tests read fails the run at once (about
    100 tests read it and would skip). A checkout with no shared folder at all skips them cleanly, in
    CI too (the project's rule: the tests run without ../shared), and says so at the end."""
    missing = [str(p) for p in (SHARED_TRACES / "CATALOG.tsv", AOT_HLO) if not p.is_file()]
    if in_ci() and missing and SHARED.is_dir():
        pytest.exit(
            f"CI must have the shared data: {', '.join(missing)} is absent (put the shared folder beside "
            "the checkout as ../shared, or set PROFILE_STEP_SHARED to it)",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )


# one nsys profile at a time across the suite's workers and other sessions on the host: profile-step's
# own captures take the lock (profiler/capture/nsys_lock.py), as does a test running nsys profile itself
os.environ.setdefault(nsys_lock.ENV, str(Path(tempfile.gettempdir()) / f"profile-step-tests-nsys-{os.getuid()}.lock"))


def pytest_configure(config: pytest.Config) -> None:
    """Each test session (each xdist worker too) its own profile-step cache, removed at its end: the
    tests never read or write the user's ``~/.cache/profile-step`` (and the commands they start
    inherit it)."""
    import tempfile

    config._profile_step_cache = tempfile.mkdtemp(prefix="profile-step-test-cache-")  # type: ignore[attr-defined]
    os.environ["PROFILE_STEP_CACHE"] = config._profile_step_cache  # type: ignore[attr-defined]


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    folder = getattr(config, "_profile_step_cache", None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: object, exitstatus: int, config: pytest.Config) -> None:
    """One line when the shared folder is absent: how many tests that would read it were skipped."""
    if SHARED.is_dir():
        return
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if "../shared" in str(r.longrepr)]  # type: ignore[attr-defined]
    terminalreporter.write_line(  # type: ignore[attr-defined]
        f"no shared data at {SHARED}: {len(skipped)} test(s) that read it were skipped (put it beside the "
        "checkout as ../shared, or set PROFILE_STEP_SHARED, to run them)"
    )


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """../shared/traces, or a clean skip where this checkout has no ../shared (see pytest_sessionstart)."""
    if not (SHARED_TRACES / "CATALOG.tsv").is_file():
        pytest.skip("../shared/traces is absent")
    return SHARED_TRACES


@pytest.fixture(scope="session")
def aot_python() -> str:
    """A Python with JAX's CUDA plugin (.venv-aot) for `profile-step plan`; missing is a failure in CI."""
    from profiler.capture.plan import AOT_VENV, has_cuda_plugin

    python = os.environ.get("PROFILE_STEP_AOT_PYTHON") or str(AOT_VENV / "bin" / "python")
    if Path(python).exists() and has_cuda_plugin(python):
        return python
    if in_ci():
        pytest.fail("CI must have .venv-aot (scripts/setup.sh --aot)")
    pytest.skip("no Python with jax[cuda12] (bash scripts/setup.sh --aot)")


@pytest.fixture(scope="session")
def qkv_plan(aot_python, tmp_path_factory) -> tuple[dict, Path]:
    """``plan --target h100 --policy offload_qkv --batch 8 --json`` of the small step, compiled once for the
    session by the real GPU compiler (test_plan_numbers and test_measured read it): its JSON and its folder
    (``offload_qkv-b8/step.hlo.txt``, ``plan.json``); read only."""
    import json

    out = tmp_path_factory.mktemp("qkv") / "plan"
    train = ROOT / "examples" / "train.py"
    proc = run_cli("plan", "--target", "h100", "--policy", "offload_qkv", "--batch", "8", "--out", str(out),
                   "--json", str(train), *SMALL_STEP, timeout=1200)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout), out


@pytest.fixture(scope="session")
def nsys() -> Path:
    """The real nsys as profile-step finds it (PATH, then set-up's 2024.2.3, then its 2023.4.4); missing is a
    failure in CI (which installs it), a skip elsewhere."""
    try:
        return find_nsys()
    except NsysNotFound as exc:
        if in_ci():
            pytest.fail(f"CI must have nsys: {exc}")
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def nsys_versions() -> dict[str, Path]:
    """Every nsys set-up installs (2024.2.3, the default, and 2023.4.4), by version; in CI all of them."""
    found = installed_local_nsys()
    if len(found) < 2:
        if in_ci():
            pytest.fail(f"CI must have both of set-up's nsys installs; found {sorted(found) or 'none'}")
        pytest.skip(f"the version matrix needs both installs of scripts/setup.sh; found {sorted(found) or 'none'}")
    return found


@pytest.fixture
def build(tmp_path: Path):
    """Write an ExportBuilder to a fresh file and return its path."""
    counter = iter(range(1_000_000))

    def _write(builder: ExportBuilder, name: str | None = None) -> Path:
        return builder.write(tmp_path / (name or f"export{next(counter)}.sqlite"))

    return _write


# --- the real H200 runs and the scanned ground truth (issue 42), each made once per session ---------

H200_RUNS = ROOT / "sample_traces" / "h200-example"


@pytest.fixture(scope="session")
def h200_exports(tmp_path_factory) -> dict[str, Path]:
    """The nsys-schema conversion of each H200 run's JAX profiler trace (in a cache of the session's own,
    not the user's), by run folder name."""
    from profiler.trace import jax_profile

    cache = tmp_path_factory.mktemp("h200-cache")
    old = os.environ.get("PROFILE_STEP_CACHE")
    os.environ["PROFILE_STEP_CACHE"] = str(cache)
    try:
        return {d.name: jax_profile.export(d / "trace.json.gz") for d in sorted(H200_RUNS.glob("2026*"))}
    finally:
        if old is None:
            os.environ.pop("PROFILE_STEP_CACHE", None)
        else:
            os.environ["PROFILE_STEP_CACHE"] = old


@pytest.fixture(scope="session")
def h200_measured(h200_exports) -> dict:
    """``predict.measured.load`` of each H200 run (its conversion and its own optimized HLO)."""
    from profiler.predict.measured import load

    out = {}
    for name, export in h200_exports.items():
        hlo = next((H200_RUNS / name / "xla_dump").glob("*after_optimizations.txt.xz"))
        out[name] = load(export, hlo=hlo)
    return out


@pytest.fixture(scope="session")
def scan_plan(aot_python, tmp_path_factory) -> Path:
    """The example's small step under ``lax.scan`` (offload_qkv, batch 8) compiled for an H100 by the real
    GPU compiler without a GPU (``plan``): its optimized HLO."""
    out = tmp_path_factory.mktemp("scan") / "plan"
    train = ROOT / "examples" / "train.py"
    proc = run_cli("plan", "--target", "h100", "--policy", "offload_qkv", "--batch", "8", "--out", str(out),
                   str(train), *SMALL_STEP, "--scan", timeout=1200)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out / "offload_qkv-b8" / "step.hlo.txt"


@pytest.fixture(scope="session")
def scanned_recordings(request, tmp_path_factory) -> dict[str, Path]:
    """Ground truth for the replays: scanned programs recorded (``tests/recordings.py``) in each form,
    ``<program>/<form>`` -> a run folder (``trace.sqlite`` + ``xla_dump/``) or an nsys-jax archive folder.
    The programs: the example's two scanned steps as XLA compiled them on the H200 (sample_traces, with
    the H200's own target for the kernels' base times), and, where .venv-aot is there, the small step
    under lax.scan compiled for an H100 without a GPU."""
    from profiler.xla.targets import TARGETS
    from tests.helpers.recordings import h200_scanned_programs, record_forms

    programs = h200_scanned_programs(H200_RUNS)
    try:
        plan = request.getfixturevalue("scan_plan")
        programs["h100-aot-scan"] = (plan.read_text(), TARGETS["h100"].spec_text())
    except pytest.skip.Exception:
        pass
    return record_forms(programs, tmp_path_factory.mktemp("scanned"))


# --- the browser (module scope: one a test module) and a plan's run folder, for any test module ---


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("CI must have chromium (scripts/setup.sh --browser)")
        pytest.skip("no chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield b
        b.close()


@pytest.fixture
def plan_run(tmp_path) -> Path:
    """A run folder: the export, a manifest, and compiled.json read from a dump of the AOT module."""
    if not AOT.is_file():
        pytest.skip("../shared/hlo is absent")
    run = tmp_path / "20260101T000000-offload_x-abc123"
    dump = run / "xla_dump"
    dump.mkdir(parents=True)
    (dump / "module_0001.jit_train_step.sm_9.0a_gpu_after_optimizations.txt").write_text(AOT.read_text())
    (dump / "module_0001.jit_train_step.sm_9.0a_gpu_after_optimizations-buffer-assignment.txt").write_text(
        "BufferAssignment:\n"
        "allocation 0: size 16777216, parameter 0, shape |f32[1024,4096]| at ShapeIndex {}, maybe-live-out:\n"
        "allocation 1: size 1048576, parameter 4, shape |f32[256,1024]| at ShapeIndex {}:\n"
        "allocation 2: size 4, maybe-live-out:\n"
        "allocation 3: size 8388608, color 5, preallocated-temp:\n"
        "allocation 4: size 50000000, preallocated-temp:\n"
        "allocation 5: size 64, constant:\n"
    )
    b = ExportBuilder()
    b.gpu(0, "NVIDIA H100 80GB HBM3")
    b.domain(1, "profile-step", tid=A)
    b.domain(TSL, "TSL", tid=A)
    for s in range(3):
        step_trace(b, s * 2 * STEP_NS, s)
    b.write(run / "trace.sqlite")
    manifest = {
        "policy": "offload_x",
        "devices": [{"id": 0, "kind": "NVIDIA H100 80GB HBM3"}],
        "runtime": {
            "model_flops_per_step": 30e9,
            "device_memory": {
                "available": True,
                "devices": [{"id": 0, "peak_bytes_in_use": 10 * 2**30, "bytes_limit": 60 * 2**30}],
            },
        },
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    step_module.record(run, dump, own_dump=False)
    return run
