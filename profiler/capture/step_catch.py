"""Under ``profile-step tune``, in the script's process: take the training step from a script that
hands none over (no ``annotate.compiled_step``), and compile it for the GPU target.

The start-up hook calls :func:`install` when ``$PROFILE_STEP_TUNE_FDS`` is set.  Every call of a
``jax.jit`` function of the script goes through JAX's Python path (the C++ fast path is turned
off; JAX's own jitted functions are left out), where its function, its ``jit`` settings and its
arguments are seen.  A call that runs the function is an *execution*; ``.lower()``, ``.trace()``
and ``.eval_shape()`` are sightings only; a jit called while another function is traced
(``jax.make_jaxpr``, ``jax.vjp``, ``jax.eval_shape`` of a Python function) is not seen at all: a
traced-only helper is never the step.  Each function's traced program is read once: its
``jax.checkpoint``s (where a remat or offload policy lives) and its FLOPs (matmuls and
elementwise, loops times their trips).

The step is, in this order:

1. the function ``$PROFILE_STEP_TUNE_STEP`` names (``--step``): ``NAME`` (or ``jit_NAME``),
   ``NAME@LINE`` (the later of two functions of one name: a line of its ``def``), ``FILE:LINE``
   (any line of the function), taken when first seen;
2. else the first function with a ``jax.checkpoint`` executed after it was seen with the same
   shapes (a training loop's second step; MaxText's ``train_step``, lowered once for its memory
   report, at its first execution): a function without one (a learning-rate schedule, a data
   step, an evaluation) is never taken here, however often it runs;
3. else, when the script ends, of the functions executed twice with the same shapes the one with
   the most work (FLOPs per call), taken from the arguments of its second call.

At that point, in the script's own context (its mesh, its axis rules), the step is lowered again
for the target (``profiler.xla.retarget``), then ``profiler.xla.tune_server`` compiles it under
each policy asked for and the script ends.  A script that ends with no step answers the functions
it saw (``{"op": "no_step", "candidates": [...]}``), for the session's error to name them and the
flag that selects one.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Any

STEP_ENV = "PROFILE_STEP_TUNE_STEP"  # --step: NAME, NAME@LINE or FILE:LINE
CHECKPOINT_PRIMITIVES = ("remat2", "checkpoint", "remat")  # jax.checkpoint's primitive, by JAX version


@dataclass
class Seen:
    """One jitted function of the script: where it is defined and what was seen of it."""

    name: str
    file: str
    first: int  # its first line (decorators included)
    last: int  # its last line
    executions: int = 0
    sightings: int = 0  # executions and lowerings
    shapes: Any = None  # of its last sighting
    checkpoints: int | None = None  # jax.checkpoint equations in its traced program
    flops: float | None = None  # per call, counted from its traced program
    held: tuple[Any, Any, tuple[Any, ...], dict[str, Any]] | None = None  # (fun, jit info, args, kwargs), abstract

    @property
    def where(self) -> str:
        """``train.py:41``: its file's name and first line, as ``--step FILE:LINE`` takes it."""
        return f"{os.path.basename(self.file)}:{self.first}"

    def doc(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "where": self.where,
            "executions": self.executions,
            "lowered": self.sightings - self.executions,
            "checkpoints": self.checkpoints,
            "flops": self.flops,
        }


@dataclass(frozen=True)
class Selector:
    """What ``--step`` names: a function name, a line, a file (None: any)."""

    name: str | None = None
    line: int | None = None
    file: str | None = None


def checked_step(text: str | None) -> Selector | None:
    """``--step``'s form checked before any work: a bad one is a one-line ``ProfilerError``."""
    if text is None:
        return None
    from profiler.errors import ProfilerError

    try:
        return parse_step(text)
    except ValueError as exc:
        raise ProfilerError(str(exc)) from None


def parse_step(text: str) -> Selector:
    """``NAME``, ``NAME@LINE`` or ``FILE:LINE`` as a :class:`Selector`; ValueError for anything else."""
    text = text.strip()
    name, at, line = text.rpartition("@")
    if at and name and line.isdigit():
        return Selector(name=name, line=int(line))
    path, colon, line = text.rpartition(":")
    if colon and path and line.isdigit():
        return Selector(file=path, line=int(line))
    if not text or any(c in text for c in "@:/ "):
        raise ValueError(f"--step {text!r}: expected NAME, NAME@LINE or FILE:LINE")
    return Selector(name=text)


def matches(sel: Selector, seen: Seen) -> bool:
    """Whether *seen* is the function *sel* names (``jit_NAME``: the jit name XLA gives it)."""
    if sel.name is not None and sel.name not in (seen.name, f"jit_{seen.name}"):
        return False
    if sel.file is not None and not _same_file(sel.file, seen.file):
        return False
    return sel.line is None or seen.first <= sel.line <= seen.last


def _same_file(given: str, defined: str) -> bool:
    a, b = os.path.normpath(given), os.path.normpath(defined)
    return a == b or b.endswith(os.sep + a.lstrip(os.sep)) or os.path.abspath(a) == b


def at_the_end(seen: list[Seen]) -> Seen | None:
    """Rule 3: of the functions executed twice with the same shapes (their arguments held), the
    one with the most work; None when none was."""
    held = [s for s in seen if s.held is not None]
    if not held:
        return None
    return max(held, key=lambda s: (bool(s.checkpoints), s.flops or 0.0, s.executions, -s.first))


def candidates(seen: list[Seen]) -> list[dict[str, Any]]:
    """What the script called, one entry per function (a function jitted again by ``jax.eval_shape``
    counted with its own jit), those with a ``jax.checkpoint`` and the most work first."""
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for s in seen:
        d = s.doc()
        m = merged.setdefault((d["name"], d["where"]), {**d, "executions": 0, "lowered": 0})
        m["executions"] += d["executions"]
        m["lowered"] += d["lowered"]
        m["checkpoints"] = (
            max(m["checkpoints"] or 0, d["checkpoints"] or 0) if d["checkpoints"] is not None else m["checkpoints"]
        )
        m["flops"] = max(m["flops"] or 0.0, d["flops"] or 0.0) if d["flops"] is not None else m["flops"]
    return sorted(
        merged.values(), key=lambda d: (-(d["checkpoints"] or 0), -(d["flops"] or 0.0), -d["executions"], d["where"])
    )


def candidates_text(candidates: list[dict[str, Any]], limit: int = 6) -> str:
    """``scanned (x.py:41, ran once, 1 jax.checkpoint, 2.10 GFLOP a call), ...``: what the script ran."""
    from profiler.units import si

    def times(n: int) -> str:
        return "never ran" if n == 0 else "ran once" if n == 1 else f"ran {n} times"

    def one(c: dict[str, Any]) -> str:
        cps = c.get("checkpoints")
        cp = "checkpoints unknown" if cps is None else "no jax.checkpoint" if cps == 0 else f"{cps} jax.checkpoint"
        cp += "s" if cps and cps > 1 else ""
        lowered = f", lowered {c['lowered']}x" if c.get("lowered") else ""
        work = f", {si(c['flops'])}FLOP a call" if c.get("flops") is not None else ""
        return f"{c['name']} ({c['where']}, {times(c['executions'])}{lowered}, {cp}{work})"

    shown = [one(c) for c in candidates[:limit]]
    more = len(candidates) - limit
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


# --- the traced program's work ------------------------------------------------------------------
def program_work(jaxpr: Any) -> tuple[int, float]:
    """(``jax.checkpoint`` equations, FLOPs) of a (closed) jaxpr, its sub-jaxprs included (a scan's
    body times its length): a matmul costs 2 x its output x its contraction, any other equation
    its outputs' elements."""
    import math

    from jax._src import core

    inner = getattr(jaxpr, "jaxpr", jaxpr)
    checkpoints, flops = 0, 0.0
    for eqn in inner.eqns:
        name = eqn.primitive.name
        checkpoints += name in CHECKPOINT_PRIMITIVES
        out = sum(math.prod(getattr(v.aval, "shape", ())) for v in eqn.outvars)
        if name == "dot_general":
            (lhs_contract, _), _ = eqn.params["dimension_numbers"]
            shape = eqn.invars[0].aval.shape
            flops += 2.0 * out * math.prod(shape[d] for d in lhs_contract)
        else:
            flops += out
        trips = eqn.params.get("length", 1) if name == "scan" else 1
        for sub in core.jaxprs_in_params(eqn.params):
            c, f = program_work(sub)
            checkpoints += c
            flops += trips * f
    return checkpoints, flops


# --- in the script's process ----------------------------------------------------------------------
_seen: dict[int, Seen] = {}


def _shapes(args: Any) -> Any:
    import jax

    return jax.tree.map(lambda a: (tuple(a.shape), str(a.dtype)) if hasattr(a, "shape") else repr(type(a)), args)


def _name(fun: Any) -> str:
    return getattr(fun, "__name__", None) or type(fun).__name__


def _where(fun: Any) -> tuple[str, int, int]:
    """(file, first line, last line) of the Python function behind *fun* (wrappers unwrapped)."""
    import functools
    import inspect

    f = fun
    for _ in range(20):
        if isinstance(f, functools.partial):
            f = f.func
            continue
        unwrapped = inspect.unwrap(f)
        if unwrapped is f:
            break
        f = unwrapped
    code = getattr(f, "__code__", None)
    if code is None:
        return "?", 0, 0
    lines = [ln for _, _, ln in code.co_lines() if ln is not None]
    return code.co_filename, code.co_firstlineno, max(lines, default=code.co_firstlineno)


_held_funs: list[Any] = []  # every function seen, kept alive: its id is never another's


def _record(fun: Any, ji: Any) -> Seen:
    """The record of the jitted function *fun* (by the function's identity: ``jax.eval_shape(f)``
    jits *f* again, with new ``jit`` settings, each time)."""
    rec = _seen.get(id(fun))
    if rec is None:
        file, first, last = _where(fun)
        _held_funs.append(fun)
        rec = _seen[id(fun)] = Seen(_name(fun), file, first, last)
    return rec


def _inspect(rec: Seen, result: Any) -> None:
    """The checkpoints and FLOPs of *rec*'s traced program (``_infer_params``' answer), once."""
    if rec.checkpoints is not None:
        return
    try:
        rec.checkpoints, rec.flops = program_work(result[0].params["jaxpr"])
    except Exception:
        rec.checkpoints, rec.flops = 0, None


def _hold(fun: Any, ji: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The call's arguments as abstract values (shardings kept), for a step taken when the script ends."""
    import jax

    def abstract(a: Any) -> Any:
        if isinstance(a, jax.Array):
            return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding)
        return a

    static = set(ji.static_argnums)
    held_args = tuple(a if i in static else jax.tree.map(abstract, a) for i, a in enumerate(args))
    held_kwargs = {k: v if k in ji.static_argnames else jax.tree.map(abstract, v) for k, v in kwargs.items()}
    return fun, ji, held_args, held_kwargs


def _before(rec: Seen) -> str:
    others = [r for r in _seen.values() if r is not rec and r.executions]
    return ", ".join(f"{r.name} {r.executions}x" for r in others[:3])


def _take(fun: Any, info: Any, args: tuple[Any, ...], kwargs: dict[str, Any], why: str) -> None:
    """Lower the step for the target, serve the compiles, end the script."""
    from profiler.xla.retarget import on_target, target_devices
    from profiler.xla.tune_server import serve

    step, t_args, t_kwargs = on_target(fun, info, args, kwargs)
    kind = target_devices(1)[0].device_kind
    print(f"profile-step tune: the step is {_name(fun)} ({why})", file=sys.stderr, flush=True)
    serve(step, t_args, t_kwargs, kind, step_name=_name(fun), why=why)


def _at_exit(state: dict[str, Any], wanted: str | None) -> None:
    """The script ended without a step: rule 3, else the candidates over the pipe."""
    server = sys.modules.get("profiler.xla.tune_server")
    if state["taking"] or getattr(server, "serving", False):
        return
    best = None if wanted else at_the_end(list(_seen.values()))
    if best is not None and best.held is not None:
        state["taking"] = True
        fun, ji, args, kwargs = best.held
        from profiler.units import si

        why = (
            "the script ended with no function with a jax.checkpoint run twice; of those run twice with the same "
            f"shapes, the most work ({si(best.flops)}FLOP a call)"
        )
        _take(fun, ji, args, kwargs, why)
        return
    try:
        from profiler.conventions import TUNE_FDS_ENV

        wfd = int(os.environ[TUNE_FDS_ENV].split(",")[1])
        doc = {"op": "no_step", "step": wanted, "candidates": candidates(list(_seen.values()))}
        os.write(wfd, (json.dumps(doc) + "\n").encode())
    except Exception:
        pass


def install() -> None:
    """Watch the script's jit calls (see the module docstring); never raises."""
    try:
        import atexit

        from jax._src import core, pjit

        from profiler.capture.jax_own import jax_internal
    except Exception:
        return
    infer = pjit._infer_params
    wanted = os.environ.get(STEP_ENV) or None
    try:
        sel = parse_step(wanted) if wanted else None
    except ValueError:
        sel = Selector(name=wanted)
    state: dict[str, Any] = {"taking": False}
    atexit.register(_at_exit, state, wanted)  # after JAX's own: it runs before them

    def _infer_params(fun: Any, ji: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        server = sys.modules.get("profiler.xla.tune_server")
        if state["taking"] or getattr(server, "serving", False) or jax_internal(fun) or not core.trace_state_clean():
            return infer(fun, ji, args, kwargs)  # JAX's own, or a jit called inside another's trace
        executing = sys._getframe(1).f_code.co_name == "cache_miss"  # not .lower(), .trace(), .eval_shape()
        rec = _record(fun, ji)
        result = infer(fun, ji, args, kwargs)
        _inspect(rec, result)
        try:
            shapes = _shapes((args, kwargs))
        except Exception:
            shapes = None
        again = rec.sightings >= 1 and shapes == rec.shapes
        rec.sightings += 1
        rec.executions += executing
        rec.shapes = shapes
        why = None
        if sel is not None:
            if matches(sel, rec):
                why = f"named by --step {wanted}"
        elif executing and again and rec.checkpoints:
            before = _before(rec)
            why = (
                "the first jitted function with a jax.checkpoint the script called a second time with the same "
                "shapes" + (f"; before it: {before}" if before else "")
            )
        if executing and again and rec.held is None and why is None:
            try:
                rec.held = _hold(fun, ji, args, kwargs)
            except Exception:
                rec.held = None
        if why is not None:
            state["taking"] = True
            _take(fun, ji, args, kwargs, why)
        return result

    pjit._infer_params = _infer_params
    pjit._get_fastpath_data = lambda *a, **k: None  # every call back through Python, so each is seen
