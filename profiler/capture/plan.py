"""``profile-step plan``: compile a script's training step for a GPU target on any machine.

The script runs once per (policy, micro batch) under a Python that has JAX's
CUDA plugin, with ``JAX_PLATFORMS=cpu`` and ``JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1``
(no GPU, no driver needed); ``annotate.compiled_step`` compiles the step for
the target description instead of running it, writes what it found into the
(policy, batch) folder and ends the script.  Each folder gets
``compiled_step.json`` (memory and cost analysis), ``step.hlo.txt`` (the
optimized module) and ``output.log``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from profiler.analysis.links import HostLink, Link, given_link, host_link, link_of_gpu
from profiler.capture import policy_arg
from profiler.capture.shell import output_of
from profiler.capture.xla_flags import for_target_compile as xla_flags_for_target
from profiler.conventions import BATCH_ENV, COMPILED_STEP, PLAN_DIR_ENV, PLAN_TARGET_ENV, POLICY_ENV
from profiler.errors import InputError, ProfilerError
from profiler.predict.step import predict_file
from profiler.stored import folder
from profiler.xla import targets
from profiler.xla.compiled import cost_analysis, load_module
from profiler.xla.fingerprint import module_fingerprint, text_fingerprint
from profiler.xla.hlo import HloError, remat_clones
from profiler.xla.plan import offload_plan, plan_note
from profiler.xla.same_program import entry_signature

ROOT = Path(__file__).resolve().parents[2]
AOT_VENV = ROOT / ".venv-aot"
AOT_PYTHON_ENV = "PROFILE_STEP_AOT_PYTHON"


@dataclass
class PlanRequest:
    script: Path
    script_args: list[str] = field(default_factory=list)
    policies: list[str] = field(default_factory=lambda: ["default"])
    batches: list[int | None] = field(default_factory=lambda: [None])
    target: str = "h100"
    python: str | None = None
    batch_arg: str | None = "--batch"
    policy_arg: str | None = None
    policy_word: bool = False  # policy_arg is one word, passed as written (--policy-word)
    out_dir: Path | None = None
    plans_dir: Path = Path("plans")
    xla_flags: list[str] = field(default_factory=list)  # added to the script's XLA_FLAGS (plan --pgle)
    links: list[Link] | None = None  # host links to predict the step on (None: the target's own)
    step: str | None = None  # --step: the jitted function to take, for a script that hands none over


def usable_fraction(given: float | None) -> float:
    """The share of device memory a step may use: *given* (``--mem-fraction``), else what
    $XLA_PYTHON_CLIENT_MEM_FRACTION tells JAX, else JAX's default 0.75."""
    if given is not None:
        return given
    try:
        return float(os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.75"))
    except ValueError:
        return 0.75


def has_cuda_plugin(python: str) -> bool:
    if Path(python).absolute() == Path(sys.executable).absolute():  # venv pythons are symlinks: no resolve()
        return importlib.util.find_spec("jax_cuda12_plugin") is not None
    probe = "import importlib.util as u; print(u.find_spec('jax_cuda12_plugin') is not None)"
    return output_of([python, "-c", probe], timeout=60) == "True"


def find_python(explicit: str | None) -> str:
    """A Python with JAX's CUDA plugin: --python, $PROFILE_STEP_AOT_PYTHON, the project's
    .venv-aot, or this one."""
    tried = []
    for cand in (explicit, os.environ.get(AOT_PYTHON_ENV), str(AOT_VENV / "bin" / "python"), sys.executable):
        if not cand or cand in tried:
            continue
        tried.append(cand)
        if cand in (explicit, os.environ.get(AOT_PYTHON_ENV)) and not Path(cand).exists():
            raise ProfilerError(f"{cand}: no such Python")
        if Path(cand).exists() and has_cuda_plugin(cand):
            return cand
        if cand == explicit:
            raise ProfilerError(f"{cand}: this Python has no JAX CUDA plugin (pip install 'jax[cuda12]')")
    raise ProfilerError(
        "no Python with JAX's CUDA plugin for compiling without a GPU: run `bash scripts/setup.sh --aot` "
        "(a separate .venv-aot, about 5.5 GB), or pass --python PY with jax[cuda12] installed"
    )


def program(req: PlanRequest, python: str, policy: str, batch: int | None) -> list[str]:
    cmd = [python, str(req.script)] if req.script.suffix == ".py" else [str(req.script)]
    cmd += req.script_args
    if batch is not None and req.batch_arg:
        cmd += [req.batch_arg, str(batch)]
    return cmd + policy_arg.words(req.policy_arg, policy, req.policy_word)


def checked(req: PlanRequest) -> tuple[str, str, targets.GpuTarget | None]:
    """*req*'s script, policy argument and target checked (each a one-line error), and the target
    resolved (``targets.resolve``)."""
    if not req.script.exists():
        raise InputError(req.script, "no such training script")
    policy_arg.require(req.policy_arg, req.policy_word)
    try:
        return targets.resolve(req.target)
    except ValueError as exc:
        raise ProfilerError(str(exc)) from None


def run_plan(req: PlanRequest, echo: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True)) -> dict:
    """Compile every (policy, batch); returns the plan document (also written as plan.json)."""
    label, spec, builtin = checked(req)
    links = predict_links(req.links, label)
    python = find_python(req.python)
    key = builtin.key if builtin else Path(req.target).stem
    out = folder.output_folder(req.out_dir, req.plans_dir, key)
    spec_file = out / "target.txtpb"
    spec_file.write_text(spec)
    doc: dict[str, Any] = {
        "target": {
            "key": builtin.key if builtin else None,
            "label": label,
            "spec_file": str(spec_file),
            "memory_bytes": targets.memory_of(spec),
            "peak_bf16_tflops": builtin.peak_bf16_tflops if builtin else targets.peak_tflops(label),
        },
        "label": f"compiled for {label}, not measured",
        "script": str(req.script.resolve()),
        "script_args": req.script_args,
        "python": python,
        "out_dir": str(out),
        "links": [{**h.link.doc(), "why": h.why} for h in links],
        "results": [],
    }
    for policy in req.policies:
        for batch in req.batches:
            res = _one(req, python, spec_file, out, policy, batch, echo)
            _predict(res, spec, [h.link for h in links], doc["target"]["peak_bf16_tflops"])
            doc["results"].append(res)
    folder.write_json(out / "plan.json", doc)
    return doc


def predict_links(given: Sequence[Link | str] | None, label: str) -> list[HostLink]:
    """The links to predict on: those given (``--link a,b``, parsed by the command; a name is parsed
    here, for callers that hold one), else the target's own host link."""
    if given:
        own = link_of_gpu(label)
        links = []
        for g in given:
            chosen = host_link([], g if isinstance(g, Link) else given_link(g))
            if own is not None and chosen.link.key != own.key:  # another GPU's link: a what-if, said so
                chosen = replace(
                    chosen, why=f"{chosen.why}, not the {label}'s own ({own.name}): another machine's link"
                )
            links.append(chosen)
        return list({h.link.key: h for h in links}.values())  # each link once, in the order given
    return [host_link([label])]


def _predict(res: dict[str, Any], spec: str, links: list[Link], peak: float | None) -> None:
    """The compiled step's predicted step and exposed copy time per link (``res["prediction"]``)."""
    hlo = Path(res["dir"]) / ((res.get("compiled") or {}).get("hlo_file") or "step.hlo.txt")
    if res["status"] != "ok" or not hlo.is_file():
        res["prediction"] = None
        return
    res["prediction"] = predict_file(hlo, spec, links, peak)


def _one(
    req: PlanRequest, python: str, spec_file: Path, out: Path, policy: str, batch: int | None, echo: Callable
) -> dict[str, Any]:
    sub = out / (f"{folder.slug(policy)}-b{batch}" if batch is not None else folder.slug(policy))
    sub.mkdir()
    env = dict(os.environ)
    env.update(
        {
            POLICY_ENV: policy,
            PLAN_DIR_ENV: str(sub),
            PLAN_TARGET_ENV: str(spec_file),
            "JAX_PLATFORMS": "cpu",
            "JAX_SKIP_CUDA_CONSTRAINTS_CHECK": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    env["XLA_FLAGS"] = xla_flags_for_target(env.get("XLA_FLAGS"), req.xla_flags)
    env.pop("PROFILE_STEP_RUN_DIR", None)
    if batch is not None:
        env[BATCH_ENV] = str(batch)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    cmd = program(req, python, policy, batch)
    res: dict[str, Any] = {"policy": policy, "batch": batch, "dir": str(sub), "command": cmd, "notes": []}
    t0 = time.monotonic()
    with (sub / "output.log").open("w") as log:
        try:
            code = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
        except OSError as exc:
            code = 127
            res["notes"].append(f"could not start the script: {exc}")
    res["exit_code"] = code
    res["seconds"] = round(time.monotonic() - t0, 1)
    compiled = None
    try:
        compiled = json.loads((sub / COMPILED_STEP).read_text())
    except (OSError, ValueError):
        tail = _tail(sub / "output.log")
        compiled, why = caught_step(req, cmd, spec_file, sub, policy, batch) if code != 127 else (None, "not started")
        if compiled is None:
            res["notes"].append(
                "the script never handed its step to annotate.compiled_step()"
                + (f" (exit {code}; last output: {tail})" if tail else f" (exit {code})")
                + f"; nor was one taken from its jit calls: {why}"
            )
    res["compiled"] = compiled
    res["status"] = "ok" if compiled and compiled.get("module") else "failed"
    if compiled:
        res["notes"] += compiled.get("notes", [])
        hlo = sub / (compiled.get("hlo_file") or "step.hlo.txt")
        if hlo.is_file():
            try:
                module, _, text = load_module(hlo)
                res["plan"] = offload_plan(module)
                res["fingerprint"] = (text_fingerprint(text) if text is not None else module_fingerprint(module))[
                    "value"
                ]
                res["remat_clones"] = len(remat_clones(module))
                if plan_note(res["plan"]):
                    res["plan_note"] = plan_note(res["plan"])
            except (HloError, OSError) as exc:
                res["notes"].append(f"the compiled module could not be read: {exc}")
    state = res["status"] if res["status"] != "ok" else f"{compiled.get('module')}"
    at = f", batch {batch}" if batch is not None else ""
    echo(f"plan: policy {policy}{at}: {state} ({res['seconds']:.0f} s) -> {sub}")
    return res


def caught_step(
    req: PlanRequest, cmd: list[str], spec_file: Path, sub: Path, policy: str, batch: int | None
) -> tuple[dict[str, Any] | None, str | None]:
    """The step of a script that handed none over, taken from its jit calls as ``tune`` takes it
    (``profiler.capture.step_catch``: the function with a jax.checkpoint run twice, or ``--step``)
    and compiled once under the script's own policy; written as ``compiled_step.json``.
    (None, why) when no step was taken or its compile failed."""
    from profiler.capture.tune_session import CompileSession

    if (sub / "output.log").is_file():
        (sub / "output.log").replace(sub / "output.run.log")  # the plain run's output, kept beside
    try:
        with CompileSession(
            cmd, spec_file, sub, policy=policy, batch=batch, xla_flags=req.xla_flags, step=req.step
        ) as session:
            ready = session.start()
            got = session.request({"op": "compile", "policy": {"script": True}, "out": str(sub)})
    except ProfilerError as exc:
        return None, str(exc)
    if not got.get("ok"):
        return None, f"compiling {ready.get('step')} for the target failed: {got.get('error')}"
    text = Path(got["hlo_file"]).read_text()
    cost, why = (got.get("cost"), None) if got.get("cost") else cost_analysis(text)
    doc = {
        "module": got.get("module"),
        "memory": got.get("memory"),
        "cost": cost,
        "signature": entry_signature(text),
        "device_kind": ready.get("device_kind"),
        "hlo_file": Path(got["hlo_file"]).name,
        "source": f"the step taken from the script's jit calls: {ready.get('step')} ({ready.get('chosen_by')})",
        "notes": [
            f"the script handed no step to annotate.compiled_step(): the step is {ready.get('step')} "
            f"({ready.get('chosen_by')})",
            *(got.get("notes") or []),
            *([why] if why else []),
        ],
    }
    folder.write_json(sub / COMPILED_STEP, doc)
    return doc, None


def _tail(path: Path, n: int = 200) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return ""
    last = text.splitlines()[-1] if text else ""
    return last[-n:]
