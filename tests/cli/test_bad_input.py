"""Bad input: one line naming the file and the problem, exit code 2, no traceback."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from profiler.synthetic.export import ExportBuilder
from tests.helpers.cli import run_cli


def assert_one_line_error(proc, path: Path, words: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert str(path) in lines[0]
    assert words in lines[0], lines[0]


def test_missing_file(tmp_path):
    path = tmp_path / "nope.sqlite"
    assert_one_line_error(run_cli("analyze", str(path)), path, "no such file")


def test_directory(tmp_path):
    # a folder is a folder of runs for analyze (the per-policy table): one without any says so
    assert_one_line_error(run_cli("analyze", str(tmp_path)), tmp_path, "holds no nsys exports or reports")


def test_not_sqlite(tmp_path):
    path = tmp_path / "notes.sqlite"
    path.write_text("hello, I am text\n" * 20)
    assert_one_line_error(run_cli("analyze", str(path)), path, "not an SQLite database")


def test_nsys_jax_archive(tmp_path):
    """An nsys-jax archive given to analyze: said to be one, and which commands read it."""
    import zipfile

    path = tmp_path / "pax_proc0.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("nvtx_gpu_proj_trace/trace.parquet", b"not really parquet")
    assert_one_line_error(run_cli("analyze", str(path)), path, "is a zip archive, not an nsys export")


def test_empty_file(tmp_path):
    path = tmp_path / "empty.sqlite"
    path.touch()
    assert_one_line_error(run_cli("analyze", str(path)), path, "is empty")


def test_sqlite_but_not_nsys(tmp_path):
    path = tmp_path / "other.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE people (name TEXT)")
    con.execute("INSERT INTO people VALUES ('ada')")
    con.commit()
    con.close()
    assert_one_line_error(run_cli("analyze", str(path)), path, "not an Nsight Systems export")


def test_truncated_export(tmp_path):
    b = ExportBuilder()
    for i in range(3000):
        b.kernel(i * 10, i * 10 + 5, f"kernel_{i % 50}")
        b.copy(i * 10, i * 10 + 8, "d2h")
    full = b.write(tmp_path / "full.sqlite")
    data = full.read_bytes()
    path = tmp_path / "cut.sqlite"
    path.write_bytes(data[: len(data) // 2])
    assert_one_line_error(run_cli("analyze", str(path)), path, "truncated")


def test_corrupt_pages(tmp_path):
    b = ExportBuilder()
    for i in range(3000):
        b.kernel(i * 10, i * 10 + 5, f"kernel_{i % 50}")
    full = b.write(tmp_path / "full.sqlite")
    data = bytearray(full.read_bytes())
    data[8192 : len(data) - 4096] = b"\xff" * (len(data) - 4096 - 8192)  # keep the header, wreck the pages
    path = tmp_path / "corrupt.sqlite"
    path.write_bytes(bytes(data))
    proc = run_cli("analyze", str(path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and str(path) in proc.stderr


def test_garbage_report(tmp_path, nsys):
    path = tmp_path / "broken.nsys-rep"
    path.write_bytes(b"NVIDIA Tegra Profiler Report 1.\n" + b"\x00garbage" * 100)
    proc = run_cli("analyze", str(path))
    assert_one_line_error(proc, path, "nsys export failed")
    assert not list(tmp_path.glob("*.sqlite")), "a failed export leaves nothing behind"


def test_cpu_only_export_is_valid(tmp_path):
    b = ExportBuilder()
    b.nvtx(0, 100, "step_0")
    path = b.write(tmp_path / "cpu.sqlite")
    proc = run_cli("analyze", "--json", str(path))
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["devices"] == {}
    proc = run_cli("analyze", str(path))
    assert proc.returncode == 0 and "No GPU activity" in proc.stdout


def test_no_nsys_for_a_report(tmp_path):
    path = tmp_path / "r.nsys-rep"
    path.write_bytes(b"NVIDIA Tegra Profiler Report 1.\n")
    proc = run_cli("analyze", "--nsys", str(tmp_path / "no-nsys"), str(path))
    assert proc.returncode == 2
    assert "install-nsys.sh" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_input_is_never_written(tmp_path):
    """A read-only export in a read-only folder: analysis works and nothing appears or changes."""
    b = ExportBuilder()
    b.kernel(0, 10, "k")
    b.copy(0, 20, "h2d")
    folder = tmp_path / "ro"
    folder.mkdir()
    path = b.write(folder / "t.sqlite")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    path.chmod(0o444)
    folder.chmod(0o555)
    try:
        proc = run_cli("analyze", "--json", str(path))
        assert proc.returncode == 0, proc.stderr
        assert sorted(p.name for p in folder.iterdir()) == ["t.sqlite"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    finally:
        folder.chmod(0o755)


@pytest.mark.parametrize("text", ["\udcff".encode("utf-8", "surrogatepass"), b"\xff\xfe bad utf8"])
def test_invalid_utf8_names(tmp_path, text):
    b = ExportBuilder()
    b.kernel(0, 10, "placeholder")
    path = b.write(tmp_path / "u.sqlite")
    con = sqlite3.connect(path)
    # stored both as TEXT holding bytes that are not UTF-8, and as a BLOB
    con.execute("UPDATE StringIds SET value = CAST(? AS TEXT) WHERE value = 'placeholder'", (text,))
    con.execute("INSERT INTO StringIds VALUES (4242, ?)", (text,))
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 4242")
    con.commit()
    con.close()
    proc = run_cli("analyze", "--json", str(path))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["devices"]["0"]["compute"]["count"] == 1


@pytest.mark.parametrize(
    "words",
    [
        ["analyze", "--json", "MISSING"],
        ["findings", "--json", "MISSING"],
        ["whatif", "--json", "MISSING"],
        ["plan", "--json", "--from", "MISSING"],
        ["pgle", "--json", "-o", "out.pbtxt", "MISSING"],
        ["tune", "--json", "MISSING"],
        ["compare", "--format", "json", "MISSING", "MISSING"],
    ],
    ids=lambda w: w[0],
)
def test_every_json_command_says_a_failing_exit_in_one_json_object(words, tmp_path, capsys):
    """With --json (compare: --format json) a failing exit prints one JSON object on stdout (``error``,
    ``exit_code``; tune's with its ``choice`` null), the same words as the line on stderr; without it
    stdout is empty."""
    from profiler.cli import main

    missing = str(tmp_path / "nope.sqlite")
    argv = [missing if w == "MISSING" else w for w in words]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc.pop("exit_code") == 2 and doc.pop("choice", None) is None
    assert list(doc) == ["error"] and missing in doc["error"]
    assert err.strip().splitlines() == [f"profile-step: error: {doc['error']}"]
    assert main([w for w in argv if w not in ("--json", "--format", "json")]) == 2
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    ("words", "error"),
    [
        (["cache", "--json", "--no-such-option"], "unrecognized arguments: --no-such-option"),
        (["analyze", "--json"], "the following arguments are required: TRACE_OR_RUNS"),
        (["whatif", "--json", "--device"], "argument --device: expected one argument"),
        (["compare", "--format=json", "--bogus", "a", "b"], "unrecognized arguments: --bogus"),
    ],
)
def test_a_usage_error_under_json_is_a_json_object_too(words, error, capsys):
    from profiler.cli import main

    with pytest.raises(SystemExit) as stop:
        main(words)
    assert stop.value.code == 2
    out, err = capsys.readouterr()
    assert json.loads(out) == {"error": error, "exit_code": 2}
    (line,) = err.strip().splitlines()  # one line: argparse's usage block is left to --help
    assert line == f"profile-step {words[0]}: error: {error} (see profile-step {words[0]} --help)"


@pytest.mark.parametrize(
    ("words", "error"),
    [
        (["--by", "banana"], "argument --by: invalid choice: 'banana'"),
        (["--step-range", "("], "argument --step-range: not a regular expression: '(' (unclosed group)"),
        (
            ["--layer-pattern", "layer_(?=\\d)"],
            "argument --layer-pattern: not a regular expression: 'layer_(?=\\\\d)' (look-around",
        ),
    ],
)
def test_a_bad_option_value_is_one_line_before_any_work(words, error):
    """A choice or a regular expression polars cannot read: one line, exit 2, before the trace is read
    (a bad --step-range failed in the middle of the analysis as an internal error, exit 3)."""
    proc = run_cli("analyze", *words, "no-such-trace.sqlite")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"profile-step analyze: error: {error}"), line
    assert line.endswith("(see profile-step analyze --help)")


def test_plan_with_a_bad_target_or_script_says_that_line_alone(tmp_path):
    """Without --policies plan names the example's policies first; a bad target or a missing script is
    said alone, before that line (a newcomer saw the policies line, then the error)."""
    from tests.helpers.paths import ROOT

    proc = run_cli("plan", "--target", "h999", str(ROOT / "examples" / "train.py"))
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "profile-step: error: unknown target 'h999': one of h100, h200, b200, a100 or a GpuTargetConfigProto text "
        "file (tpu-v5e: with plan --from a TPU recording)"
    ]
    missing = tmp_path / "nope.py"
    assert_one_line_error(run_cli("plan", str(missing)), missing, "no such training script")


@pytest.mark.parametrize("command", ["analyze", "whatif"])
def test_a_device_that_ran_nothing(tmp_path, command):
    # FlexGen's export names 8 GPUs in TARGET_INFO_GPU, two of which ran work: `--device 7` printed "no GPU
    # activity" beside a saving on GPU 1 (analyze), or "nothing to replay" with exit 0 (whatif)
    b = ExportBuilder()
    b.gpu(0)
    b.gpu(3)
    b.kernel(0, 100, "k", device=0)
    b.copy(200, 300, "h2d", 1024, device=3)
    path = tmp_path / "two.sqlite"
    b.write(path)
    assert_one_line_error(
        run_cli(command, str(path), "--device", "7"),
        path,
        "no GPU work on device 7 in this trace (devices that ran GPU work: 0, 3)",
    )
    assert run_cli(command, str(path), "--device", "3").returncode == 0


def test_device_over_a_folder_of_runs(tmp_path):
    # the per-policy table covers every device: --device there was silently ignored
    for name in ("a", "b"):
        run = tmp_path / name
        run.mkdir()
        b = ExportBuilder()
        b.kernel(0, 100, "k")
        b.write(run / "trace.sqlite")
    proc = run_cli("analyze", str(tmp_path), "--device", "0")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "profile-step: error: --device picks a GPU of one trace (or of each run, with --by); the per-policy table "
        "covers every device"
    ]
    assert run_cli("analyze", str(tmp_path / "a"), "--device", "0").returncode == 0  # one run: its one trace
