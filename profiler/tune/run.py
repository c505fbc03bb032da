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

from profiler.analysis.links import HostLink
from profiler.capture.plan import find_python, predict_links, usable_fraction
from profiler.capture.tune_session import CompileSession, script_command
from profiler.errors import InputError, ProfilerError
from profiler.predict import roofline
from profiler.runs import folder
from profiler.tune import explain, forms
from profiler.tune.candidate import Candidate, Name
from profiler.tune.evaluate import Compiled, Outcome, compiled_from
from profiler.tune.search import Search, Tried, best_of, search
from profiler.xla import targets

LABEL = "predicted (roofline over the compiled schedule, not measured)"


@dataclass
class TuneRequest:
    script: Path
    script_args: list[str] = field(default_factory=list)
    target: str = "h100"
    link: str | None = None
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
    xla_options: dict[str, Any] = field(default_factory=dict)  # XLA debug options for every compile


class Compiler:
    """Compiles candidates in the script's process, once per request (the cache), and predicts them."""

    def __init__(
        self,
        session: CompileSession,
        out: Path,
        device: roofline.Device,
        link: HostLink,
        limit: int | None,
        options: dict[str, Any] | None = None,
        calibration: Any = None,
    ) -> None:
        self.session = session
        self.out = out
        self.device = device
        self.link = link.link
        self.limit = limit
        self.options = dict(options or {})
        self.calibration = calibration
        self.cache: dict[str, Compiled | None] = {}
        self.errors: dict[str, str] = {}
        self.compiles = 0
        self.seconds = 0.0
        self.echo: Callable[[str], None] = lambda s: None
        self.device_memory: int | None = None
        self.names: list[Name] = []  # for the candidates' labels in the progress lines

    def _key(self, c: Candidate) -> str:
        return c.key() + (repr(sorted(self.options.items())) if self.options else "")

    def cached(self, c: Candidate) -> bool:
        return self._key(c) in self.cache

    def compiled(self, c: Candidate) -> Compiled | None:
        key = self._key(c)
        if key not in self.cache:
            self.compiles += 1
            where = self.out / f"c{self.compiles:03d}"
            t0 = time.monotonic()
            ans = self.session.request({"op": "compile", "policy": c.policy_doc(), "out": str(where),
                                        "options": self.options})  # fmt: skip
            self.seconds += time.monotonic() - t0
            if ans.get("ok"):
                comp = compiled_from(ans, key, self.device)
                comp.calibration = self.calibration
                self.cache[key] = comp
            else:
                self.cache[key] = None
                self.errors[key] = str(ans.get("error"))
            out = self.outcome(c)
            state = "failed" if out is None else f"{out.step_ns / 1e6:.3f} ms" + ("" if out.fits else ", does not fit")
            self.echo(f"tune: compile {self.compiles}: {c.label(self.names)}: {state} ({time.monotonic() - t0:.1f} s)")
        return self.cache[key]

    def outcome(self, c: Candidate) -> Outcome | None:
        comp = self.cache.get(self._key(c))
        return comp.outcome(self.link, self.limit) if comp is not None else None

    def __call__(self, c: Candidate) -> Outcome | None:
        self.compiled(c)
        return self.outcome(c)


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
    return int(mem * frac), f"the target's memory x {frac:g} (XLA_PYTHON_CLIENT_MEM_FRACTION)"


def open_session(req: TuneRequest, out: Path, spec: str) -> CompileSession:
    python = find_python(req.python)
    spec_file = out / "target.txtpb"
    spec_file.write_text(spec)
    words = req.policy_arg if req.policy else None  # the script's own policy on its command line
    cmd = script_command(python, req.script, req.script_args, req.batch, req.batch_arg, words, req.policy or "")
    script_dir = out / "script"
    script_dir.mkdir()
    return CompileSession(cmd, spec_file, script_dir, policy=req.policy, batch=req.batch, step=req.step)


def _calibration(req: TuneRequest, spec: str) -> tuple[Any, dict[str, Any] | None]:
    if req.calibrate is None:
        return None, None
    from profiler.predict import calibrate
    from profiler.runs.measured import load

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
    out = _folder(req, builtin.key if builtin else Path(req.target).stem)
    t0 = time.monotonic()
    with open_session(req, out, spec) as session:
        say(f"tune: starting {req.script.name} under {session.command[0]} (log: {session.log})")
        ready = session.start()
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
        say(f"tune: {found['checkpoints']} checkpoint(s) naming {len(names)} activation(s): "
            + (", ".join(n.name for n in names) or "none"))  # fmt: skip
        compiler = Compiler(session, out, device, link, limit, req.xla_options, calibration)
        compiler.device_memory = targets.memory_of(spec)
        compiler.echo = say
        compiler.names = names
        if req.only:
            unknown = sorted(set(req.only) - {n.name for n in names})
            if unknown:
                raise ProfilerError(
                    f"--names: the step names no {', '.join(unknown)} (it has {', '.join(n.name for n in names)})"
                )
        result = search(names, compiler, req.max_compiles, say, set(req.only) if req.only else None)
        search_compiles, search_seconds = compiler.compiles, compiler.seconds
        presets = evaluate_presets(names, compiler) if req.presets else []
    doc = document(req, names, found, result, presets, compiler, link, limit, limit_why, label)
    doc["calibration"] = cal_doc
    doc["step"] = {"name": ready.get("step"), "chosen_by": ready.get("chosen_by"), "jax": ready.get("jax")}
    doc["target"].update({"key": builtin.key if builtin else None, "spec_file": str(out / "target.txtpb")})
    doc["search"].update(compiles=search_compiles, compile_seconds=round(search_seconds, 1))
    doc["compiles"] = compiler.compiles
    doc["seconds"] = round(time.monotonic() - t0, 1)
    doc["out_dir"] = str(out)
    doc["verify"] = None
    if req.verify and doc["choice"] is not None:
        from profiler.tune.verify import verify

        args = [*req.script_args, *([req.batch_arg, str(req.batch)] if req.batch is not None and req.batch_arg else [])]
        doc["verify"] = verify(doc, req.script, args, req.policy, None, say)
    folder.write_json(out / "tune.json", doc)
    folder.write_json(out / "plan.json", plan_document(doc))
    return doc


def evaluate_presets(names: list[Name], compiler: Compiler) -> list[Tried]:
    """JAX's presets, and MaxText's when the step has MaxText's names, compiled and predicted."""
    cands = forms.jax_presets()
    if any(n.name in forms.MAXTEXT_CUSTOM for n in names):
        cands = forms.maxtext_presets(names) + cands
    out = []
    for c in cands:
        before = compiler.compiles
        outcome = compiler(c)
        out.append(Tried(c, outcome, "preset", compiler.compiles if compiler.compiles > before else None))
    return out


def _folder(req: TuneRequest, key: str) -> Path:
    if req.out_dir is not None:
        if req.out_dir.exists() and (not req.out_dir.is_dir() or any(req.out_dir.iterdir())):
            raise InputError(req.out_dir, "exists and is not an empty folder (profile-step never overwrites)")
        req.out_dir.mkdir(parents=True, exist_ok=True)
        return req.out_dir
    return folder.finish(folder.create(req.plans_dir, f"tune-{key}"))


def row(t: Tried, names: list[Name], compiler: Compiler) -> dict[str, Any]:
    """One evaluated candidate as JSON."""
    comp = compiler.cache.get(compiler._key(t.candidate))
    o = t.outcome
    jax_form = forms.jax_form(t.candidate)
    mt, mt_why = forms.maxtext_form(t.candidate)
    return {
        "label": t.candidate.label(names),
        "preset": t.candidate.preset,
        "placements": t.candidate.place(),
        "jax_policy": t.candidate.jax_policy,
        "stage": t.stage,
        "compile_no": t.compile_no,
        "same_program_as": None,  # the compile that made the same program (HLO fingerprint)
        "status": "ok" if o is not None else "failed",
        "error": compiler.errors.get(compiler._key(t.candidate)),
        "predicted_step_ns": o.step_ns if o else None,
        "predicted_exposed_ns": o.exposed_ns if o else None,
        "predicted_compute_ns": o.compute_ns if o else None,
        "predicted_copy_ns": o.copy_ns if o else None,
        "copy_bytes": o.copy_bytes if o else None,
        "device_bytes": o.device_bytes if o else None,
        "host_bytes": o.host_bytes if o else None,
        "d2h_bytes_per_step": comp.d2h_bytes if comp else None,
        "fits": o.fits if o else None,
        "module": comp.module if comp else None,
        "fingerprint": comp.fingerprint if comp else None,
        "memory": comp.memory if comp else None,
        "compile_seconds": comp.seconds if comp else None,
        "hlo_file": comp.hlo_file if comp else None,
        "notes": list(comp.notes) if comp else [],
        "jax_form": jax_form,
        "maxtext_form": mt,
        "maxtext_form_missing": mt_why,
    }


def document(
    req: TuneRequest,
    names: list[Name],
    found: dict[str, Any],
    result: Search,
    presets: list[Tried],
    compiler: Compiler,
    link: HostLink,
    limit: int | None,
    limit_why: str,
    label: str,
) -> dict[str, Any]:
    """The tune document: every candidate, the presets, the choice with its reasons."""
    everything = result.tried + presets
    choice = best_of(everything)
    rows = [row(t, names, compiler) for t in result.tried]
    preset_rows = [row(t, names, compiler) for t in presets]
    first: dict[str, int] = {}
    for r in sorted(rows + preset_rows, key=lambda r: r["compile_no"] or 10**9):
        fp = r["fingerprint"]
        if fp is None:
            continue
        r["same_program_as"] = first.get(fp) if first.get(fp) != r["compile_no"] else None
        first.setdefault(fp, r["compile_no"])
    ordered = sorted(
        [r for r in rows + preset_rows if r["fits"]], key=lambda r: (r["predicted_step_ns"], r["device_bytes"] or 0)
    )
    chosen = row(choice, names, compiler) if choice is not None else None
    lines = explain.lines(choice, result, compiler, names) if choice is not None else []
    # when one of JAX's own policies wins: the best placement of the names too (it has MaxText's form)
    named = best_of(result.tried + [p for p in presets if not p.candidate.jax_policy])
    best_named = (
        row(named, names, compiler)
        if named is not None and choice is not None and choice.candidate.jax_policy
        else None
    )
    return {
        "label": LABEL,
        "compiled_label": f"compiled for {label}, not measured",
        "script": str(req.script.resolve()),
        "script_args": req.script_args,
        "batch": req.batch,
        "target": {"label": label, "memory_bytes": compiler.device_memory},
        "link": {"key": link.link.key, "name": link.link.name, "gbps": link.link.gbps, "why": link.why},
        "limit_bytes": limit,
        "limit_why": limit_why,
        "xla_options": req.xla_options,
        "names": [
            {
                "name": n.name,
                "shape": list(n.shape),
                "dtype": n.dtype,
                "count": n.count,
                "bytes_per_step": n.bytes_per_step,
                "input": n.is_input,
            }
            for n in names
        ],
        "names_outside_checkpoints": found.get("outside") or [],
        "checkpoints": found.get("checkpoints"),
        "search": {
            "stop": result.stop,
            "pruned": result.pruned,
            "tried": len(result.tried),
        },
        "candidates": rows,
        "presets": preset_rows,
        "fitting": ordered,
        "choice": chosen,
        "why": lines,
        "best_named": best_named,
    }


def plan_document(doc: dict[str, Any]) -> dict[str, Any]:
    """The tune document in ``plan.json``'s shape (one result per compiled candidate), so that
    everything that reads plans (the dashboard's plan view) reads a tune folder too."""
    results = []
    for r in doc["candidates"] + doc["presets"]:
        results.append(
            {
                "policy": r["label"],
                "batch": doc.get("batch"),
                "dir": str(Path(r["hlo_file"]).parent) if r.get("hlo_file") else None,
                "status": r["status"],
                "compiled": {"module": r["module"], "memory": r["memory"], "hlo_file": "step.hlo.txt"},
                "fingerprint": r["fingerprint"],
                "notes": r["notes"],
                "prediction": {
                    "label": LABEL,
                    "predictions": [
                        {
                            "link": doc["link"]["key"],
                            "link_name": doc["link"]["name"],
                            "link_gbps": doc["link"]["gbps"],
                            "predicted_step_ns": r["predicted_step_ns"],
                            "predicted_exposed_ns": r["predicted_exposed_ns"],
                            "predicted_compute_ns": r["predicted_compute_ns"],
                            "predicted_copy_ns": r["predicted_copy_ns"] or {},
                            "copy_bytes": r["copy_bytes"] or {},
                            "layers": [],
                        }
                    ]
                    if r["status"] == "ok"
                    else [],
                    "notes": [],
                },
            }
        )
    return {
        "target": {**doc["target"]},
        "label": doc["compiled_label"],
        "script": doc["script"],
        "script_args": doc["script_args"],
        "out_dir": doc["out_dir"],
        "links": [doc["link"]],
        "results": results,
        "tune": {k: doc[k] for k in ("choice", "why", "fitting", "search", "limit_bytes", "link", "compiles")},
    }
