"""Under ``profile-step tune``, in the script's process: take the training step from a script that
hands none over (no ``annotate.compiled_step``), and compile it for the GPU target.

The start-up hook calls :func:`install` when ``$PROFILE_STEP_TUNE_FDS`` is set.  Every call of a
``jax.jit`` function of the script goes through JAX's Python path (the C++ fast path is turned
off; JAX's own jitted functions are left out), where its function, its ``jit`` settings and its
arguments are seen (``.lower()`` counts as a call; a jit called while another is traced does
not).  The step is the first of them the script calls a second time with arguments of the
same shapes (a training loop's second step; MaxText's ``train_step``, lowered once for its
memory report, then called), or the one named by ``$PROFILE_STEP_TUNE_STEP``.  At that call,
in the script's own context (its mesh, its axis rules), the step is lowered again for the
target: its arguments, its ``jit`` shardings, the meshes in force and every sharding or mesh a
primitive is bound with while it is traced (a model that keeps its own mesh and constrains
its activations with it: MaxText) move from the script's devices to as many devices of the
target (``jax.experimental.topologies``, deviceless), a mesh of the same axes and shape; then
``profiler.xla.tune_server`` compiles it under each policy asked for and the script ends.  A
script that runs no step twice ends without a step (the session says so).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from profiler.conventions import PLAN_TARGET_ENV

STEP_ENV = "PROFILE_STEP_TUNE_STEP"  # the name of the jitted function to take as the step
_seen: dict[int, dict[str, Any]] = {}


def _shapes(args: Any) -> Any:
    import jax

    return jax.tree.map(lambda a: (tuple(a.shape), str(a.dtype)) if hasattr(a, "shape") else repr(type(a)), args)


def _name(fun: Any) -> str:
    return getattr(fun, "__name__", None) or type(fun).__name__


def _target_devices(n: int) -> list[Any]:
    from pathlib import Path

    from jax.experimental import topologies

    spec_path = os.environ.get(PLAN_TARGET_ENV)
    spec = Path(spec_path).read_text() if spec_path else ""
    shape = f"1x1x{n}" if n <= 8 else f"1x{(n + 7) // 8}x8"
    return list(topologies.get_topology_desc("profile-step", "cuda", target_config=spec, topology=shape).devices)[:n]


class _Retarget:
    """Maps the script's meshes and shardings onto the target's devices, one mesh per shape."""

    def __init__(self) -> None:
        self.meshes: dict[Any, Any] = {}
        self.devices: list[Any] | None = None

    def mesh(self, mesh: Any) -> Any:
        import jax
        import numpy as np

        key = (tuple(mesh.axis_names), tuple(mesh.devices.shape))
        if key not in self.meshes:
            n = int(np.prod(mesh.devices.shape))
            devs = _target_devices(n)
            grid = np.array(devs).reshape(mesh.devices.shape)
            types = getattr(mesh, "axis_types", None)
            self.meshes[key] = (
                jax.sharding.Mesh(grid, mesh.axis_names, axis_types=types)
                if types is not None
                else jax.sharding.Mesh(grid, mesh.axis_names)
            )
        return self.meshes[key]

    def one(self) -> Any:
        import jax
        import numpy as np

        if self.devices is None:
            self.devices = _target_devices(1)
        return jax.sharding.Mesh(np.array(self.devices), ("d",))

    def sharding(self, s: Any) -> Any:
        import jax

        if isinstance(s, jax.sharding.NamedSharding) and hasattr(s.mesh, "devices"):
            return jax.sharding.NamedSharding(self.mesh(s.mesh), s.spec, memory_kind=s.memory_kind)
        if isinstance(s, jax.sharding.Sharding):
            kind = getattr(s, "memory_kind", None)
            return jax.sharding.NamedSharding(self.one(), jax.sharding.PartitionSpec(), memory_kind=kind)
        return s  # UNSPECIFIED, None, AUTO: as the script gave it

    def arg(self, a: Any) -> Any:
        import jax

        if isinstance(a, (jax.Array, jax.ShapeDtypeStruct)) and getattr(a, "sharding", None) is not None:
            return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=self.sharding(a.sharding))
        if hasattr(a, "shape") and hasattr(a, "dtype"):  # numpy arrays and scalars
            return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=self._rep())
        return a

    def value(self, v: Any) -> Any:
        """A primitive's parameter on the target: shardings and meshes moved, anything else as is."""
        import jax

        if isinstance(v, jax.sharding.NamedSharding):
            return self.sharding(v) if self._foreign(v.mesh) else v
        if isinstance(v, jax.sharding.Mesh):
            return self.mesh(v) if self._foreign(v) else v
        if (
            isinstance(v, tuple)
            and v
            and any(isinstance(x, (jax.sharding.NamedSharding, jax.sharding.Mesh)) for x in v)
        ):
            return tuple(self.value(x) for x in v)
        return v

    def _foreign(self, mesh: Any) -> bool:
        """Whether *mesh* holds the script's devices rather than the target's."""
        try:
            return any(d.platform != "gpu" and d.platform != "cuda" for d in mesh.devices.flat)
        except Exception:
            return False

    def _rep(self) -> Any:
        import jax

        return jax.sharding.NamedSharding(self.one(), jax.sharding.PartitionSpec())


class CaughtStep:
    """The script's jitted step, lowered again for the target (``lower`` and ``trace`` as jit's)."""

    def __init__(self, fun: Any, info: Any, context: Any, rt: _Retarget) -> None:
        self._fun = fun
        self._jit_info = info
        self.context = context  # () -> a context manager: the script's mesh, mapped to the target
        self.rt = rt

    def trace(self, *args: Any, **kwargs: Any) -> Any:
        from jax._src import core, pjit

        original = core.Primitive.bind
        rt = self.rt

        def bind(prim: Any, *a: Any, **params: Any) -> Any:
            return original(prim, *a, **{k: rt.value(v) for k, v in params.items()})

        core.Primitive.bind = bind  # type: ignore[method-assign]
        try:
            with self.context():
                return pjit.jit_trace(self, *args, **kwargs)
        finally:
            core.Primitive.bind = original  # type: ignore[method-assign]

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        with self.context():
            return self.trace(*args, **kwargs).lower()


def _context(rt: _Retarget) -> Any:
    """The script's mesh contexts at the call (``with mesh:``, ``jax.set_mesh``), on the target's
    devices; nothing when it has none."""
    import contextlib

    import jax

    def nonempty(get: Any) -> Any:
        try:
            m = get()
        except Exception:
            return None
        return None if m is None or getattr(m, "empty", True) else m

    from jax._src import mesh as mesh_lib

    physical = nonempty(lambda: mesh_lib.thread_resources.env.physical_mesh)
    concrete = nonempty(getattr(mesh_lib, "get_concrete_mesh", lambda: None))
    targets = [rt.mesh(physical) if physical is not None else None, rt.mesh(concrete) if concrete is not None else None]

    @contextlib.contextmanager
    def ctx() -> Any:
        with contextlib.ExitStack() as stack:
            if targets[0] is not None:
                stack.enter_context(targets[0])
            if targets[1] is not None:
                stack.enter_context(jax.set_mesh(targets[1]))
            yield

    return ctx


def _take(fun: Any, info: Any, args: tuple[Any, ...], kwargs: dict[str, Any], why: str) -> None:
    """Lower the step for the target, serve the compiles, end the script."""
    import jax

    from profiler.xla.tune_server import serve

    rt = _Retarget()
    new_info = info._replace(
        in_shardings_leaves=tuple(rt.sharding(s) for s in info.in_shardings_leaves),
        out_shardings_leaves=tuple(rt.sharding(s) for s in info.out_shardings_leaves),
        device=None,
        backend=None,
    )
    static = set(info.static_argnums)
    t_args = tuple(a if i in static else jax.tree.map(rt.arg, a) for i, a in enumerate(args))
    t_kwargs = {k: v if k in info.static_argnames else jax.tree.map(rt.arg, v) for k, v in kwargs.items()}
    step = CaughtStep(fun, new_info, _context(rt), rt)
    kind = _target_devices(1)[0].device_kind
    print(f"profile-step tune: the step is {_name(fun)} ({why})", file=sys.stderr, flush=True)
    serve(step, t_args, t_kwargs, kind, step_name=_name(fun), why=why)


def install() -> None:
    """Watch the script's jit calls (see the module docstring); never raises."""
    try:
        from jax._src import core, pjit

        from profiler.capture.jax_own import jax_internal
    except Exception:
        return
    infer = pjit._infer_params
    wanted = os.environ.get(STEP_ENV)
    state = {"taking": False}

    def _infer_params(fun: Any, ji: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        server = sys.modules.get("profiler.xla.tune_server")
        if state["taking"] or getattr(server, "serving", False) or jax_internal(fun) or not core.trace_state_clean():
            return infer(fun, ji, args, kwargs)  # JAX's own, or a jit called inside another's trace
        rec = _seen.setdefault(id(ji), {"name": _name(fun), "calls": 0, "shapes": None})
        rec["calls"] += 1
        try:
            shapes = _shapes((args, kwargs))
        except Exception:
            shapes = None
        why = None
        if wanted:
            if rec["name"] == wanted:
                why = f"named by --step {wanted}"
        elif rec["calls"] >= 2 and shapes == rec["shapes"]:
            others = [r for k, r in _seen.items() if k != id(ji)]
            ran = ", ".join(f"{r['name']} {r['calls']}x" for r in others[:3])
            why = "the first jitted function the script called a second time" + (f"; before it: {ran}" if ran else "")
        rec["shapes"] = shapes
        if why is not None:
            state["taking"] = True
            _take(fun, ji, args, kwargs, why)
        return infer(fun, ji, args, kwargs)

    pjit._infer_params = _infer_params
    pjit._get_fastpath_data = lambda *a, **k: None  # every call back through Python, so each is seen
