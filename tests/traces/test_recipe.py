"""The offload_overlap recipe under the real ``nsys recipe``: its parquet equals ``analyze --json``."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from profiler.cli import main as cli_main
from profiler.recipes import install as recipe_install
from profiler.recipes.mapper import report_names
from profiler.recipes.tables import flatten, report_rows
from tests.helpers.cli import free_port, run_cli
from tests.helpers.paths import ROOT
from tests.helpers.recipe import fake_install, snapshot, venv_env
from tests.helpers.training_traces import training_export

RECIPE = "offload_overlap"
STEPS = ROOT / "tests" / "scripts" / "steps.py"
# The shared originals of reports (a report's export lies beside it), and exports with
# several devices, an NCCL kernel, and dense NVTX ranges.
SHARED_REPORTS = (
    "apma_hzy__report4.nsys-rep",
    "gpu4__nsys_vectorAdd_normal_10000000__7498cc2.nsys-rep",
    "alpa__report2.nsys-rep",
    "gpubootcamp__jacobi_memcpy_nvlink_report.qdrep",
)
SHARED_EXPORTS = (
    "p2pacc__mpiV100.sqlite",
    "alcf__lineprofiling_seq_parallel_fp32-ranks8-nodes2-T1_0.sqlite",
    "aiprof__baseline_nvtx.sqlite",
)


# --- helpers ------------------------------------------------------------------------------------


def nsys_recipe(
    nsys: Path,
    inputs: Sequence[str | Path],
    out: Path,
    *more: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
):
    """``nsys recipe`` of this recipe on *inputs* (reports or folders of them), its output folder *out*."""
    return subprocess.run(
        [str(nsys), "recipe", RECIPE, "--input", *map(str, inputs), "--output", str(out), *more],
        capture_output=True,
        text=True,
        env=env or venv_env(),
        cwd=cwd,
        check=False,
        timeout=600,
    )


def output_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    """What ``nsys recipe`` printed (it passes its Python's stderr on to stdout)."""
    return [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]


def analyze_json(*args: str) -> dict[str, Any]:
    """``profile-step analyze ARGS --json``, as the CLI prints it."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main(["analyze", *args, "--json"]) == 0
    return json.loads(out.getvalue())


def read_rows(folder: Path, table: str) -> list[dict[str, Any]]:
    return pq.read_table(folder / f"{table}.parquet").to_pylist()


def json_leaves(doc: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every value of *doc* that is not an object or a list of objects, by dotted path (empty lists left out)."""
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            out.update(json_leaves(value, f"{prefix}{key}."))
        elif isinstance(value, list) and (not value or isinstance(value[0], dict)):
            continue
        else:
            out[f"{prefix}{key}"] = value
    return out


def same(a: Any, b: Any) -> bool:
    """Exactly equal: integers as integers, floats bit for bit (an integral JSON number may come back as a
    float in a column that also holds fractions), lists element by element."""
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None or isinstance(a, str):
        return a == b and type(a) is type(b)
    if isinstance(a, float) and math.isnan(a):
        return False
    return a == b


def assert_row_is(row: dict[str, Any], doc: dict[str, Any], keys: set[str], where: str) -> None:
    """The row holds exactly the numbers of *doc* (plus its key columns), value by value."""
    leaves = json_leaves(doc)
    for path, value in leaves.items():
        assert path in row, f"{where}: column {path} missing"
        assert same(row[path], value), f"{where}: {path} = {row[path]!r}, analyze --json says {value!r}"
    extra = {c for c, v in row.items() if v is not None and c not in leaves and c not in keys}
    assert not extra, f"{where}: columns not in analyze --json: {sorted(extra)}"


def assert_recipe_equals_analyze(out: Path, inputs: list[str]) -> None:
    """Every table row of every input against ``analyze --json`` and its ``--by layer`` / ``--by step`` views."""
    names = report_names(inputs)
    tables = {t: read_rows(out, t) for t in ("reports", "devices", "devices_streams", "layers", "steps")}
    kernels = read_rows(out, "layers_top_kernels") if (out / "layers_top_kernels.parquet").is_file() else []
    findings = {t: read_rows(out, t) for t in ("findings", "findings_skipped") if (out / f"{t}.parquet").is_file()}
    assert sorted(r["file"] for r in tables["reports"]) == sorted(names.values())
    for path in inputs:
        name = names[path]
        plain, by_layer, by_step = (
            analyze_json(path),
            analyze_json(path, "--by", "layer"),
            analyze_json(path, "--by", "step"),
        )
        mine = {t: [r for r in rows if r["file"] == name] for t, rows in tables.items()}
        (report,) = mine["reports"]
        trace = {k: v for k, v in plain["trace"].items() if k != "gpus"}
        summary = {k: v for k, v in by_step["steps"].items() if k not in ("steps", "excluded")}
        assert_row_is(
            report,
            {"trace": trace, "findings": plain["findings"], "attribution": by_layer["attribution"], "steps": summary},
            {"file", "rank", "input"},
            f"{name} report",
        )
        for table, entries in (("findings", "findings"), ("findings_skipped", "skipped")):
            rows = [r for r in findings.get(table, []) if r["file"] == name]
            assert len(rows) == len(plain["findings"][entries]), (name, table)
            for row, entry in zip(sorted(rows, key=lambda r: r["position"]), plain["findings"][entries], strict=True):
                assert_row_is(row, entry, {"file", "rank", "position"}, f"{name} {table} {row['position']}")
        assert [r["device"] for r in mine["devices"]] == list(plain["devices"])
        for row, (dev, d) in zip(mine["devices"], plain["devices"].items(), strict=True):
            assert row["gpu"] == plain["trace"]["gpus"].get(dev)
            assert_row_is(row, d, {"file", "rank", "device", "gpu"}, f"{name} device {dev}")
            streams = [r for r in mine["devices_streams"] if r["device"] == dev]
            assert len(streams) == len(d["streams"])
            for s in d["streams"]:
                (row_s,) = [r for r in streams if r["stream"] == s["stream"]]
                assert_row_is(row_s, s, {"file", "rank", "device", "position"}, f"{name} stream {s['stream']}")
        assert len(mine["layers"]) == len(by_layer["layers"])
        for row, layer in zip(mine["layers"], by_layer["layers"], strict=True):
            assert (row["name"], row["device"]) == (layer["name"], layer["device"])
            body = {k: v for k, v in layer.items() if k not in ("name", "device")}
            assert_row_is(row, body, {"file", "rank", "name", "device"}, f"{name} layer {layer['name']}")
            top = [k for k in kernels if (k["file"], k["layer"], k["device"]) == (name, layer["name"], layer["device"])]
            assert len(top) == len(layer["top_kernels"])
            for k, t in zip(sorted(top, key=lambda k: k["position"]), layer["top_kernels"], strict=True):
                assert_row_is(k, t, {"file", "rank", "layer", "device", "position"}, f"{name} top kernel")
        expected_steps = [
            (s, dev, c) for s in by_step["steps"]["steps"] for dev, c in (s["devices"] or {None: {}}).items()
        ]
        assert len(mine["steps"]) == len(expected_steps)
        for row, (step, dev, copies) in zip(mine["steps"], expected_steps, strict=True):
            assert (row["name"], row["device"]) == (step["name"], dev)
            body = {**{k: v for k, v in step.items() if k not in ("name", "devices")}, "copies": copies}
            assert_row_is(row, body, {"file", "rank", "name", "device"}, f"{name} step {step['name']}")


def assert_input_untouched(folder: Path, before: dict[str, tuple[int, int]]) -> None:
    assert {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()} == before


# --- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recipe_nsys(nsys: Path, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The real nsys with the recipe installed as set-up does (``profile-step install-recipe``), and the
    environment to run it in; into a folder for $NSYS_RECIPE_PATH if that nsys is read-only."""
    proc = run_cli("install-recipe", "--nsys", str(nsys))
    if proc.returncode == 0:
        return nsys, venv_env()
    assert "read-only" in proc.stderr, proc.stderr
    folder = tmp_path_factory.mktemp("recipes")
    proc = run_cli("install-recipe", "--nsys", str(nsys), "--into", str(folder))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return nsys, venv_env(NSYS_RECIPE_PATH=str(folder))


@pytest.fixture(scope="module")
def rank_exports(tmp_path_factory) -> Path:
    """A folder of two rank exports shaped like profiled training runs (layers, steps, copies)."""
    folder = tmp_path_factory.mktemp("ranks")
    training_export(exposed={1: 30_000}).write(folder / "report.0.sqlite")
    training_export(exposed={0: 50_000, 2: 10_000}, step_jitter=(0, 2_500_000, 0, 0)).write(folder / "report.1.sqlite")
    return folder


# --- pure parts -----------------------------------------------------------------------------------


def test_flatten_keeps_json_paths_and_splits_lists_of_objects():
    flat, children = flatten({"a": {"b": 1, "c": [1, 2], "d": []}, "e": [{"x": 1}], "f": None})
    assert flat == {"a.b": 1, "a.c": [1, 2], "f": None}
    assert children == {"e": [{"x": 1}]}


def test_new_numeric_keys_flow_through_as_columns():
    """A key analyze --json gains (stalls, contexts) becomes a column with no change to the recipe."""
    device = {
        "span_ns": 5,
        "stalls": {"waits": {"total": 3}},
        "copies": {"h2d": {"contexts": {"alone": {"gbps": 1.5}}}},
    }
    rows = report_rows({"file": "r", "rank": None}, {"trace": {}, "devices": {"0": device}}, {}, {})
    (row,) = rows["devices"]
    assert row["stalls.waits.total"] == 3 and row["copies.h2d.contexts.alone.gbps"] == 1.5


def test_report_names_are_unique():
    names = report_names(
        ["r/a/trace.sqlite", "r/b/trace.sqlite", "c/report.3.nsys-rep", "d/x.sqlite", "d/x.nsys-rep", "e/x.qdrep"]
    )
    assert names == {
        "r/a/trace.sqlite": "a",  # run folders: their names
        "r/b/trace.sqlite": "b",
        "c/report.3.nsys-rep": "report.3",
        "d/x.sqlite": "x.sqlite",
        "d/x.nsys-rep": "x.nsys-rep",
        "e/x.qdrep": "x.qdrep",
    }


# --- installing -----------------------------------------------------------------------------------


@pytest.mark.nsys
def test_nsys_lists_the_installed_recipe(recipe_nsys):
    nsys, env = recipe_nsys
    if "NSYS_RECIPE_PATH" in env:
        pytest.skip("this nsys is read-only: the recipe runs from NSYS_RECIPE_PATH, which nsys does not list")
    proc = subprocess.run([str(nsys), "recipe", "--help"], capture_output=True, text=True, env=env, check=False)
    assert f"  {RECIPE} -- Host-Offload Copy Overlap (profile-step)" in proc.stdout


@pytest.mark.nsys
def test_install_recipe_into_a_folder_is_idempotent_and_keeps_foreign_folders(nsys, tmp_path):
    for _ in range(2):
        proc = run_cli("install-recipe", "--nsys", str(nsys), "--into", str(tmp_path))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"NSYS_RECIPE_PATH={tmp_path}" in proc.stdout
    files = sorted(p.name for p in (tmp_path / RECIPE).iterdir())
    assert files == sorted([*recipe_install.RECIPE_FILES, recipe_install.MARKER])
    info = json.loads((tmp_path / RECIPE / "install.json").read_text())
    assert Path(info["project_root"]) == ROOT and info["python_version"] == "{}.{}".format(*sys.version_info[:2])
    foreign = tmp_path / "other" / RECIPE
    foreign.mkdir(parents=True)
    (foreign / "mine.txt").write_text("keep me")
    proc = run_cli("install-recipe", "--nsys", str(nsys), "--into", str(tmp_path / "other"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "is not a profile-step install; not replaced" in proc.stderr
    assert (foreign / "mine.txt").read_text() == "keep me"


@pytest.mark.nsys
def test_install_recipe_without_recipe_framework_is_one_line(nsys, tmp_path):
    proc = run_cli("install-recipe", "--nsys", str(fake_install(tmp_path, nsys, framework=False)))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "has no recipe framework" in proc.stderr


@pytest.mark.nsys
def test_install_recipe_into_read_only_nsys_says_what_to_do(nsys, tmp_path):
    wrapper = fake_install(tmp_path, nsys, framework=True)
    recipes = wrapper.parent / "python" / "packages" / "nsys_recipe" / "recipes"
    recipes.chmod(0o555)
    try:
        proc = run_cli("install-recipe", "--nsys", str(wrapper))
    finally:
        recipes.chmod(0o755)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "read-only" in proc.stderr and "--into DIR" in proc.stderr and "NSYS_RECIPE_PATH" in proc.stderr
    assert not (recipes / RECIPE).exists()


# --- the recipe's numbers ---------------------------------------------------------------------------


@pytest.mark.nsys
@pytest.mark.shared
def test_recipe_on_shared_reports_equals_analyze_json(recipe_nsys, shared_traces, tmp_path):
    """Real reports and exports, all in one `nsys recipe` run (several reports, several devices)."""
    nsys, env = recipe_nsys
    before = snapshot(shared_traces)
    inputs = [str(shared_traces / n) for n in (*SHARED_REPORTS, *SHARED_EXPORTS)]
    out = tmp_path / "out"
    proc = nsys_recipe(nsys, inputs, out, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"Generated:\n    {out}" in proc.stdout
    assert_input_untouched(shared_traces, before)
    assert_recipe_equals_analyze(out, inputs)
    devices = read_rows(out, "devices")
    assert len([r for r in devices if r["file"] == "p2pacc__mpiV100"]) == 4  # 4 GPUs in one export
    assert any(r["nccl.count"] for r in devices)
    analysis = json.loads((out / "out.nsys-analysis").read_text())
    assert analysis["RecipeName"] == RECIPE and analysis["InputFiles"] == inputs and not analysis["FailedFiles"]
    assert analysis["Outputs"][f"{RECIPE}.ipynb"] == "Notebook"


@pytest.mark.nsys
def test_recipe_on_a_folder_of_ranks_equals_analyze_json(recipe_nsys, rank_exports, tmp_path):
    """Layers, steps and top kernels per rank, from a folder given as the input; ranks from file names."""
    nsys, env = recipe_nsys
    out = tmp_path / "out"
    proc = nsys_recipe(nsys, [rank_exports], out, "--csv", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    inputs = sorted(str(p) for p in rank_exports.glob("*.sqlite"))
    assert_recipe_equals_analyze(out, inputs)
    layers = read_rows(out, "layers")
    assert {(r["file"], r["rank"]) for r in layers} == {("report.0", 0), ("report.1", 1)}
    exposed = {(r["rank"], r["name"]): r["copies.offload.exposed_ns"] for r in layers}
    assert exposed[(0, "1")] == 4 * 30_000 and exposed[(1, "0")] == 4 * 50_000 and exposed[(0, "0")] == 0
    steps = read_rows(out, "steps")
    assert [r["excluded"] for r in steps if r["rank"] == 1][1].startswith("outlier")
    assert (out / "layers.csv").is_file()


@pytest.mark.nsys
def test_recipe_notebook_runs_on_its_outputs(recipe_nsys, rank_exports, tmp_path, monkeypatch):
    """The notebook's code cells, run in order in the output folder, work on what the recipe wrote."""
    nsys, env = recipe_nsys
    out = tmp_path / "out"
    proc = nsys_recipe(nsys, [rank_exports], out, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    notebook = json.loads((out / f"{RECIPE}.ipynb").read_text())
    monkeypatch.chdir(out)
    scope: dict[str, Any] = {}
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), f"{RECIPE}.ipynb", "exec"), scope)
    assert list(scope["per_layer"].index) == ["0", "1", "2"]
    assert scope["per_layer"].loc["1", "report.0"] == 4 * 30_000


@pytest.mark.nsys
def test_recipe_dask_futures_mode_gives_the_same_tables(recipe_nsys, rank_exports, tmp_path):
    nsys, env = recipe_nsys
    runs = {}
    for mode in ("concurrent", "dask-futures"):
        out = tmp_path / mode
        proc = nsys_recipe(nsys, [rank_exports], out, "--mode", mode, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        runs[mode] = {t: read_rows(out, t) for t in ("reports", "devices", "layers", "steps")}
        assert json.loads((out / f"{mode}.nsys-analysis").read_text())["Mode"] == mode
    assert runs["concurrent"] == runs["dask-futures"]


@pytest.mark.nsys
def test_recipe_on_an_existing_dask_cluster(recipe_nsys, rank_exports, tmp_path):
    """A scheduler and a worker of our own (nsys's packages on the worker's path, as the README says),
    named by Dask's DASK_SCHEDULER_ADDRESS."""
    nsys, env = recipe_nsys
    packages = nsys.resolve().parent / "python" / "packages"
    address = f"tcp://127.0.0.1:{free_port()}"
    dask = str(Path(sys.prefix) / "bin" / "dask")
    log = (tmp_path / "cluster.log").open("w")
    scheduler = subprocess.Popen(
        [dask, "scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1], "--no-dashboard"],
        stdout=log,
        stderr=log,
    )
    worker = subprocess.Popen(
        [dask, "worker", address, "--nworkers", "1", "--nthreads", "1", "--no-dashboard"],
        env={**env, "PYTHONPATH": str(packages)},
        stdout=log,
        stderr=log,
    )
    try:
        out = tmp_path / "out"
        run_env = {**env, "DASK_SCHEDULER_ADDRESS": address}
        proc = nsys_recipe(nsys, [rank_exports], out, "--mode", "dask-futures", env=run_env)
        assert proc.returncode == 0, proc.stdout + proc.stderr + (tmp_path / "cluster.log").read_text()[-3000:]
        assert {r["rank"] for r in read_rows(out, "reports")} == {0, 1}
        assert "Starting Worker plugin" in (tmp_path / "cluster.log").read_text()  # the work ran on our worker
    finally:
        for p in (worker, scheduler):
            p.terminate()
            p.wait(timeout=30)
        log.close()


@pytest.mark.nsys
def test_recipe_on_a_captured_report_equals_analyze_json(recipe_nsys, tmp_path):
    """A report profile-step captured with the real nsys (on the CPU: steps and layers, no GPU ops)."""
    nsys, env = recipe_nsys
    runs = tmp_path / "runs"
    proc = run_cli("--runs-dir", str(runs), "--nsys", str(nsys), str(STEPS), "--steps", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = [p for p in runs.iterdir() if p.is_dir()]
    report = run / "trace.nsys-rep"
    out = tmp_path / "out"
    proc = nsys_recipe(nsys, [report], out, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_recipe_equals_analyze(out, [str(report)])
    steps = read_rows(out, "steps")
    assert [r["name"] for r in steps] == ["step=0", "step=1", "step=2"] and {r["device"] for r in steps} == {None}
    assert [r["name"] for r in read_rows(out, "layers")] == ["0", "1"]
    assert read_rows(out, "devices") == []


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.nsys
def test_recipe_unreadable_report_is_one_line(recipe_nsys, tmp_path):
    nsys, env = recipe_nsys
    bad = tmp_path / "broken.nsys-rep"
    bad.write_bytes(b"not a report at all\n" * 10)
    out = tmp_path / "out"
    proc = nsys_recipe(nsys, [bad], out, env=env)
    assert proc.returncode != 0
    errors = output_lines(proc)
    assert len(errors) == 1 and errors[0].startswith(f"ERROR: {bad}: nsys export failed"), errors
    assert not out.exists()
    missing = nsys_recipe(nsys, [tmp_path / "nope.sqlite"], out, env=env)
    assert missing.returncode != 0
    assert output_lines(missing) == [f"ERROR: {tmp_path / 'nope.sqlite'}: no such file"]


@pytest.mark.nsys
def test_recipe_keeps_readable_reports_when_one_fails(recipe_nsys, rank_exports, tmp_path):
    nsys, env = recipe_nsys
    bad = tmp_path / "report.7.sqlite"
    bad.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    good = rank_exports / "report.0.sqlite"
    out = tmp_path / "out"
    proc = nsys_recipe(nsys, [good, bad], out, env=env)
    assert proc.returncode == 1
    errors = output_lines(proc)
    assert len(errors) == 2 and errors[0].startswith(f"ERROR: {bad}:"), errors
    assert errors[1].startswith("ERROR: 1 of 2 reports could not be read")
    assert {r["file"] for r in read_rows(out, "reports")} == {"report.0"}
    assert list(json.loads((out / "out.nsys-analysis").read_text())["FailedFiles"]) == [str(bad)]


@pytest.mark.nsys
def test_recipe_in_a_python_without_the_framework_packages_fails_clearly(recipe_nsys, rank_exports, tmp_path):
    """A bare Python first on PATH: nsys's framework says which package is missing and exits non-zero."""
    nsys, env = recipe_nsys
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    proc = nsys_recipe(
        nsys,
        [rank_exports],
        tmp_path / "out",
        env={**env, "PATH": f"{bare / 'bin'}{os.pathsep}{env['PATH']}"},
        cwd=tmp_path,
    )
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "No module named" in text and "must be installed" in text


def without_pythonpath(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without PYTHONPATH, which would make profile-step importable from any Python."""
    return {k: v for k, v in env.items() if k != "PYTHONPATH"}


def python_with_recipe_packages_only(tmp_path: Path) -> Path:
    """A Python of this version that imports numpy, pandas, psutil and pyarrow (this environment's
    site-packages through a .pth line) but not profile-step (whose editable hook is not processed)."""
    other = tmp_path / "other-python"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(other)], check=True)
    (site,) = (other / "lib").glob("python*/site-packages")
    import site as site_module

    (site / "recipe-packages.pth").write_text("\n".join(site_module.getsitepackages()) + "\n")
    probe = subprocess.run(
        [other / "bin" / "python3", "-c", "import pandas, pyarrow, psutil, numpy\nimport profiler"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        env=without_pythonpath(os.environ),
    )
    assert "No module named 'profiler'" in probe.stderr, probe.stderr
    return other / "bin"


@pytest.mark.nsys
def test_recipe_finds_profile_step_from_another_python_through_install_json(recipe_nsys, rank_exports, tmp_path):
    nsys, env = recipe_nsys
    other = python_with_recipe_packages_only(tmp_path)
    out = tmp_path / "out"
    run_env = {**without_pythonpath(env), "PATH": f"{other}{os.pathsep}{env['PATH']}"}
    proc = nsys_recipe(nsys, [rank_exports], out, env=run_env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {r["rank"] for r in read_rows(out, "reports")} == {0, 1}


@pytest.mark.nsys
def test_recipe_without_profile_step_is_one_line(recipe_nsys, rank_exports, tmp_path):
    """profile-step shadowed by a package that cannot be imported: one line that says how to run it."""
    nsys, env = recipe_nsys
    blocker = tmp_path / "blocker" / "profiler"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('profile-step is not here')\n")
    proc = nsys_recipe(
        nsys,
        [rank_exports],
        tmp_path / "out",
        env={**env, "PYTHONPATH": str(blocker.parent)},
        cwd=tmp_path,
    )
    assert proc.returncode != 0
    errors = output_lines(proc)
    assert len(errors) == 1, errors
    assert "cannot import profile-step (profile-step is not here)" in errors[0]
    assert f"PATH={Path(sys.prefix) / 'bin'}:$PATH nsys recipe {RECIPE}" in errors[0]
    assert not (tmp_path / "out").exists()
