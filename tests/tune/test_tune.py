"""``profile-step tune`` on a step whose answer is known by construction (tests/scripts/tune_known.py),
with the real GPU compiler in .venv-aot (skips without it, as test_compiled_step).

The script's docstring derives the answer by hand from the H100's peaks and the links' bandwidths:
``small`` (64 MiB a layer, 0.83 ms of matmuls to recompute) hides its copies on NVLink-C2C but not on
PCIe Gen5; ``big`` (512 MiB a layer, elementwise) is always cheaper to recompute than to move.
Under a 3 GiB limit neither fits on the device (keeping every ``small`` adds 1 GiB to the
2.35 GiB of the step that recomputes everything); under 16 GiB the smalls fit and the bigs (8 GiB)
do not.  One script process compiles every candidate once; the searches on several links and
limits share those compiles (the compile cache), so the module costs about ten compiles.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profiler.analysis.links import HostLink, parse_link
from profiler.capture.plan import find_python
from profiler.capture.tune_session import CompileSession, script_command
from profiler.capture.xla_flags import COST_MODEL_STATS
from profiler.predict import roofline, schedule
from profiler.report.tune_text import render_tune
from profiler.tune import forms
from profiler.tune.candidate import Candidate, Name
from profiler.tune.compiler import Compiler
from profiler.tune.run import evaluate_presets, kept_presets, names_of
from profiler.tune.search import best_of, search
from profiler.xla import targets
from tests.helpers.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]
KNOWN = ROOT / "tests" / "scripts" / "tune_known.py"
GiB, MiB = 2**30, 2**20


@pytest.fixture(scope="module", autouse=True)
def own_record(tmp_path_factory):
    """Every tune of this module keeps its compiles in a record of its own, not the user's cache, and
    prices them by the roofline alone, as the known-answer script's answer is worked out by hand
    (``XLA_FLAGS``: XLA writes no estimates of its own into the modules; tests/scripts/tune_known.py)."""
    import os

    before = {k: os.environ.get(k) for k in ("PROFILE_STEP_CACHE", "XLA_FLAGS")}
    os.environ["PROFILE_STEP_CACHE"] = str(tmp_path_factory.mktemp("record"))
    os.environ["XLA_FLAGS"] = f"{before['XLA_FLAGS'] or ''} {COST_MODEL_STATS}=false".strip()
    yield Path(os.environ["PROFILE_STEP_CACHE"])
    for k, v in before.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def known(aot_python, tmp_path_factory):
    """The known-answer script, started once; a Compiler over it (H100, NVLink-C2C, 3 GiB)."""
    out = tmp_path_factory.mktemp("tune")
    _, spec, builtin = targets.resolve("h100")
    (out / "target.txtpb").write_text(spec)
    (out / "script").mkdir()
    cmd = script_command(find_python(aot_python), KNOWN, [], None, None, None, "")
    session = CompileSession(cmd, out / "target.txtpb", out / "script")
    session.start()
    found = session.request({"op": "names"})
    device = roofline.device_from_spec(spec, builtin.peak_bf16_tflops)
    link = HostLink(parse_link("nvlink-c2c"), "given", "test")
    compiler = Compiler(session, out, device, link, 3 * GiB)
    yield found, names_of(found), compiler
    session.close()


def choose(compiler: Compiler, names: list[Name], link: str, limit: int, presets: bool = False, seeds=()):
    """tune's search on *link* under *limit*, as ``run_tune`` calls it: the presets compiled already
    (``kept_presets``: in this module's process, every link after the first) are read first, and the
    screen compares with them."""
    compiler.link, compiler.limit = parse_link(link), limit
    kept = kept_presets(names, compiler) if presets else []
    result = search(names, compiler, budget=24, echo=lambda s: None, seeds=seeds, known=kept)
    extra = evaluate_presets(names, compiler, kept) if presets else []
    return result, best_of(result.tried + extra), extra


def test_names_and_their_bytes(known):
    """16 layers under a scan: each name 16 times a step; small B x D bf16, big B x 8D (by hand)."""
    found, names, _ = known
    assert found["checkpoints"] >= 1 and found["outside"] == [] and found["inputs"] == []
    by = {n.name: n for n in names}
    assert set(by) == {"big", "small"}
    assert by["small"].count == 16 and by["small"].shape == (32768, 1024) and by["small"].dtype == "bfloat16"
    assert by["small"].bytes_per_step == 16 * 32768 * 1024 * 2 == 1 * GiB
    assert by["big"].bytes_per_step == 8 * GiB
    assert [n.name for n in names] == ["big", "small"]  # the largest first


def test_offload_the_small_recompute_the_big_on_nvlink_c2c(known):
    _, names, compiler = known
    result, choice, _ = choose(compiler, names, "nvlink-c2c", 3 * GiB)
    assert choice is not None and choice.candidate.place() == {"small": "offload", "big": "remat"}
    assert choice.outcome.fits and choice.outcome.device_bytes <= 3 * GiB
    # by construction the small's copies mostly hide there: less exposed than its 0.83 ms x 16 of recomputation
    assert choice.outcome.exposed_ns < 16 * 830_000
    # the pruning: keeping either alone does not fit; the search stopped at a local optimum within its budget
    pruned = {(p["name"], p["place"]): p["why"] for p in result.pruned}
    assert pruned[("small", "device")] == "does not fit" and pruned[("big", "device")] == "does not fit"
    assert "local optimum" in result.stop and result.compiles <= 8
    assert forms.maxtext_form(choice.candidate)[0] is None  # big and small are not MaxText's names
    assert "names_which_can_be_offloaded=['small']" in forms.jax_form(choice.candidate)


def test_the_answer_changes_with_the_link_and_the_limit(known):
    """PCIe Gen5: the small's copies no longer hide, recomputing it is cheaper; with room for the
    smalls (16 GiB) they stay on the device; the bigs (8 GiB) never do."""
    _, names, compiler = known
    _, slow, _ = choose(compiler, names, "pcie5", 3 * GiB)
    assert slow.candidate.place() == {"small": "remat", "big": "remat"}
    _, roomy, _ = choose(compiler, names, "pcie5", 16 * GiB)
    assert roomy.candidate.place() == {"small": "device", "big": "remat"}


@pytest.mark.parametrize("presets", [False, True], ids=["no-presets", "presets"])
def test_monotone_in_the_link(known, presets):
    """A faster link never makes the chosen step slower, and never offloads less: each link's search
    seeded with the slower links' choices (tests/tune/test_tune_search.py has a table where the search
    unseeded is not monotone); with the presets beside it or not."""
    _, names, compiler = known
    steps, offloaded, chosen = [], [], []
    for gbps in ("63", "200", "450", "1000", "5000"):
        _, choice, _ = choose(compiler, names, gbps, 3 * GiB, presets=presets, seeds=chosen)
        steps.append(choice.outcome.step_ns)
        offloaded.append(len(choice.candidate.where("offload")))
        chosen.append(choice.candidate)
    assert steps == sorted(steps, reverse=True), steps
    assert offloaded == sorted(offloaded), offloaded


@pytest.mark.parametrize(("link", "limit"), [("nvlink-c2c", 3 * GiB), ("pcie5", 16 * GiB)])
def test_never_slower_than_a_preset(known, link, limit):
    _, names, compiler = known
    result, choice, presets = choose(compiler, names, link, limit, presets=True)
    assert {p.candidate.preset for p in presets} == {f"jax:{n}" for n in forms.JAX_PRESETS}
    fitting = [p.outcome.step_ns for p in presets + result.tried if p.outcome is not None and p.outcome.fits]
    assert fitting and choice.outcome.step_ns <= min(fitting)


def test_a_name_left_out_by_names_says_so(known):
    """--names small: big stays where it rests (recomputed), and its line says why it was not moved;
    the compiles are the cached ones of the searches above."""
    from profiler.tune import explain

    _, names, compiler = known
    compiler.link, compiler.limit = parse_link("nvlink-c2c"), 3 * GiB
    result = search(names, compiler, budget=24, echo=lambda s: None, only={"small"})
    choice = best_of(result.tried)
    assert choice.candidate.place() == {"small": "offload", "big": "remat"}
    text = explain.lines(choice, result, compiler, names)
    (big,) = [t for t in text if t.startswith("big: ")]
    assert big.startswith("big: recompute (where it rests: not among --names)"), big
    (small,) = [t for t in text if t.startswith("small: ")]
    # each direction against the compute that overlaps it: to host under the forward's, back under the backward's
    assert small.startswith("small: offload; its 1.00 GiB per step on NVLink-C2C: to host "), small
    assert " of the forward compute scheduled between start and done" in small, small
    assert "; back " in small and " of the backward compute scheduled between start and done" in small, small


def test_beside_a_jax_policy_the_best_placement_of_the_names_says_why(known):
    """When one of JAX's policies is the choice (it saves values the names do not tag), the page's second
    answer, the best placement of the names (the one with MaxText's form), has a line per activation,
    which speaks of "this placement", not of the choice."""
    from profiler.tune.document import document
    from profiler.tune.evaluate import Outcome
    from profiler.tune.run import TuneRequest
    from profiler.tune.search import Tried

    found, names, compiler = known
    result, named, _ = choose(compiler, names, "nvlink-c2c", 3 * GiB)
    fast = named.outcome.step_ns // 2  # a JAX policy far faster than any placement of the names
    policy = Tried(Candidate.jax("dots_saveable"), Outcome(fast, 0, fast, {}, {}, 1, 0, True), "preset", None)
    link = HostLink(parse_link("nvlink-c2c"), "given", "test")
    doc = document(TuneRequest(KNOWN), names, found, result, [policy], compiler, link, 3 * GiB, "test", "H100")
    doc.update(seconds=1.0, out_dir="OUT", compiles=compiler.compiles)
    doc["search"].update(compiles=0, compile_seconds=0.0, jobs=1)
    assert doc["choice"]["label"] == "jax:dots_saveable" and doc["best_named"]["label"] == named.candidate.label(names)
    assert [line.split(":")[0] for line in doc["best_named_why"]] == [n.name for n in names]
    assert not any("in the choice" in line for line in doc["best_named_why"])
    text = " ".join(render_tune(doc).split())
    assert "the best placement of the named activations: offload small" in text
    assert "small: offload; its 1.00 GiB per step on NVLink-C2C" in text
    # every tune prints how far its kind of prediction was off: here the roofline's (this module turns XLA's
    # own estimates off, own_record above)
    from profiler.analysis.accuracy import ROOFLINE

    assert doc["accuracy"] == ROOFLINE.line() and " ".join(ROOFLINE.line().split()) in text


def test_a_placement_that_changes_nothing_says_so(known):
    """``big`` kept makes ``small`` unneeded (tune_known.py): keeping both compiles to the same program as
    keeping ``big`` alone, so the line of ``small`` in "keep all" says that keeping it made no difference,
    never "kept"."""
    from profiler.tune import explain

    _, names, compiler = known
    compiler.link, compiler.limit = parse_link("nvlink-c2c"), 64 * GiB
    result = search(names, compiler, budget=24, echo=lambda s: None)
    by = {t.candidate.label(names): t for t in result.tried}
    both, big = by["keep all"], by["keep big"]
    assert explain.program_of(compiler, both.candidate) == explain.program_of(compiler, big.candidate) is not None
    text = explain.lines(both, result, compiler, names)
    assert text[0].startswith("choice: keep all: ") and "(the same program as keep big)" in text[0], text[0]
    (small,) = [t for t in text if t.startswith("small: ")]
    assert small.startswith("small: kept on the device asked, but the compiled program is the same as with it "
                            "recomputed"), small  # fmt: skip
    assert "makes no difference" in small and "more device memory saves" not in small


def test_a_budget_cut_is_in_the_verdict(known, tmp_path):
    """Two compiles (a fresh compiler over the same script: the bounds) cut the search short: the verdict says so."""
    from profiler.tune import explain

    _, names, shared = known
    compiler = Compiler(shared.session, tmp_path, shared.device, HostLink(parse_link("nvlink-c2c"), "given", "t"),
                        3 * GiB)  # fmt: skip
    result = search(names, compiler, budget=2, echo=lambda s: None)
    assert result.budget_cut
    choice = best_of(result.tried)
    head = explain.lines(choice, result, compiler, names)[0]
    assert head.startswith("choice: ") and "cut short by its compile budget (2 compiles; --max-compiles" in head


def test_the_compile_cache(known):
    """The same request is compiled once: the searches above share their compiles."""
    compiler = known[2]
    before = compiler.compiles
    compiler(Candidate.of({"big": "remat", "small": "offload"}))
    assert compiler.compiles == before


def test_a_step_without_checkpoint_is_one_line(aot_python, tmp_path):
    """One line on stderr; with --json, the same error as a JSON object on stdout."""
    proc = run_cli("tune", "--json", "--out", str(tmp_path / "t"), "--python", aot_python,
                   str(ROOT / "examples" / "train.py"), "--layers", "1", timeout=600)  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("profile-step: error: ") and "no jax.checkpoint" in lines[-1]
    assert "--policy remat" in lines[-1] and "Traceback" not in proc.stderr
    said = json.loads(proc.stdout)
    assert said["exit_code"] == 2 and said["choice"] is None
    assert "profile-step: error: " + said["error"] == lines[-1]


@pytest.mark.parametrize(
    ("words", "error"),
    [
        (["--json", "no_such_script.py"], "no_such_script.py: no such training script"),
        (["--json", "--max-compiles", "0", str(KNOWN)], "--max-compiles: at least 1"),
        (["--json", "--no-such-option", str(KNOWN)], "unrecognized arguments: --no-such-option"),
        (["--json"], "the following arguments are required: script, script_args"),
    ],
)
def test_json_says_every_failing_exit(words, error):
    """``tune --json`` prints a JSON error object on stdout on every failing exit (a bad file, a bad
    value, a usage error), beside the one line on stderr; without --json, stdout stays empty."""
    proc = run_cli("tune", *words)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert json.loads(proc.stdout) == {"error": error, "exit_code": 2, "choice": None}
    assert error in proc.stderr.strip().splitlines()[-1]  # a usage error adds where --help is
    plain = run_cli("tune", *[w for w in words if w != "--json"])
    assert plain.returncode == 2 and plain.stdout == ""


def test_a_second_tune_for_another_link_compiles_nothing_it_has_seen(aot_python, tmp_path):
    """The record of compiles: tune on PCIe Gen5, then on NVLink-C2C (the same step, target and flags):
    the second compiles nothing (every program it needs the first compiled), starts from the first's
    choice and is no slower; --no-cache compiles again.  Its own record (not the module's)."""
    env = {"PROFILE_STEP_CACHE": str(tmp_path / "cache")}

    def tune(link: str, out: str, *more: str) -> dict:
        words = ["--json", "--no-presets", "--link", link, "--memory-limit", "3GiB", "--out", str(tmp_path / out)]
        proc = run_cli("tune", *words, "--python", aot_python, *more, str(KNOWN), env=env, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout)

    slow = tune("pcie5", "slow")
    assert slow["compiles"] >= 4 and slow["record"]["stored"] == slow["compiles"] and slow["record"]["reused"] == 0
    assert slow["choice"]["placements"] == {"small": "remat", "big": "remat"}
    fast = tune("nvlink-c2c", "fast")
    assert fast["compiles"] == 0 and fast["record"]["reused"] >= 4 and fast["record"]["seeds"] == 1
    assert fast["record"]["folder"] == slow["record"]["folder"]
    assert fast["choice"]["placements"] == {"small": "offload", "big": "remat"} and fast["choice"]["reused"]
    assert fast["choice"]["predicted_step_ns"] <= slow["choice"]["predicted_step_ns"]
    assert Path(fast["choice"]["hlo_file"]).is_relative_to(tmp_path / "fast")  # the tune folder keeps its files
    assert "programs reused from earlier tunes of this step" in render_tune(fast)
    again = tune("nvlink-c2c", "again", "--no-cache")
    assert again["compiles"] >= 4 and again["record"] is None
    assert again["choice"]["fingerprint"] == fast["choice"]["fingerprint"]


def test_nothing_fits_is_a_json_error_too(aot_python, tmp_path):
    """Under 1 GiB nothing of the known-answer step fits: exit 1, and --json prints the document with
    its error (no choice)."""
    proc = run_cli("tune", "--json", "--no-presets", "--link", "pcie5", "--memory-limit", "1GiB", "--out",
                   str(tmp_path / "t"), "--python", aot_python, str(KNOWN), timeout=900)  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["exit_code"] == 1 and doc["choice"] is None
    assert doc["error"] == "no candidate that compiled fits in the memory limit"
    assert "nothing fits" in doc["search"]["stop"]


PLAIN = ROOT / "tests" / "scripts" / "plain_remat.py"


def tune_json(python: str, out: Path, *script: str, env: dict | None = None) -> dict:
    """``profile-step tune --json`` (PCIe Gen5, 1 GiB, 3 compiles, no presets) on *script*."""
    args = ["tune", "--link", "pcie5", "--memory-limit", "1GiB", "--no-presets", "--max-compiles", "3", "--json",
            "--out", str(out), "--python", python]  # fmt: skip
    proc = run_cli(*args, *script, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def plain(aot_python, tmp_path_factory):
    """``profile-step tune --json`` on an unedited script (one CPU device), once for several tests."""
    out = tmp_path_factory.mktemp("plain") / "t"
    return out, tune_json(aot_python, out, str(PLAIN))


def check_unedited(doc: dict, devices: int) -> None:
    assert doc["step"]["name"] == "train_step" and "second time" in doc["step"]["chosen_by"]
    assert "init 1x" in doc["step"]["chosen_by"]
    assert {n["name"] for n in doc["names"]} == {"proj", "hidden"}
    # 4 layers x batch 64 x 4 x 128 f32 per name and step: the traced step's (global) shapes, over all devices
    assert {n["name"]: n["bytes_per_step"] for n in doc["names"]} == {
        "proj": 4 * 64 * 512 * 4,
        "hidden": 4 * 64 * 512 * 4,
    }
    hlo = Path(doc["candidates"][0]["hlo_file"]).read_text()
    assert ("all-reduce" in hlo) == (devices == 2)
    assert doc["choice"] is not None and doc["choice"]["fits"]


def test_an_unedited_script(plain):
    """A script that knows nothing of profile-step: the step is the jitted function it calls a second
    time (its init runs once), compiled for the target."""
    check_unedited(plain[1], 1)


def test_an_unedited_script_on_a_mesh(aot_python, tmp_path):
    """The same script sharding its batch over two CPU devices: its step is compiled for two H100s,
    its gradients all-reduced."""
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    check_unedited(tune_json(aot_python, tmp_path / "t", str(PLAIN), "--devices", "2", env=env), 2)


def test_json_and_text(plain):
    """--json has every candidate with its forms; the text (render_tune of the same document, what the
    command prints without --json) the table and one line per activation."""
    out, doc = plain
    assert doc["compiles"] == doc["search"]["compiles"] <= 3 and len(doc["candidates"]) == doc["search"]["tried"]
    assert "compile budget ran out" in doc["search"]["stop"] or "optimum" in doc["search"]["stop"]
    assert {"predicted_step_ns", "predicted_exposed_ns", "device_bytes", "host_bytes", "jax_form"} <= set(
        doc["candidates"][0]
    )
    assert doc["choice"]["fits"] and doc["why"][0].startswith("choice: ")
    assert json.loads((out / "plan.json").read_text())["tune"]["choice"]["label"] == doc["choice"]["label"]
    text = render_tune(doc)
    assert "candidate" in text and "JAX:     policy=jax.checkpoint_policies." in text
    assert "\n  proj: " in text and "\n  hidden: " in text and f"(files: {out})" in text
    # prose wraps at 160 columns (the table and the forms, copied whole, do not); --wide leaves it whole
    starts = ("choice: ", "  proj: ", "  hidden: ", "    ", "search: ")
    prose = [ln for ln in text.splitlines() if ln.startswith(starts)]
    assert prose and max(map(len, prose)) <= 160
    assert doc["why"][0] in render_tune(doc, wide=True).splitlines()


def test_verify_runs_the_choice_and_the_best_preset(aot_python, nsys, tmp_path):
    """--verify on this machine: the choice and the best preset run under nsys (on the CPU, the
    policy substituted into the script's checkpoints by the start-up hook) and compile to different
    programs; each run folder keeps tune's prediction for it."""
    out = tmp_path / "t"  # one compile for the search (the resting one): the presets give the pair to run
    proc = run_cli("tune", "--verify", "--link", "pcie5", "--max-compiles", "1", "--json", "--out", str(out),
                   "--python", aot_python, str(PLAIN), timeout=1200)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    v = doc["verify"]
    assert [r["role"] for r in v["runs"]] == ["tune-choice", "tune-preset"]
    assert v["ran"] and v["different_programs"] is True, v
    # compiled and run here, by the CPU's XLA: said in the document and in the text
    assert v["backend"] == "cpu" and all(r["backend"] == "cpu" for r in v["runs"])
    assert "verify (captured under nsys, profile-step run; programs compiled by XLA for CPU on this machine" in (
        render_tune(doc)
    )
    assert v["runs"][1]["label"].startswith("jax:") and v["analyze"].startswith("profile-step analyze ")
    for r in v["runs"]:
        kept = json.loads((Path(r["run_dir"]) / "tune_prediction.json").read_text())
        assert kept["candidate"]["label"] == r["label"] and kept["link"]["key"] == "pcie5"
        facts = json.loads((Path(r["run_dir"]) / "startup.json").read_text())
        assert json.loads(facts["tune_policy"]) is not None  # the hook substituted the candidate's policy
    # analyze of the two runs shows what tune predicted for each (CPU runs: not comparable, said so)
    shown = run_cli("analyze", *[r["run_dir"] for r in v["runs"]])
    assert shown.returncode == 0, shown.stderr[-3000:]
    words = " ".join(shown.stdout.split())  # lines wrapped at 160 columns
    for r in v["runs"]:
        assert f"tune predicted {r['role']} ({r['label']}) on " in words, shown.stdout[-3000:]
    assert "(not comparable with this run's measured step: it did not run on a GPU)" in words, shown.stdout[-3000:]


def test_calibrate_takes_a_runs_measured_costs(aot_python, plain, tmp_path):
    """--calibrate RUN: a run that measured the resting program's own instructions (each kernel 200 us,
    built with test_measured's thunk export) gives that program its measured times, so its predicted
    step is at least the kernels' sum, where the roofline alone says microseconds."""
    from profiler.xla.compiled import load_module
    from tests.helpers.measured import measured_run

    first = plain[1]["candidates"][0]
    assert first["label"] == "recompute all"
    hlo = Path(first["hlo_file"])
    run, work = measured_run(hlo, tmp_path / "run", compute_ns=200_000, copy_ns=100_000)
    measured = {i.name for i in work if i.opcode != "copy-start"}
    # the kernels of the replayed schedule that the run measured (a while loop's own range is not one:
    # its body is replayed, costed by the run's scale factors)
    ops = schedule.build(load_module(hlo)[0]).ops
    kernels = sum(1 for o in ops if o.kind == "compute" and o.name in measured)
    doc = tune_json(aot_python, tmp_path / "b", "--calibrate", str(run), str(PLAIN))
    (rest,) = [r for r in doc["candidates"] if r["label"] == "recompute all"]
    assert doc["calibration"]["instructions"] >= kernels > 5
    assert rest["predicted_step_ns"] >= kernels * 200_000
    assert first["predicted_step_ns"] < 100_000  # the roofline alone
    assert load_module(hlo)[0].name == load_module(Path(rest["hlo_file"]))[0].name


def maxtext() -> tuple[Path, str]:
    """A MaxText checkout and a Python with its requirements and jax[cuda12] (docs/tune.md), given as
    $PROFILE_STEP_MAXTEXT and $PROFILE_STEP_MAXTEXT_PYTHON; the test skips without them."""
    import os

    checkout, python = os.environ.get("PROFILE_STEP_MAXTEXT"), os.environ.get("PROFILE_STEP_MAXTEXT_PYTHON")
    if not checkout or not python:
        pytest.skip("no MaxText: set PROFILE_STEP_MAXTEXT (checkout) and PROFILE_STEP_MAXTEXT_PYTHON (docs/tune.md)")
    return Path(checkout), python


def test_maxtext_unedited(tmp_path):
    """MaxText's own train.py on its tiny CPU config (FIELD_NOTES), unedited: the step is train_step
    (lowered once for MaxText's memory report, then called), its activations MaxText's names, the
    choice written as MaxText's overrides."""
    checkout, python = maxtext()
    train = checkout / "src" / "maxtext" / "trainers" / "pre_train" / "train.py"
    config = [str(checkout / "src" / "maxtext" / "configs" / "base.yml"), "run_name=t",
              f"base_output_directory={tmp_path / 'out'}", "dataset_type=synthetic", "steps=3",
              "per_device_batch_size=1", "max_target_length=64", "base_emb_dim=64", "base_num_query_heads=2",
              "base_num_kv_heads=2", "base_mlp_dim=128", "base_num_decoder_layers=2", "head_dim=32", "vocab_size=256",
              "enable_checkpointing=false", "hardware=cpu", "scan_layers=true", "attention=dot_product",
              "jax_cache_dir=", "log_period=1", "skip_jax_distributed_system=true", "remat_policy=full"]  # fmt: skip
    proc = run_cli("tune", "--no-presets", "--max-compiles", "3", "--batch-arg", "", "--json", "--out",
                   str(tmp_path / "t"), "--python", python, str(train), *config,
                   env={"DECOUPLE_GCLOUD": "TRUE"}, timeout=1800)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["step"]["name"] == "train_step"
    # its 2 decoder layers under one scanned checkpoint: 2 regions a step (JAX bound the primitive 3 times)
    assert (doc["checkpoints"], doc["checkpoint_sites"]) == (2, 1)
    names = {n["name"]: n for n in doc["names"]}
    assert {"decoder_layer_input", "query_proj", "key_proj", "value_proj", "out_proj", "mlpwo"} <= set(names)
    assert names["decoder_layer_input"]["input"] is True
    assert doc["choice"]["maxtext_form"].startswith("remat_policy=custom decoder_layer_input=")
