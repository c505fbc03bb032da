"""In the script's process under ``profile-step tune``: compile the step for the GPU target once
per policy profile-step asks for, then end the script.

profile-step and the script talk over two pipes (``$PROFILE_STEP_TUNE_FDS``: the
descriptors to read requests from and to write answers to), one JSON document per
line, so that a search can choose its next candidates from the answers so far and
the script, JAX and the target are set up once for all of them:

- ``{"op": "names"}``: the step traced with every checkpoint recomputing everything;
  answers the activations its checkpoints name (``policy_swap.named_values``), those
  tagged on a checkpoint's input, how many checkpointed regions a step runs (``checkpoints``, a
  scanned layer once per iteration) in how many ``jax.checkpoint`` equations (``checkpoint_sites``;
  ``policy_swap.checkpoint_uses``), and the traced step's
  fingerprint (its jaxpr's text: what tune's record of compiles is keyed by);
- ``{"op": "compile", "policy": DOC, "out": DIR, "options": {...}}``: the step compiled
  under policy DOC (``policy_swap``) with XLA's debug *options* (e.g.
  ``xla_gpu_enable_latency_hiding_scheduler``); writes ``DIR/step.hlo.txt``, answers the
  module name, ``memory_analysis()`` and the seconds it took;
- ``{"op": "sources"}``: the files the process read (opened to read up to its step, the start-up hook's
  audit) or imported (``sys.modules``), and the Python's own prefixes (tune's launch key watches the
  files outside them);
- ``{"op": "quit"}``.

A failed compile is an answer (``ok: false`` and the error), never the end of the loop.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from profiler.conventions import TUNE_FDS_ENV
from profiler.xla import policy_swap

serving = False  # True once a step is served: the hook's step catcher then takes no other
opened: set[str] = set()  # the files the script opened to read until its step is served (the launch key's)
_watching = [False]  # on from watch_opens() until serve()


def _audit_open(event: str, args: tuple[Any, ...]) -> None:
    """An audit hook: keep the path of each file opened with read access while watching."""
    if event != "open" or not _watching[0]:
        return
    try:
        path, mode, flags = (*tuple(args), None, None, None)[:3]
        if isinstance(path, int):
            return
        if isinstance(mode, str):
            if "r" not in mode and "+" not in mode:
                return
        elif isinstance(flags, int) and flags & 3 == os.O_WRONLY:  # O_ACCMODE
            return
        opened.add(os.path.abspath(os.fsdecode(path)))
    except Exception:
        pass


def watch_opens() -> None:
    """Keep the files the process opens to read from now until ``serve`` (the start-up hook calls it
    in a tune's script: tune's launch key watches them); an audit hook cannot be removed, so it stops
    recording instead."""
    _watching[0] = True
    sys.addaudithook(_audit_open)


def _traced_jaxpr(step: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    import jax

    traced = step.trace(*args, **kwargs).jaxpr if hasattr(step, "trace") else jax.make_jaxpr(step)(*args, **kwargs)
    return policy_swap.open_jaxpr(traced)


def jaxpr_fingerprint(jaxpr: Any) -> str:
    """The SHA-256 of a jaxpr's text, object addresses (``<function f at 0x...>``) left out: the same
    step traced in another process has the same fingerprint."""
    text = re.sub(r" at 0x[0-9a-fA-F]+", "", str(jaxpr))
    return hashlib.sha256(text.encode()).hexdigest()


def _names(step: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    policy_swap.use({"jax": "nothing_saveable"})
    jaxpr = _traced_jaxpr(step, args, kwargs)
    values = policy_swap.named_values(jaxpr)
    seen = policy_swap.found()
    inside = set(seen["inside"])
    uses = policy_swap.checkpoint_uses(jaxpr)
    return {
        "ok": True,
        "checkpoints": uses["per_step"],
        "checkpoint_sites": uses["sites"],
        "names": {k: v for k, v in values.items() if k in inside},
        "outside": sorted(set(values) - inside),  # tagged, but in no checkpoint: no policy reaches them
        "inputs": seen["inputs"],
        "fingerprint": jaxpr_fingerprint(jaxpr),
    }


def _compile(step: Any, args: tuple[Any, ...], kwargs: dict[str, Any], req: dict[str, Any]) -> dict[str, Any]:
    from profiler.xla.compiled import memory_fields, module_name, pick_costs

    out = Path(req["out"])
    out.mkdir(parents=True, exist_ok=True)
    policy_swap.use(req.get("policy") or {"script": True})
    t0 = time.monotonic()
    traced = step.trace(*args, **kwargs) if hasattr(step, "trace") else None
    lowered = traced.lower() if traced is not None else step.lower(*args, **kwargs)
    options = req.get("options") or None
    compiled = lowered.compile(compiler_options=options) if options else lowered.compile()
    seconds = time.monotonic() - t0
    text = compiled.as_text()
    (out / "step.hlo.txt").write_text(text)
    try:
        memory = memory_fields(compiled.memory_analysis())
    except Exception as exc:  # backends without it raise their own errors
        memory, note = None, f"memory_analysis() failed: {exc}"
    else:
        note = None
    try:
        cost = pick_costs(compiled.cost_analysis())
    except Exception:  # a backend without it: the HLO is there to count from
        cost = None
    return {
        "ok": True,
        "module": module_name(text),
        "memory": memory,
        "cost": cost,
        "hlo_file": str(out / "step.hlo.txt"),
        "seconds": round(seconds, 2),
        "checkpoints": policy_swap.checkpoint_uses(policy_swap.open_jaxpr(traced.jaxpr))["per_step"]
        if traced is not None
        else None,
        "notes": [note] if note else [],
    }


def _sources() -> dict[str, Any]:
    import site
    import sysconfig

    files = set(opened)
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if isinstance(f, str) and f:
            files.add(os.path.abspath(f))
    paths = sysconfig.get_paths()
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    prefixes |= {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    with contextlib.suppress(Exception):  # an embedded or odd site module
        prefixes |= set(site.getsitepackages()) | {site.getusersitepackages()}
    return {"ok": True, "files": sorted(files), "prefixes": sorted(p for p in prefixes if p)}


def serve(
    step: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    device_kind: str | None,
    step_name: str | None = None,
    why: str = "handed over by annotate.compiled_step()",
) -> NoReturn:
    """Answer profile-step's requests until it says quit (or closes the pipe); then end the script."""
    import jax

    global serving
    serving = True
    _watching[0] = False  # the files read from here on are tune's, not the script's
    rfd, wfd = (int(x) for x in os.environ[TUNE_FDS_ENV].split(","))
    with os.fdopen(rfd, "r") as requests, os.fdopen(wfd, "w") as answers:

        def send(doc: dict[str, Any]) -> None:
            answers.write(json.dumps(doc, default=str) + "\n")
            answers.flush()

        send({"op": "ready", "device_kind": device_kind, "jax": jax.__version__, "pid": os.getpid(),
              "step": step_name or getattr(step, "__name__", None), "chosen_by": why})  # fmt: skip
        for line in requests:
            req = json.loads(line)
            op = req.get("op")
            if op == "quit":
                break
            try:
                if op == "names":
                    send(_names(step, args, kwargs))
                elif op == "sources":
                    send(_sources())
                elif op == "compile":
                    send(_compile(step, args, kwargs, req))
                else:
                    send({"ok": False, "error": f"unknown request {op!r}"})
            except Exception as exc:  # one candidate's failure is an answer, not the end
                send({"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:2000]}"})
    print("profile-step tune: compiles done; stopping the script here", flush=True)
    raise SystemExit(0)
