"""``profile-step tune SCRIPT``: the search over the step's named activations, the presets beside
it, and the choice, written to ``tune.json`` (and ``plan.json``, which the dashboard's plan view
reads) in ``plans/<time>-tune-<target>-<id>/``."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
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
from profiler.tune.candidate import Name
from profiler.tune.compiler import Compiler
from profiler.tune.document import document, plan_document
from profiler.tune.record import Record, step_key
from profiler.tune.search import SCREEN, Tried, search
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
    script_dir = out / name
    script_dir.mkdir()
    return CompileSession(cmd, spec_file, script_dir, policy=req.policy, batch=req.batch, step=req.step)


def launch_helpers(req: TuneRequest, out: Path, spec: str) -> list[CompileSession]:
    """``--jobs N``: N - 1 more processes of the script (``script-2/``, ...), started now, side by side with
    the first; the compiler waits for them when it first compiles side by side."""
    helpers = [open_session(req, out, spec, f"script-{i}") for i in range(2, req.jobs + 1)]
    for h in helpers:
        h.launch()
    return helpers


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
    with open_session(req, out, spec) as session:
        more = f", and {req.jobs - 1} more to compile side by side (--jobs {req.jobs})" if req.jobs > 1 else ""
        say(f"tune: starting {req.script.name} under {session.command[0]} (log: {session.log}){more}")
        session.launch()
        helpers = launch_helpers(req, out, spec)
        try:
            doc = _tune(req, session, helpers, out, spec, say, (device, link, limit, limit_why, label, calibration))
        finally:
            for h in helpers:
                h.close()
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
        return f"{regions} jax.checkpoint region(s) a step"
    return (
        f"{regions} jax.checkpoint region(s) a step ({sites} jax.checkpoint in the program; one under a "
        "scan runs once per iteration)"
    )


def _tune(
    req: TuneRequest,
    session: CompileSession,
    helpers: list[CompileSession],
    out: Path,
    spec: str,
    say: Callable[[str], None],
    setting: tuple[Any, ...],
) -> dict[str, Any]:
    """The search and the presets in the started script (and its helpers): the tune document, less the
    fields ``run_tune`` adds."""
    device, link, limit, limit_why, label, calibration = setting
    ready = session.wait_ready()
    say(
        f"tune: the step is {ready.get('step')} ({ready.get('chosen_by')}), compiled for "
        f"{ready.get('device_kind')} (JAX {ready.get('jax')})"
    )
    found = session.request({"op": "names"})
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
    compiler = Compiler(session, out, device, link, limit, req.xla_options, calibration, record, helpers)
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
    result = search(names, compiler, req.max_compiles, say, only, seeds, SCREEN if req.screen else None)
    search_compiles, search_seconds = compiler.compiles, compiler.seconds
    presets = evaluate_presets(names, compiler) if req.presets else []
    jobs = compiler.jobs
    compiler.finish()
    doc = document(req, names, found, result, presets, compiler, link, limit, limit_why, label)
    if record is not None and result.best is not None:
        record.remember(result.best.candidate, link.link.key, link.link.gbps, limit)
    doc["record"] = (
        {"folder": str(record.folder), "reused": compiler.reused, "stored": record.stored, "seeds": len(seeds)}
        if record is not None
        else None
    )
    doc["step"] = {"name": ready.get("step"), "chosen_by": ready.get("chosen_by"), "jax": ready.get("jax")}
    doc["search"].update(compiles=search_compiles, compile_seconds=round(search_seconds, 1), jobs=jobs)
    doc["compiles"] = compiler.compiles
    return doc


def open_record(req: TuneRequest, found: dict[str, Any], spec: str, ready: dict[str, Any]) -> Record | None:
    """The record of this step's compiles on this target with these flags; None with --no-cache or when
    the script's answer has no step fingerprint."""
    if not req.cache or not found.get("fingerprint"):
        return None
    return Record(cache_dir("tune"), step_key(found["fingerprint"], spec, req.xla_options, ready.get("jax")))


def evaluate_presets(names: list[Name], compiler: Compiler) -> list[Tried]:
    """JAX's presets, and MaxText's when the step has MaxText's names, compiled and predicted."""
    cands = forms.jax_presets()
    if any(n.name in forms.MAXTEXT_CUSTOM for n in names):
        cands = forms.maxtext_presets(names) + cands
    prefetch = getattr(compiler, "prefetch", None)
    if prefetch is not None:
        prefetch(cands)
    out = []
    for c in cands:
        before = compiler.compiles
        outcome = compiler(c)
        out.append(Tried(c, outcome, "preset", compiler.compiles if compiler.compiles > before else None))
    return out
