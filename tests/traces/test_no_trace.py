"""A policy that ends without a trace: one retry when nsys loses its agent or its importer crashes,
exit code 4 after every policy has run, nsys's own output in the run's log and never on the terminal
(one line of profile-step says what failed, that it was retried, where the raw capture and the log
are), and analyze (text and --json), findings and the dashboard list the run once, with its reason,
and go on with the others.

nsys loses its agent, or its importer crashes, only under load, never on demand, so
``tests/scripts/nsys_loses_agent.sh`` and ``nsys_import_fails.sh`` stand in for it in those two
failures (they print nsys's own messages, write no report and exit 0); every other call goes to the
real nsys.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dashboards.app import all_rows
from dashboards.data import RunStore
from profiler.stored import no_trace
from tests.helpers.cli import run_cli
from tests.helpers.paths import ROOT

STEPS = ROOT / "tests" / "scripts" / "steps.py"
FAKE = ROOT / "tests" / "scripts" / "nsys_loses_agent.sh"
IMPORT_FAILS = ROOT / "tests" / "scripts" / "nsys_import_fails.sh"
LOST = "Connection to Agent lost. This is most likely a bug. Internal reason: 'End of file'."
WIDE = 160  # no line of profile-step's own terminal output is wider


def nsys_lines(run: Path) -> set[str]:
    """The lines of the run's logs that nsys wrote: every non-blank line but steps.py's own."""
    out = set()
    for log in run.glob("output*.log"):
        for line in log.read_text().splitlines():
            line = line.split("\r")[-1].rstrip()
            if line.strip() and not line.startswith(("step ", "READY")):
                out.add(line)
    return out


def terminal_problems(proc, runs: Path) -> list[str]:
    """Lines of nsys's own on the terminal, and lines over ``WIDE`` columns."""
    said = (proc.stdout + proc.stderr).splitlines()
    theirs = set().union(*(nsys_lines(d) for d in runs.iterdir()))
    assert theirs, "the logs hold nsys's output"
    return [f"nsys's: {ln}" for ln in said if ln.rstrip() in theirs] + [
        f"{len(ln)} columns: {ln}" for ln in said if len(ln) > WIDE
    ]


def unwrapped(text: str) -> str:
    """Terminal output with its wrapped lines joined (a wrapped line goes on indented)."""
    return " ".join(ln.strip() for ln in text.splitlines())


def manifests(runs: Path) -> dict[str, tuple[Path, dict]]:
    out = {}
    for d in sorted(runs.iterdir()):
        man = json.loads((d / "manifest.json").read_text())
        out[man["policy"]] = (d, man)
    return out


@pytest.fixture(scope="module")
def lost_b(nsys, tmp_path_factory) -> tuple[Path, object]:
    """Policies b then a; nsys loses its agent on every capture of b (the retry too)."""
    runs = tmp_path_factory.mktemp("lost") / "runs"
    proc = run_cli(
        "--policies", "b,a", "--runs-dir", str(runs), "--nsys", str(FAKE), "--no-summary", str(STEPS),
        env={"REAL_NSYS": str(nsys), "LOSE_AGENT_POLICY": "b"},
    )  # fmt: skip
    return runs, proc


@pytest.mark.nsys
def test_lost_agent_is_retried_once_and_the_retry_kept(nsys, tmp_path):
    count = tmp_path / "count"
    proc = run_cli(
        "--policy", "p", "--runs-dir", str(tmp_path / "runs"), "--nsys", str(FAKE), "--no-summary", str(STEPS),
        env={"REAL_NSYS": str(nsys), "LOSE_AGENT_COUNT_FILE": str(count), "LOSE_AGENT_TIMES": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert count.read_text().strip() == "1"
    assert proc.stderr.count("retrying once") == 1
    said = f"profile-step: policy p: nsys lost its agent ({LOST}); retrying once (nsys's output: output.attempt1.log)"
    assert said in unwrapped(proc.stderr)
    run, man = manifests(tmp_path / "runs")["p"]
    assert man["status"] == "ok" and (run / "trace.sqlite").is_file()
    assert man["retried"] == {"reason": f"nsys lost its agent ({LOST})", "first_log": no_trace.FIRST_ATTEMPT_LOG}
    assert LOST in (run / no_trace.FIRST_ATTEMPT_LOG).read_text()
    assert LOST not in (run / "output.log").read_text()
    assert no_trace.NO_TRACE_KEY not in man
    assert "policy=p" in (run / "output.log").read_text()  # the script ran on the retry


@pytest.mark.nsys
def test_exit_code_says_a_policy_ended_without_a_trace(lost_b):
    runs, proc = lost_b
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "profile-step: 1 of 2 policies ended without a trace (b): exit 4" in proc.stderr
    found = manifests(runs)
    # b once, not in a loop; a goes to the real nsys, which under load may lose its agent too (seen in
    # CI): then its retry is said and recorded like any other
    a_retried = "retried" in found["a"][1]
    assert proc.stderr.count("retrying once") == 1 + a_retried, proc.stderr
    assert unwrapped(proc.stderr).count("policy b: nsys lost its agent") == 1, proc.stderr
    assert set(found) == {"a", "b"}  # a ran after b failed
    run_b, man_b = found["b"]
    assert man_b["status"] == "no-trace" and man_b["exit_code"] == 0
    assert man_b[no_trace.NO_TRACE_KEY] == f"nsys lost its agent and wrote no report, on the retry too ({LOST})"
    assert f"== policy b: no-trace (exit 0) -> {run_b}" in proc.stdout
    assert f"no trace: {man_b[no_trace.NO_TRACE_KEY]} nsys's output: {run_b / 'output.log'}" in unwrapped(proc.stdout)
    assert (found["a"][0] / "trace.sqlite").is_file()
    # policy a ran under the real nsys: its progress bars and report paths stay in its log
    assert terminal_problems(proc, runs) == []


@pytest.fixture(scope="module")
def import_fails(nsys, tmp_path_factory) -> tuple[Path, object]:
    """Policy b; nsys's importer crashes on every capture of it (the retry too)."""
    runs = tmp_path_factory.mktemp("import") / "runs"
    proc = run_cli(
        "--policy", "b", "--runs-dir", str(runs), "--nsys", str(IMPORT_FAILS), str(STEPS),
        env={"REAL_NSYS": str(nsys), "IMPORT_FAILS_POLICY": "b"},
    )  # fmt: skip
    return runs, proc


@pytest.mark.nsys
def test_importer_crash_is_one_line_retried_with_the_raw_capture_kept(import_fails):
    runs, proc = import_fails
    assert proc.returncode == 4, proc.stdout + proc.stderr
    (run,) = runs.iterdir()
    man = json.loads((run / "manifest.json").read_text())
    # the importer's status and ErrorText up to its first "\n" and colon, cut to 64 characters: the first 61
    # ("Importation failed: " is 20, "Wrong event order has been detected when " 41) and "..."
    what = "Importation failed: Wrong event order has been detected when ..."
    assert man["retried"]["reason"] == f"nsys's importer failed ({what})"
    assert man[no_trace.NO_TRACE_KEY] == f"nsys's importer failed and wrote no report, on the retry too ({what})"
    assert proc.stderr.count("retrying once") == 1
    said = (
        f"profile-step: policy b: nsys's importer failed ({what}); retrying once (nsys's output: output.attempt1.log)"
    )
    assert said in unwrapped(proc.stderr)
    lines = proc.stdout.splitlines()
    assert f"no trace: {man[no_trace.NO_TRACE_KEY]}" in unwrapped(proc.stdout)
    assert f"nsys's output: {run / 'output.log'}; its raw capture: {run / 'trace.qdstrm'}" in unwrapped(proc.stdout)
    assert (run / "trace.qdstrm").is_file() and (run / no_trace.FIRST_ATTEMPT_LOG).is_file()
    assert "Import Failed with unexpected exception" in (run / "output.log").read_text()  # nsys's words: in the log
    assert lines.count("step 2 done policy=b") == 2  # the script's own lines reach the terminal, on each attempt
    assert terminal_problems(proc, runs) == []
    # an older manifest's reason ("...; last output: }") is said again from the log
    old = {**man, no_trace.NO_TRACE_KEY: "nsys exited without writing a report; last output: }"}
    assert no_trace.reason(run, old) == man[no_trace.NO_TRACE_KEY]
    assert no_trace.reason(run, {"status": "no-trace", "exit_code": 0}).startswith("nsys's importer failed")


@pytest.mark.nsys
def test_analyze_lists_the_run_once_and_goes_on(lost_b):
    runs, _ = lost_b
    found = manifests(runs)
    folders = [str(found["b"][0]), str(found["a"][0])]  # as `analyze runs/*` expands
    for args in (folders, [str(runs)]):
        proc = run_cli("analyze", "--json", *args)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)  # the whole stdout is one JSON document
        assert [r["policy"] for r in doc["policies"]["rows"]] == ["a"]
        assert doc["no_trace"] == [
            {
                "run_dir": str(found["b"][0]),
                "policy": "b",
                "status": "no-trace",
                "reason": found["b"][1]["no_trace_reason"],
            }
        ]
        text = run_cli("analyze", *args)
        assert text.returncode == 0, text.stderr
        assert text.stdout.count(str(found["b"][0])) == 1
        assert f"{found['b'][0]} (policy b): no trace: nsys lost its agent" in text.stdout
    alone = run_cli("analyze", "--json", str(found["b"][0]))
    assert alone.returncode == 2 and json.loads(alone.stdout)["policies"] is None
    assert alone.stderr.splitlines()[-1] == "profile-step: error: none of these runs has a trace"
    fnd = run_cli("findings", "--json", str(runs))
    assert fnd.returncode == 0, fnd.stderr
    assert [d["policy"] for d in json.loads(fnd.stdout)["runs"]] == ["a"]
    assert [d["policy"] for d in json.loads(fnd.stdout)["no_trace"]] == ["b"]


@pytest.mark.nsys
def test_dashboard_lists_the_run_once_without_error_cards(lost_b):
    runs, _ = lost_b
    store = RunStore([runs])
    store.warm_up().join(timeout=300)
    assert store.errors == {}  # no error card, in any view
    done, total, _ = store.progress()
    assert done == total == 2
    rows = all_rows(store)
    b_rows = [r for r in rows if r["status"] == "no trace"]
    assert len(b_rows) == 1 and b_rows[0]["policy"] == "b"
    assert "nsys lost its agent" in b_rows[0]["device"]
    assert [r["policy"] for r in rows if r["status"] != "no trace"] == ["a"]


def test_a_run_killed_before_nsys_finished(tmp_path):
    """A run folder with only its manifest (profile-step was killed): its reason, without nsys at all."""
    run = tmp_path / "runs" / "20261201T000000-x-abcdef"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"tool": "profile-step", "policy": "x", "status": "running"}))
    (run / "output.log").write_text("step 0 done policy=x\n[1/2] [====   50%] trace.nsys-rep\n")
    reason = "the capture never finished (profile-step was stopped before nsys wrote a report)"
    assert no_trace.reason(run, json.loads((run / "manifest.json").read_text())) == (
        f"{reason}; last output: step 0 done policy=x"
    )
    proc = run_cli("analyze", str(tmp_path / "runs"))
    assert proc.returncode == 2
    assert f"{run} (policy x): no trace: {reason}" in proc.stderr
    (ref,) = RunStore([tmp_path / "runs"]).refs.values()
    assert ref.no_trace.startswith(reason)


def test_raw_capture_is_found_while_nsys_removes_its_session_folders(tmp_path, monkeypatch):
    """nsys's daemon may still be removing ``quadd_session_*`` folders from nsys's temporary folder
    when profile-step looks there for a raw capture (seen in the fresh-clone CI: FileNotFoundError,
    an internal error, exit 3): a folder that vanishes while walked is skipped."""
    import os
    import shutil

    nsys_tmp = tmp_path / "nsys-tmp" / "nvidia" / "nsight_systems"
    gone = nsys_tmp / "quadd_session_102883"
    gone.mkdir(parents=True)
    (gone / "socket").write_text("")
    (nsys_tmp / "report1.qdstrm").write_text("raw")
    run = tmp_path / "run"
    run.mkdir()
    scandir = os.scandir

    def removed_meanwhile(path):  # the daemon removes the folder between listing and reading it
        if not isinstance(path, int) and Path(path).name == gone.name and gone.exists():
            shutil.rmtree(gone)
        return scandir(path)

    monkeypatch.setattr(os, "scandir", removed_meanwhile)
    kept = no_trace.keep_raw_capture(run, tmp_path / "nsys-tmp")
    assert kept == run / "trace.qdstrm" and kept.read_text() == "raw"


def test_generated_with_no_file_is_an_importer_failure_worth_a_retry(tmp_path):
    """Seen under load with nsys 2024.2.3 beside another nsys (the fresh suite on two workers): the
    report's progress bar reached 100% with no newline, then ``Generated:`` and nothing, no report, exit 0.
    That is nsys's failure (retried once), not the script's; a log that lists its files after
    ``Generated:`` is not."""
    bar = "".join(f"\r[1/2] [{p}%{' ' * 20}] trace.nsys-rep" for p in (0, 8, 46, 100))
    seen = f"step 1: loss 6.4333 (2.1 ms)\nGenerating '/tmp/nsys-report-f8d2.qdstrm'\n{bar}Generated:\n"
    run = tmp_path / "run"
    run.mkdir()
    (run / "output.log").write_text(seen)
    assert no_trace.nsys_failure(run, 0) == "nsys's importer failed (it said Generated: and listed no file)"
    assert no_trace.describe(run, "no-trace", 0) == (
        "nsys's importer failed and wrote no report (it said Generated: and listed no file)"
    )
    (run / "output.log").write_text(seen + f"    {run / 'trace.nsys-rep'}\n")  # listed, then lost: not this
    assert no_trace.nsys_failure(run, 0) is None
