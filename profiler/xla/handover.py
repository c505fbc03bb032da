"""What ``profiler.annotate`` does with a training step a script hands over, inside the
script's process.

- Under ``profile-step run`` (``$PROFILE_STEP_RUN_DIR``): compile the step for
  the arguments given (JAX reuses the executable it already has), write its
  module name, ``memory_analysis()`` and ``cost_analysis()`` to
  ``compiled_step.json``, and its optimized HLO when profile-step keeps no dump.
- Under ``profile-step plan`` (``$PROFILE_STEP_PLAN_DIR``): compile it for the
  GPU target described by ``$PROFILE_STEP_PLAN_TARGET`` without a GPU
  (deviceless ahead-of-time compilation), write the same facts and the HLO, and
  stop the script (nothing runs).
- Otherwise: nothing.

Also the device memory counters at the end of the captured window.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from profiler.conventions import (
    COMPILED_STEP,
    PLAN_DIR_ENV,
    PLAN_TARGET_ENV,
    RUN_DIR_ENV,
    TUNE_FDS_ENV,
    XLA_DUMP_ENV,
)
from profiler.xla.compiled import cost_analysis, memory_fields, module_name, pick_costs
from profiler.xla.same_program import entry_signature

MEMORY_STATS_KEYS = ("peak_bytes_in_use", "bytes_limit", "bytes_in_use", "largest_alloc_size", "num_allocs")


def _write(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def describe_compiled(compiled: Any, hlo_text: str) -> dict[str, Any]:
    """Module name, memory analysis and cost analysis of a ``jax.stages.Compiled``."""
    doc: dict[str, Any] = {"module": module_name(hlo_text), "signature": entry_signature(hlo_text), "notes": []}
    try:
        doc["memory"] = memory_fields(compiled.memory_analysis())
    except Exception as exc:  # backends without it raise their own errors
        doc["memory"] = None
        doc["notes"].append(f"memory_analysis() failed: {exc}")
    try:
        doc["cost"] = pick_costs(compiled.cost_analysis())
        doc["cost_source"] = "compiled.cost_analysis()"
    except Exception as exc:
        doc["cost"] = None
        doc["notes"].append(f"cost_analysis() failed: {exc}")
    if not doc["cost"]:
        doc["cost"], why = cost_analysis(hlo_text)
        doc["cost_source"] = "XLA's cost analysis of the optimized module, run by the CPU client"
        if why:
            doc["notes"].append(why)
    return doc


def _platform(compiled: Any) -> str | None:
    """``cpu`` or ``gpu``: the backend of the step's devices (of JAX's default one without arguments)."""
    try:
        import jax

        shardings = [s for s in jax.tree.leaves(compiled.input_shardings) if hasattr(s, "device_set")]
        plat = next(iter(shardings[0].device_set)).platform if shardings else jax.default_backend()
    except Exception:  # never break the user's run for a label
        return None
    return "gpu" if plat in ("gpu", "cuda", "rocm") else plat


def compiled_step(step: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """See the module docstring; returns the ``Compiled`` step (None when not under profile-step)."""
    plan_dir = os.environ.get(PLAN_DIR_ENV)
    run_dir = os.environ.get(RUN_DIR_ENV)
    if plan_dir:
        return _plan(step, args, kwargs, Path(plan_dir))
    if not run_dir:
        return None
    if not hasattr(step, "lower"):
        print("profile-step: annotate.compiled_step() needs a jax.jit function (with .lower)", file=sys.stderr)
        return None
    try:
        compiled = step.lower(*args, **kwargs).compile()
        text = compiled.as_text()
    except Exception as exc:  # never break the user's run
        _write(Path(run_dir) / COMPILED_STEP, {"module": None, "notes": [f"compiling the step failed: {exc}"]})
        return None
    doc = describe_compiled(compiled, text)
    doc["source"] = "annotate.compiled_step (in the process)"
    doc["platform"] = _platform(compiled)
    if not os.environ.get(XLA_DUMP_ENV):
        hlo = Path(run_dir) / "compiled_step.hlo.txt"
        hlo.write_text(text)
        doc["hlo_file"] = hlo.name
    _write(Path(run_dir) / COMPILED_STEP, doc)
    return compiled


def for_target(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any], str]:
    """The step's arguments as abstract values on one device of the GPU target
    (``$PROFILE_STEP_PLAN_TARGET``, deviceless), and that device's kind."""
    import jax
    from jax.experimental import topologies

    spec_path = os.environ.get(PLAN_TARGET_ENV)
    spec = Path(spec_path).read_text() if spec_path else ""
    topo = topologies.get_topology_desc("profile-step", "cuda", target_config=spec, topology="1x1x1")
    mesh = jax.sharding.Mesh(topo.devices, ("d",))
    rep = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())

    def abstract(a: Any) -> Any:
        if hasattr(a, "shape") and hasattr(a, "dtype"):
            return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep)
        return a

    return jax.tree.map(abstract, args), jax.tree.map(abstract, kwargs), topo.devices[0].device_kind


def _plan(step: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Path) -> Any:
    """Deviceless compilation for the target; writes the facts and ends the script."""
    doc: dict[str, Any] = {"module": None, "notes": []}
    try:
        if hasattr(step, "_fun") and hasattr(step, "_jit_info"):  # a jax.jit function: traced for the target
            from profiler.xla.retarget import on_target, target_devices

            step, sds_args, sds_kwargs = on_target(step._fun, step._jit_info, args, kwargs, one_device=True)
            doc["device_kind"] = target_devices(1)[0].device_kind
        else:
            sds_args, sds_kwargs, doc["device_kind"] = for_target(args, kwargs)
        if os.environ.get(TUNE_FDS_ENV):  # profile-step tune: one compile per policy it asks for
            from profiler.xla.tune_server import serve

            serve(step, sds_args, sds_kwargs, doc["device_kind"])
        compiled = step.lower(*sds_args, **sds_kwargs).compile()
        text = compiled.as_text()
    except Exception as exc:
        doc["notes"].append(f"compiling the step for the target failed: {type(exc).__name__}: {exc}")
        _write(out / COMPILED_STEP, doc)
        raise SystemExit(3) from None
    doc.update(describe_compiled(compiled, text))
    doc["source"] = "deviceless compilation for the target (profile-step plan)"
    (out / "step.hlo.txt").write_text(text)
    doc["hlo_file"] = "step.hlo.txt"
    _write(out / COMPILED_STEP, doc)
    print(f"profile-step plan: compiled {doc['module']} for {doc.get('device_kind')}; stopping the script here")
    raise SystemExit(0)


def device_memory() -> dict[str, Any]:
    """Per local device ``memory_stats()`` (peak and limit), or why there are none."""
    jax = sys.modules.get("jax")
    if jax is None:
        return {"available": False, "note": "JAX was not imported by the script"}
    per = []
    try:
        devices = jax.local_devices()
        for d in devices:
            stats = d.memory_stats()
            if stats:
                per.append({"id": d.id, "kind": d.device_kind, **{k: stats.get(k) for k in MEMORY_STATS_KEYS}})
    except Exception as exc:
        return {"available": False, "note": f"memory_stats() failed: {exc}"}
    if not per:
        backend = devices[0].platform if devices else "?"
        return {
            "available": False,
            "note": f"jax.Device.memory_stats() returned nothing on the {backend} backend",
        }
    return {"available": True, "devices": per}
