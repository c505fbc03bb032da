"""NVTX ranges for training scripts profiled by ``profile-step``.

Import it from a training script (it needs only the ``nvtx`` binding, and is a
no-op without it)::

    from profiler import annotate

    policy = annotate.policy_name(default="none")   # the policy profile-step asks for
    for i in range(warmup_steps):
        with annotate.warmup(i):                     # compilation, autotuning: recorded, not analyzed
            run_step()
    with annotate.capture(policy):                   # the analysis reads only inside this range
        for i in range(steps):
            with annotate.step(i):
                run_step()

``annotate.compiled_step(jitted_step, *args)`` hands the step to profile-step:
its memory and cost analysis go into the run folder, and ``profile-step plan``
compiles it for a GPU target instead of running the script.

Range names (domain ``profile-step``): ``policy=NAME``, ``step=N``,
``layer=NAME``, ``warmup=N``.  ``profile-step`` records the whole run and
analyzes only what happened inside ``profile-step:capture``, so compilation and
warm-up stay out of the numbers (``--capture-range all`` analyzes everything;
``--capture-range nvtx:profile-step:capture`` has nsys record only inside it).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from profiler.conventions import (
    CAPTURE_RANGE,
    DOMAIN,
    LAYER_PREFIX,
    PLAN_DIR_ENV,
    POLICY_ENV,
    POLICY_PREFIX,
    RUN_DIR_ENV,
    RUNTIME_FACTS,
    STEP_PREFIX,
    WARMUP_PREFIX,
)

try:  # the binding is optional: without it the ranges are no-ops
    import nvtx as _nvtx
except ImportError:  # pragma: no cover - exercised only without the capture extra
    _nvtx = None


def available() -> bool:
    """True when NVTX ranges are really emitted."""
    return _nvtx is not None


@contextmanager
def nvtx_range(message: str, color: str | None = None) -> Iterator[None]:
    """A push/pop range in the profile-step domain."""
    if _nvtx is None:
        yield
        return
    with _nvtx.annotate(message, color=color, domain=DOMAIN):
        yield


def policy_name(default: str = "none") -> str:
    """The offload policy profile-step runs this process for (``$PROFILE_STEP_POLICY``), else
    *default*; under ``profile-step run`` the answer is recorded for the run's manifest."""
    policy = os.environ.get(POLICY_ENV) or default
    run_dir = os.environ.get(RUN_DIR_ENV)
    if run_dir and not os.path.exists(os.path.join(run_dir, RUNTIME_FACTS)):
        with contextlib.suppress(OSError):  # facts are best effort; never break the user's run
            write_runtime_facts(policy=policy)
    return policy


@contextmanager
def capture(policy: str | None = None, **facts: Any) -> Iterator[None]:
    """The captured part of the run, labelled with its policy.

    Also writes what only the running process knows (JAX version, devices,
    memory kinds, *facts*) beside the trace, for the run's manifest, and at the
    end of the window each device's ``memory_stats()`` (peak, limit).  Facts
    profile-step reads: ``model_flops_per_step`` (for MFU), ``tokens_per_step``.
    """
    policy = policy or policy_name()
    write_runtime_facts(policy=policy, **facts)
    if _nvtx is None and os.environ.get(RUN_DIR_ENV):
        print(
            "profile-step: the Python nvtx binding is missing, so no NVTX range is emitted and the "
            "analysis cannot see where capture() begins (it reads the whole run); install it "
            "(pip install 'nvtx>=0.2.8,<0.2.12')",
            file=sys.stderr,
            flush=True,
        )
    try:
        with nvtx_range(CAPTURE_RANGE), nvtx_range(POLICY_PREFIX + policy, color="purple"):
            yield
    finally:
        if os.environ.get(RUN_DIR_ENV):
            from profiler.xla.handover import device_memory

            write_runtime_facts(policy=policy, **facts, device_memory=device_memory())


def planning() -> bool:
    """True under ``profile-step plan``: the step will be compiled for a GPU target, not run, so
    abstract inputs (``jax.eval_shape``) do instead of initialized ones."""
    return bool(os.environ.get(PLAN_DIR_ENV))


def compiled_step(step: Any, *args: Any, **kwargs: Any) -> Any:
    """Hand the training step (a ``jax.jit`` function) and its arguments (arrays or
    ``jax.ShapeDtypeStruct``) to profile-step; call it before the training loop.

    Under ``profile-step run`` its ``memory_analysis()`` and ``cost_analysis()``
    are recorded; under ``profile-step plan`` it is compiled for the GPU target
    and the script stops here.  Returns the ``Compiled`` step, or None when not
    run by profile-step.
    """
    from profiler.xla.handover import compiled_step as hand_over

    return hand_over(step, args, kwargs)


def step(index: int) -> Any:
    """One training step."""
    return nvtx_range(f"{STEP_PREFIX}{index}", color="green")


def layer(name: str | int) -> Any:
    """A layer, when the script dispatches layers from Python."""
    return nvtx_range(f"{LAYER_PREFIX}{name}", color="blue")


def warmup(index: int) -> Any:
    """A warm-up step (compilation, autotuning): excluded from the capture and from summaries."""
    return nvtx_range(f"{WARMUP_PREFIX}{index}", color="yellow")


def _binding_version() -> str | None:
    if _nvtx is None:
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nvtx")
    except PackageNotFoundError:
        return None


def write_runtime_facts(**facts: Any) -> None:
    """Write ``runtime.json`` into ``$PROFILE_STEP_RUN_DIR`` (when profile-step set it)."""
    run_dir = os.environ.get(RUN_DIR_ENV)
    if not run_dir:
        return
    doc: dict[str, Any] = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "nvtx_binding": _binding_version(),
        **facts,
    }
    jax = sys.modules.get("jax")
    if jax is not None:
        try:
            import jaxlib

            doc["jax"] = jax.__version__
            doc["jaxlib"] = jaxlib.__version__
            doc["backend"] = jax.default_backend()
            doc["devices"] = [
                {
                    "id": d.id,
                    "kind": d.device_kind,
                    "platform": d.platform,
                    "memory_kinds": [m.kind for m in d.addressable_memories()],
                }
                for d in jax.local_devices()
            ]
        except Exception as exc:  # facts are best effort; never break the user's run
            doc["jax_error"] = repr(exc)
    path = os.path.join(run_dir, RUNTIME_FACTS)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(doc, fh, indent=2, default=str)
    os.replace(tmp, path)
