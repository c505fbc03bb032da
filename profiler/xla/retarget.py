"""A step traced in the script's process, lowered for the GPU target on a machine without one.

Used by ``profile-step tune`` (the step caught by ``profiler.capture.step_catch``) and by
``profile-step plan`` and ``tune`` on a step handed over (``annotate.compiled_step``): the step's
arguments, its ``jit`` shardings, the meshes in force and every sharding, mesh or device a
primitive is bound with while it is traced (a model that keeps its own mesh and constrains its
activations with it: MaxText; a step that moves a tensor with ``jax.device_put(x,
sharding.with_memory_kind("pinned_host"))``, the sharding of its arguments' devices) move from the
script's devices to as many devices of the target (``jax.experimental.topologies``, deviceless),
a mesh of the same axes and shape, memory kinds kept.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from profiler.conventions import PLAN_TARGET_ENV

TARGET_PLATFORMS = ("gpu", "cuda")


def target_devices(n: int) -> list[Any]:
    """*n* devices of the target described by ``$PROFILE_STEP_PLAN_TARGET`` (deviceless)."""
    from jax.experimental import topologies

    spec_path = os.environ.get(PLAN_TARGET_ENV)
    spec = Path(spec_path).read_text() if spec_path else ""
    shape = f"1x1x{n}" if n <= 8 else f"1x{(n + 7) // 8}x8"
    return list(topologies.get_topology_desc("profile-step", "cuda", target_config=spec, topology=shape).devices)[:n]


def _foreign_devices(devices: Any) -> bool:
    """Whether *devices* are the script's (not the target's)."""
    try:
        return any(d.platform not in TARGET_PLATFORMS for d in devices)
    except Exception:
        return False


class Retarget:
    """Maps the script's meshes, shardings and devices onto the target's, one mesh per shape."""

    def __init__(self) -> None:
        self.meshes: dict[Any, Any] = {}
        self.devices: list[Any] | None = None

    def mesh(self, mesh: Any) -> Any:
        import jax
        import numpy as np

        key = (tuple(mesh.axis_names), tuple(mesh.devices.shape))
        if key not in self.meshes:
            n = int(np.prod(mesh.devices.shape))
            grid = np.array(target_devices(n)).reshape(mesh.devices.shape)
            types = getattr(mesh, "axis_types", None)
            self.meshes[key] = (
                jax.sharding.Mesh(grid, mesh.axis_names, axis_types=types)
                if types is not None
                else jax.sharding.Mesh(grid, mesh.axis_names)
            )
        return self.meshes[key]

    def one(self) -> Any:
        """A mesh of one target device."""
        import jax
        import numpy as np

        if self.devices is None:
            self.devices = target_devices(1)
        return jax.sharding.Mesh(np.array(self.devices), ("d",))

    def sharding(self, s: Any) -> Any:
        """*s* on the target: a named sharding on the mapped mesh; any other (one device, positional)
        replicated on one target device; its memory kind kept.  UNSPECIFIED, None, AUTO: as given."""
        import jax

        if isinstance(s, jax.sharding.NamedSharding) and hasattr(s.mesh, "devices"):
            return jax.sharding.NamedSharding(self.mesh(s.mesh), s.spec, memory_kind=s.memory_kind)
        if isinstance(s, jax.sharding.Sharding):
            kind = getattr(s, "memory_kind", None)
            return jax.sharding.NamedSharding(self.one(), jax.sharding.PartitionSpec(), memory_kind=kind)
        return s

    def arg(self, a: Any) -> Any:
        """An argument as an abstract value on the target (numpy arrays and scalars replicated)."""
        import jax

        if isinstance(a, (jax.Array, jax.ShapeDtypeStruct)) and getattr(a, "sharding", None) is not None:
            return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=self.sharding(a.sharding))
        if hasattr(a, "shape") and hasattr(a, "dtype"):
            return jax.ShapeDtypeStruct(
                a.shape, a.dtype, sharding=jax.sharding.NamedSharding(self.one(), jax.sharding.PartitionSpec())
            )
        return a

    def value(self, v: Any) -> Any:
        """A primitive's parameter on the target: the script's shardings, meshes and devices moved
        (``device_put``'s ``devices``: a sharding of any kind, or a device), anything else as is."""
        import jax

        if isinstance(v, jax.sharding.Sharding):
            try:
                devices = v.device_set
            except Exception:  # a sharding over an abstract mesh: no devices to move
                return v
            return self.sharding(v) if _foreign_devices(devices) else v
        if isinstance(v, jax.sharding.Mesh):
            return self.mesh(v) if _foreign_devices(v.devices.flat) else v
        if isinstance(v, jax.Device):
            return self.sharding(jax.sharding.SingleDeviceSharding(v)) if _foreign_devices([v]) else v
        if (
            isinstance(v, tuple)
            and v
            and any(isinstance(x, (jax.sharding.Sharding, jax.sharding.Mesh, jax.Device)) for x in v)
        ):
            return tuple(self.value(x) for x in v)
        return v

    def info(self, info: Any) -> Any:
        """A ``jit``'s settings with its shardings on the target, no device or backend of the script's."""
        return info._replace(
            in_shardings_leaves=tuple(self.sharding(s) for s in info.in_shardings_leaves),
            out_shardings_leaves=tuple(self.sharding(s) for s in info.out_shardings_leaves),
            device=None,
            backend=None,
        )


@contextlib.contextmanager
def binding_on(rt: Retarget) -> Iterator[None]:
    """While inside: every primitive bound gets its shardings, meshes and devices on the target."""
    from jax._src import core

    original = core.Primitive.bind

    def bind(prim: Any, *a: Any, **params: Any) -> Any:
        return original(prim, *a, **{k: rt.value(v) for k, v in params.items()})

    core.Primitive.bind = bind  # type: ignore[method-assign]
    try:
        yield
    finally:
        core.Primitive.bind = original  # type: ignore[method-assign]


class OnTarget:
    """The script's jitted step, traced and lowered for the target (``lower`` and ``trace`` as jit's)."""

    def __init__(self, fun: Any, info: Any, context: Callable[[], Any], rt: Retarget) -> None:
        self._fun = fun
        self._jit_info = rt.info(info)
        self.context = context  # () -> a context manager: the script's mesh, mapped to the target
        self.rt = rt
        self.__name__ = getattr(fun, "__name__", type(fun).__name__)

    def trace(self, *args: Any, **kwargs: Any) -> Any:
        from jax._src import pjit

        with binding_on(self.rt), self.context():
            return pjit.jit_trace(self, *args, **kwargs)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        with self.context():
            return self.trace(*args, **kwargs).lower()


def script_context(rt: Retarget) -> Callable[[], Any]:
    """The script's mesh contexts now (``with mesh:``, ``jax.set_mesh``), on the target's devices;
    nothing when it has none."""
    import jax
    from jax._src import mesh as mesh_lib

    def nonempty(get: Any) -> Any:
        try:
            m = get()
        except Exception:
            return None
        return None if m is None or getattr(m, "empty", True) else m

    physical = nonempty(lambda: mesh_lib.thread_resources.env.physical_mesh)
    concrete = nonempty(getattr(mesh_lib, "get_concrete_mesh", lambda: None))
    targets = [rt.mesh(physical) if physical is not None else None, rt.mesh(concrete) if concrete is not None else None]

    @contextlib.contextmanager
    def ctx() -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            if targets[0] is not None:
                stack.enter_context(targets[0])
            if targets[1] is not None:
                stack.enter_context(jax.set_mesh(targets[1]))
            yield

    return ctx


def on_target(
    fun: Any, info: Any, args: tuple[Any, ...], kwargs: dict[str, Any], one_device: bool = False
) -> tuple[OnTarget, tuple[Any, ...], dict[str, Any]]:
    """The step (its function and ``jit`` settings) and its arguments, on the target; static
    arguments as given.  *one_device* (``plan``: one device, no sharding): every argument replicated
    on one target device, its memory kind kept."""
    import jax

    rt = Retarget()

    def single(a: Any) -> Any:
        if not (hasattr(a, "shape") and hasattr(a, "dtype")):
            return a
        kind = getattr(getattr(a, "sharding", None), "memory_kind", None)
        rep = jax.sharding.NamedSharding(rt.one(), jax.sharding.PartitionSpec(), memory_kind=kind)
        return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep)

    move = single if one_device else rt.arg
    static = set(info.static_argnums)
    t_args = tuple(a if i in static else jax.tree.map(move, a) for i, a in enumerate(args))
    t_kwargs = {k: v if k in info.static_argnames else jax.tree.map(move, v) for k, v in kwargs.items()}
    return OnTarget(fun, info, script_context(rt), rt), t_args, t_kwargs
