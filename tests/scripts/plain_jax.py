"""A plain JAX training loop that knows nothing of profile-step: a jitted step, its own NVTX ranges.

plain_jax.py [--steps N] [--warmup N]
"""

import argparse

import jax
import jax.numpy as jnp

try:
    import nvtx
except ImportError:  # the loop runs without its ranges
    nvtx = None

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=4)
ap.add_argument("--warmup", type=int, default=1)
args = ap.parse_args()


@jax.jit
def train_step(w, x, y):
    def loss(w):
        return jnp.mean((jnp.tanh(x @ w) - y) ** 2)

    value, grad = jax.value_and_grad(loss)(w)
    return w - 0.1 * grad, value


def annotate(name):
    return nvtx.annotate(name) if nvtx else __import__("contextlib").nullcontext()


w = jnp.zeros((64, 16))
x, y = jnp.ones((32, 64)), jnp.ones((32, 16))
for i in range(args.warmup + args.steps):
    with annotate(f"train_step {i}"):
        w, value = train_step(w, x, y)
        value.block_until_ready()
    print(f"step {i} loss {float(value):.4f}", flush=True)
