"""``profile-step tune --jobs N``: a round's candidates compiled side by side in N processes of the
script give the document of ``--jobs 1``, apart from timings and the folder; the screen (changes
predicted from the names' effects alone) leaves the choice as compiling every change would (the real
GPU compiler in .venv-aot; skips without it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from profiler.tune.search import SCREEN
from tests.helpers.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]
KNOWN = ROOT / "tests" / "scripts" / "tune_known.py"
TIMINGS = {"seconds", "compile_seconds", "batch_seconds", "jobs"}


def tune(python: str, out: Path, jobs: int, *more: str) -> dict[str, Any]:
    """tune --json of the known-answer script (NVLink-C2C, 3 GiB, presets, no record) with *jobs*."""
    args = ["tune", "--json", "--link", "nvlink-c2c", "--memory-limit", "3GiB", "--no-cache", "--jobs", str(jobs),
            "--out", str(out), "--python", python, *more, str(KNOWN)]  # fmt: skip
    proc = run_cli(*args, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def without_timings(doc: Any, out: Path) -> Any:
    """*doc* less its timings, its folder written as OUT."""
    if isinstance(doc, dict):
        return {k: without_timings(v, out) for k, v in doc.items() if k not in TIMINGS}
    if isinstance(doc, list):
        return [without_timings(v, out) for v in doc]
    if isinstance(doc, str):
        return doc.replace(str(out), "OUT")
    return doc


def test_jobs_2_gives_the_document_of_jobs_1(aot_python, tmp_path):
    one = tune(aot_python, tmp_path / "one", 1)
    two = tune(aot_python, tmp_path / "two", 2)
    assert one["search"]["jobs"] == 1 and two["search"]["jobs"] == 2
    assert one["compiles"] >= 6 and one["choice"]["placements"] == {"small": "offload", "big": "remat"}
    assert without_timings(two, tmp_path / "two") == without_timings(one, tmp_path / "one")
    assert sorted(p.name for p in (tmp_path / "two").glob("c*")) == [f"c{i:03d}" for i in range(1, two["compiles"] + 1)]
    assert (tmp_path / "two" / "script-2" / "output.log").exists() and not (tmp_path / "two" / "ahead").exists()


def test_the_screen_leaves_the_choice(aot_python, tmp_path):
    """--no-screen compiles every change of the one-change rounds: the same choice as with the screen."""
    screened = tune(aot_python, tmp_path / "screened", 2, "--no-presets")
    full = tune(aot_python, tmp_path / "full", 2, "--no-presets", "--no-screen")
    assert full["search"]["screen"] is None and full["search"]["screened_out"] == 0
    assert screened["search"]["screen"] == SCREEN
    for x in screened["search"]["screened"]:  # each predicted no faster than the best known step by the margin
        assert x["predicted_step_ns"] >= x["incumbent_step_ns"] * (1 - SCREEN)
    assert screened["compiles"] <= full["compiles"]
    assert screened["choice"]["placements"] == full["choice"]["placements"] == {"small": "offload", "big": "remat"}
    assert screened["choice"]["fingerprint"] == full["choice"]["fingerprint"]


def test_jobs_must_be_at_least_one(tmp_path):
    proc = run_cli("tune", "--jobs", "0", "--out", str(tmp_path / "t"), str(KNOWN))
    assert proc.returncode == 2 and proc.stderr.strip().endswith("--jobs: at least 1"), proc.stderr


def test_a_helper_that_never_starts_is_left_out(aot_python, tmp_path):
    """A helper process that ends before it hands a step over is left out, said once, and the search
    compiles everything in the first process: the same choice, every compile numbered."""
    import sys

    from profiler.analysis.links import HostLink, parse_link
    from profiler.capture.plan import find_python
    from profiler.capture.tune_session import CompileSession, script_command
    from profiler.predict import roofline
    from profiler.tune.compiler import Compiler
    from profiler.tune.run import names_of
    from profiler.tune.search import search
    from profiler.xla import targets

    _, spec, builtin = targets.resolve("h100")
    (tmp_path / "target.txtpb").write_text(spec)
    for d in ("script", "script-2"):
        (tmp_path / d).mkdir()
    cmd = script_command(find_python(aot_python), KNOWN, [], None, None, None, "")
    session = CompileSession(cmd, tmp_path / "target.txtpb", tmp_path / "script")
    quits = [sys.executable, "-c", "raise SystemExit(3)"]
    broken = CompileSession(quits, tmp_path / "target.txtpb", tmp_path / "script-2")
    broken.launch()
    said: list[str] = []
    with session:
        session.start()
        names = names_of(session.request({"op": "names"}))
        device = roofline.device_from_spec(spec, builtin.peak_bf16_tflops)
        link = HostLink(parse_link("nvlink-c2c"), "given", "test")
        compiler = Compiler(session, tmp_path, device, link, 3 * 2**30, helpers=[broken])
        compiler.echo = said.append
        result = search(names, compiler, budget=24, echo=lambda s: None)
        compiler.finish()
    assert result.best is not None and result.best.candidate.place() == {"small": "offload", "big": "remat"}
    left_out = [s for s in said if "helper process is left out" in s]
    assert len(left_out) == 1 and "exit 3" in left_out[0], said
    assert compiler.jobs == 1 and not any("side by side" in s for s in said)
    assert sorted(p.name for p in tmp_path.glob("c*")) == [f"c{i:03d}" for i in range(1, compiler.compiles + 1)]
