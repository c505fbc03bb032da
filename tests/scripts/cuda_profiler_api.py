"""A JAX loop that marks its steady state the way MaxText's profiler=nsys does: cudaProfilerStart()
before the measured steps, cudaProfilerStop() after, called here through ctypes.

Without a usable CUDA runtime the calls cannot take effect: the script says so and runs on.

cuda_profiler_api.py [--warmup N] [--steps N]
"""

import argparse
import ctypes

import jax
import jax.numpy as jnp

try:
    import nvtx
except ImportError:
    nvtx = None

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--warmup", type=int, default=2)
args = ap.parse_args()


def cudart():
    """The CUDA runtime library, or None (and why) when none can be loaded."""
    names = ["libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"]
    try:  # JAX's CUDA wheels bring their own, off the loader's path
        import glob
        import os

        import nvidia.cuda_runtime

        for d in nvidia.cuda_runtime.__path__:
            names += sorted(glob.glob(os.path.join(d, "lib", "libcudart.so*")))
    except ImportError:
        pass
    errors = []
    for name in names:
        try:
            return ctypes.CDLL(name), None
        except OSError as exc:
            errors.append(str(exc))
    return None, "; ".join(errors)


def profiler_call(rt, name):
    """cudaProfilerStart/Stop; says clearly when it cannot take effect."""
    if rt is None:
        return
    code = getattr(rt, name)()
    if code != 0:
        rt.cudaGetErrorString.restype = ctypes.c_char_p
        text = rt.cudaGetErrorString(code).decode()
        print(f"no CUDA runtime: {name}() returned {code} ({text}); nothing marks the steady state", flush=True)


@jax.jit
def train_step(w, x):
    grad = jax.grad(lambda w: jnp.mean((x @ w) ** 2))(w)
    return w - 0.1 * grad


def annotate(name):
    return nvtx.annotate(name) if nvtx else __import__("contextlib").nullcontext()


rt, why = cudart()
if rt is None:
    print(f"no CUDA runtime: libcudart cannot be loaded ({why}); nothing marks the steady state", flush=True)
w, x = jnp.ones((64, 64)), jnp.ones((32, 64))
for i in range(args.warmup):
    with annotate(f"warmup {i}"):
        w = train_step(w, x).block_until_ready()
profiler_call(rt, "cudaProfilerStart")
for i in range(args.steps):
    with annotate(f"train_step {i}"):
        w = train_step(w, x).block_until_ready()
    print(f"step {i} done", flush=True)
profiler_call(rt, "cudaProfilerStop")
with annotate("after the profiler stopped"):
    w = train_step(w, x).block_until_ready()
