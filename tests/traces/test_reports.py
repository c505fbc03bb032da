"""Analyzing a .nsys-rep: exported beside it once (nsys's REPORT.sqlite), reused, never over a user's file
(then into profile-step's cache)."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.helpers.cli import run_cli

pytestmark = [pytest.mark.nsys, pytest.mark.shared]


@pytest.fixture
def report(shared_traces, tmp_path):
    src = shared_traces / "apma_hzy__report4.nsys-rep"
    dst = tmp_path / "run" / "report4.nsys-rep"
    dst.parent.mkdir()
    shutil.copy2(src, dst)
    return dst


def offload(doc):
    return doc["devices"]["0"]["copies"]["offload"]


def test_report_is_exported_beside_and_reused(nsys, report, shared_traces):
    proc = run_cli("analyze", "--json", "--nsys", str(nsys), str(report))
    assert proc.returncode == 0, proc.stderr
    export = report.with_suffix(".sqlite")
    assert export.is_file()
    first = export.stat().st_mtime_ns
    again = run_cli("analyze", "--json", str(report), env={"PATH": "/usr/bin:/bin"})
    assert again.returncode == 0, again.stderr
    assert export.stat().st_mtime_ns == first, "the existing export is reused, not redone"
    assert json.loads(again.stdout)["devices"] == json.loads(proc.stdout)["devices"]
    ref = run_cli("analyze", "--json", str(shared_traces / "apma_hzy__report4.sqlite"))
    assert offload(json.loads(ref.stdout)) == offload(json.loads(proc.stdout))
    assert not list(report.parent.glob(".*partial*")), "no temporary files left"


def test_users_sqlite_is_never_overwritten(nsys, report, tmp_path):
    mine = report.with_suffix(".sqlite")
    mine.write_text("my own notes, not an export")
    env = {"PROFILE_STEP_CACHE": str(tmp_path / "cache")}
    proc = run_cli("analyze", "--json", "--nsys", str(nsys), str(report), env=env)
    assert proc.returncode == 0, proc.stderr
    assert mine.read_text() == "my own notes, not an export"
    assert sorted(p.name for p in report.parent.iterdir()) == ["report4.nsys-rep", "report4.sqlite"]  # nothing beside
    made = list((tmp_path / "cache" / "exports").glob("report4.*.sqlite"))
    assert len(made) == 1
    assert json.loads(proc.stdout)["trace"]["path"] == str(made[0])


def test_read_only_folder_exports_to_cache(nsys, report, tmp_path):
    folder = report.parent
    folder.chmod(0o555)
    try:
        proc = run_cli(
            "analyze",
            "--json",
            "--nsys",
            str(nsys),
            str(report),
            env={"PROFILE_STEP_CACHE": str(tmp_path / "cache")},
        )
    finally:
        folder.chmod(0o755)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["report4.nsys-rep"]
    assert list((tmp_path / "cache" / "exports").glob("report4.*.sqlite"))
