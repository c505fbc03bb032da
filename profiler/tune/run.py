"""``profile-step tune SCRIPT``: the search over the step's named activations, the presets beside
it, and the choice, written to ``tune.json`` (and ``plan.json``, which the dashboard's plan view
reads) in ``plans/<time>-tune-<target>-<id>/``."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from profiler.analysis.links import Link
from profiler.cache_dir import cache_dir
from profiler.capture.plan import find_python, predict_links, usable_fraction
from profiler.capture.tune_session import CompileSession, script_command
from profiler.errors import InputError, ProfilerError
from profiler.predict import roofline
from profiler.stored import folder
from profiler.tune import forms
from profiler.tune.candidate import Candidate, Name
from profiler.tune.compiler import Compiler
from profiler.tune.document import document, plan_document
from profiler.tune.launch import LaunchRecord, LazySession, StaleRecord, hashes, launch_key, python_facts, read_files
from profiler.tune.record import Record, step_key
from profiler.tune.search import SCREEN, Tried, bounds, search
from profiler.xla import targets


@dataclass
class TuneRequest:
    script: Path
    script_args: list[str] = field(default_factory=list)
    target: str = "h100"
    link: Link | None = None  # parsed where the user names it (--link)
    batch: int | None = None
    batch_arg: str | None = "--batch"
    memory_limit: int | None = None  # bytes; None: the target's memory x mem_fraction
    mem_fraction: float | None = None
    python: str | None = None
    policy: str | None = None  # the script's own policy to start from ($PROFILE_STEP_POLICY / --policy-arg)
    policy_arg: str | None = None
    out_dir: Path | None = None
    plans_dir: Path = Path("plans")
    max_compiles: int = 48
    presets: bool = True
    calibrate: Path | None = None
    step: str | None = None  # the jitted function to take as the step (a script that hands none over)
    verify: bool = False  # capture the choice and the best preset under nsys afterwards
    only: list[str] | None = None  # search only these names (the others stay where they rest)
    cache: bool = True  # read and write the record of compiles (profiler.tune.record); --no-cache: neither
    xla_options: dict[str, Any] = field(default_factory=dict)  # XLA debug options for every compile
    jobs: int = 1  # script processes compiling side by side (--jobs)
    start_script: bool = False  # start the script even when the record knows its launch (--start-script)
    screen: bool = True  # leave out the changes the names' effects alone predict to lose (--no-screen: none)


def names_of(answer: dict[str, Any]) -> list[Name]:
    """The step's named activations from the script's answer, the largest per step first."""
    inputs = set(answer.get("inputs") or [])
    rows = [
        Name(n, tuple(v["shape"]), v["dtype"], int(v["count"]), int(v["bytes_per_step"]), n in inputs)
        for n, v in (answer.get("names") or {}).items()
    ]
    return sorted(rows, key=lambda n: (-n.bytes_per_step, n.name))


def limit_of(req: TuneRequest, spec: str) -> tuple[int | None, str]:
    if req.memory_limit is not None:
        return req.memory_limit, "--memory-limit"
    mem = targets.memory_of(spec)
    frac = usable_fraction(req.mem_fraction)
    if mem is None:
        return None, "the target description gives no memory size: every candidate counts as fitting"
    return int(mem * frac), f"the target's memory x {frac:g}, the share JAX takes (--mem-fraction)"


def open_session(req: TuneRequest, out: Path, spec: str, name: str = "script") -> CompileSession:
    """One process of the script (its output in ``out/<name>/output.log``), not started yet."""
    python = find_python(req.python)
    spec_file = out / "target.txtpb"
    spec_file.write_text(spec)
    words = req.policy_arg if req.policy else None  # the script's own policy on its command line
    cmd = script_command(python, req.script, req.script_args, req.batch, req.batch_arg, words, req.policy or "")
    return CompileSession(cmd, spec_file, out / name, policy=req.policy, batch=req.batch, step=req.step)


def _calibration(req: TuneRequest, spec: str) -> tuple[Any, dict[str, Any] | None]:
    if req.calibrate is None:
        return None, None
    from profiler.predict import calibrate
    from profiler.predict.measured import load

    m = load(req.calibrate)
    run_spec, note = calibrate.run_spec(m, spec)
    try:
        cal = calibrate.calibrate(m, run_spec)
    except ValueError as exc:
        raise InputError(req.calibrate, str(exc)) from None
    if note:
        cal.notes.append(note)
    return (cal, spec), cal.doc()


def run_tune(req: TuneRequest, echo: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The whole command; returns the tune document (also written as tune.json)."""
    say = echo or (lambda s: print(s, file=sys.stderr, flush=True))
    if not req.script.exists():
        raise InputError(req.script, "no such training script")
    try:
        label, spec, builtin = targets.resolve(req.target)
    except ValueError as exc:
        raise ProfilerError(str(exc)) from None
    link = predict_links([req.link] if req.link else None, label)[0]
    limit, limit_why = limit_of(req, spec)
    device = roofline.device_from_spec(spec, builtin.peak_bf16_tflops if builtin else targets.peak_tflops(label))
    calibration, cal_doc = _calibration(req, spec)
    key = builtin.key if builtin else Path(req.target).stem
    out = folder.output_folder(req.out_dir, req.plans_dir, f"tune-{key}")
    t0 = time.monotonic()
    setting = (device, link, limit, limit_why, label, calibration)
    try:
        doc = _launch(req, out, spec, say, setting)
    except StaleRecord as exc:
        say(f"tune: {exc}; starting over with the script started")
        for child in out.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        doc = _launch(replace(req, start_script=True), out, spec, say, setting)
    doc["calibration"] = cal_doc
    doc["target"].update({"key": builtin.key if builtin else None, "spec_file": str(out / "target.txtpb")})
    doc["seconds"] = round(time.monotonic() - t0, 1)
    doc["out_dir"] = str(out)
    doc["verify"] = None
    if req.verify and doc["choice"] is not None:
        from profiler.tune.verify import verify

        args = [*req.script_args, *([req.batch_arg, str(req.batch)] if req.batch is not None and req.batch_arg else [])]
        doc["verify"] = verify(doc, req.script, args, req.policy, req.python, say)
    folder.write_json(out / "tune.json", doc)
    folder.write_json(out / "plan.json", plan_document(doc))
    return doc


def checkpoints_line(found: dict[str, Any]) -> str:
    """How many checkpointed regions a step runs, and in how many ``jax.checkpoint`` equations when
    that differs (a scanned layer: one equation, run once per layer)."""
    regions, sites = found.get("checkpoints") or 0, found.get("checkpoint_sites")
    if sites is None or sites == regions:
        return f"{regions} jax.checkpoint region(s) per step"
    return (
        f"{regions} jax.checkpoint region(s) per step ({sites} jax.checkpoint in the program; one under a "
        "scan runs once per iteration)"
    )


def _launch(
    req: TuneRequest, out: Path, spec: str, say: Callable[[str], None], setting: tuple[Any, ...]
) -> dict[str, Any]:
    """The tune, with the script started now, or (its launch in the record, every file it read unchanged)
    only when the search meets a placement that the record lacks."""
    session = open_session(req, out, spec)
    launch, entry, why = None, None, ""
    if req.cache:
        facts = python_facts(find_python(req.python), session.env)
        if facts is not None:
            launch = LaunchRecord(cache_dir("tune"), launch_key(session, spec, req.xla_options, facts))
            if not req.start_script:
                entry, why = launch.lookup()
    if entry is not None:
        kept = step_key(entry["found"].get("fingerprint") or "", spec, req.xla_options, entry["ready"].get("jax"))

        def check(ready: dict[str, Any], found: dict[str, Any]) -> str | None:
            key = step_key(found.get("fingerprint") or "", spec, req.xla_options, ready.get("jax"))
            if found.get("ok") and key == kept:
                return None
            return (
                f"the started script traced another step than the record holds for this launch (step {key}, not "
                f"{kept}: a change that the launch key does not see)"
            )

        main: Any = LazySession(session, req.script.name, entry["ready"], check, say)
        ready, found, files = entry["ready"], entry["found"], None
        say(
            f"tune: the step taken from the record without starting {req.script.name} (an earlier tune of the same "
            "command, files, Python and environment); it starts only for a placement the record lacks "
            "(--start-script starts it)"
        )
    else:
        if why and launch is not None and not why.startswith("no earlier"):
            say(f"tune: the record's step for this launch is not used: {why}")
        more = f"; {req.jobs - 1} more when a round has candidates to compile side by side" if req.jobs > 1 else ""
        say(f"tune: starting {req.script.name} under {session.command[0]} (log: {session.log}){more}")
        main = session
        session.launch()
        ready = session.wait_ready()
        found = session.request({"op": "names"})
        files = None
        if launch is not None and found.get("ok"):
            sources = session.request({"op": "sources"})
            files = hashes(read_files(sources, req.script, [out])) if sources.get("ok") else None
    try:
        doc = _tune(req, main, ready, found, out, spec, say, setting)
    except StaleRecord:
        launch.forget()  # type: ignore[union-attr]
        raise
    finally:
        main.close()
    started = getattr(main, "started", True)
    if doc["record"] is not None:
        doc["record"]["launch"] = {
            "key": launch.key if launch is not None else None,
            "from_record": entry is not None,
            "script_started": started,
            "files": len(entry["files"] if entry is not None else files or {}),
        }
    if launch is not None and files and doc["record"] is not None:
        launch.write(doc["record"]["key"], ready, found, files)
    return doc


def _tune(
    req: TuneRequest,
    session: Any,
    ready: dict[str, Any],
    found: dict[str, Any],
    out: Path,
    spec: str,
    say: Callable[[str], None],
    setting: tuple[Any, ...],
) -> dict[str, Any]:
    """The search and the presets over the step (*ready*, *found*: the script's answers, or the record's),
    compiled in *session* and its helpers: the tune document, less the fields ``run_tune`` adds."""
    device, link, limit, limit_why, label, calibration = setting
    say(
        f"tune: the step is {ready.get('step')} ({ready.get('chosen_by')}), compiled for "
        f"{ready.get('device_kind')} (JAX {ready.get('jax')})"
    )
    if not found.get("ok"):
        raise ProfilerError(f"{req.script}: tracing the step failed: {found.get('error')}")
    names = names_of(found)
    if not found.get("checkpoints"):
        raise ProfilerError(
            f"{req.script}: the step has no jax.checkpoint (jax.remat, nn.remat) whose policy tune could "
            "choose; wrap the layers in jax.checkpoint (examples/train.py: --policy remat)"
        )
    say(f"tune: {checkpoints_line(found)} naming {len(names)} activation(s): "
        + (", ".join(n.name for n in names) or "none"))  # fmt: skip
    record = open_record(req, found, spec, ready)
    spawn = lambda i: open_session(req, out, spec, f"script-{i}")  # noqa: E731
    compiler = Compiler(session, out, device, link, limit, req.xla_options, calibration, record, spawn=spawn,
                        jobs=req.jobs)  # fmt: skip
    compiler.device_memory = targets.memory_of(spec)
    compiler.echo = say
    compiler.names = names
    if req.only:
        unknown = sorted(set(req.only) - {n.name for n in names})
        if unknown:
            raise ProfilerError(
                f"--names: the step names no {', '.join(unknown)} (it has {', '.join(n.name for n in names)})"
            )
    seeds = record.seeds() if record is not None else []
    if seeds:
        say(f"tune: {len(seeds)} placement(s) chosen by earlier tunes of this step tried first ({record.folder})")
    only = set(req.only) if req.only else None
    try:
        # with --jobs: the bounds and the presets, compiled whatever the outcomes, in one batch: the helpers
        # come up while the first process compiles, and no process idles between the two rounds (the search
        # and the presets take them in their own order, numbered as with --jobs 1)
        if req.presets:
            compiler.prefetch(bounds(names) + preset_candidates(names))
        batch_seconds = compiler.seconds
        kept = kept_presets(names, compiler) if req.presets else []
        result = search(names, compiler, req.max_compiles, say, only, seeds, SCREEN if req.screen else None, kept)
        search_compiles, search_seconds = compiler.compiles, compiler.seconds - batch_seconds
        presets = evaluate_presets(names, compiler, kept) if req.presets else []
        jobs = compiler.jobs
    finally:
        compiler.finish()
    doc = document(req, names, found, result, presets, compiler, link, limit, limit_why, label)
    if record is not None and result.best is not None:
        record.remember(result.best.candidate, link.link.key, link.link.gbps, limit)
    doc["record"] = None
    if record is not None:
        doc["record"] = {"folder": str(record.folder), "key": record.key, "reused": compiler.reused,
                         "stored": record.stored, "seeds": len(seeds)}  # fmt: skip
    doc["step"] = {"name": ready.get("step"), "chosen_by": ready.get("chosen_by"), "jax": ready.get("jax")}
    doc["search"].update(compiles=search_compiles, compile_seconds=round(search_seconds, 1), jobs=jobs,
                         batch_seconds=round(batch_seconds, 1))  # fmt: skip
    doc["compiles"] = compiler.compiles
    return doc


def open_record(req: TuneRequest, found: dict[str, Any], spec: str, ready: dict[str, Any]) -> Record | None:
    """The record of this step's compiles on this target with these flags; None with --no-cache or when
    the script's answer has no step fingerprint."""
    if not req.cache or not found.get("fingerprint"):
        return None
    return Record(cache_dir("tune"), step_key(found["fingerprint"], spec, req.xla_options, ready.get("jax")))


def preset_candidates(names: list[Name]) -> list[Candidate]:
    """JAX's presets, and MaxText's first when the step has MaxText's names."""
    cands = forms.jax_presets()
    if any(n.name in forms.MAXTEXT_CUSTOM for n in names):
        cands = forms.maxtext_presets(names) + cands
    return cands


def kept_presets(names: list[Name], compiler: Compiler) -> list[Tried]:
    """The presets an earlier tune of this step compiled (in the record: a replay each, no compile), read
    before the search so that its screen compares with them."""
    return [Tried(c, compiler(c), "preset", None) for c in preset_candidates(names) if compiler.cached(c)]


def evaluate_presets(names: list[Name], compiler: Compiler, kept: Iterable[Tried] = ()) -> list[Tried]:
    """JAX's presets, and MaxText's when the step has MaxText's names, compiled and predicted (those in
    *kept* taken as they are)."""
    done = {t.candidate.key(): t for t in kept}
    cands = preset_candidates(names)
    prefetch = getattr(compiler, "prefetch", None)
    if prefetch is not None:
        prefetch(cands)  # the kept ones are cached: not compiled again
    out = []
    for c in cands:
        if c.key() in done:
            out.append(done[c.key()])
            continue
        before = compiler.compiles
        outcome = compiler(c)
        out.append(Tried(c, outcome, "preset", compiler.compiles if compiler.compiles > before else None))
    return out
