"""A long loop of small jitted steps, the shape that made capture expensive (issue 19, item 6).

capture_loop.py [--steps N] [--size N]

Plain JAX: no profile-step code, no NVTX of its own; the parameters stay on the device and the
loss is read once at the end, as a training loop that logs rarely does.
"""

import argparse

import jax
import jax.numpy as jnp

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=10_000)
ap.add_argument("--size", type=int, default=64)
args = ap.parse_args()


@jax.jit
def train_step(w, x):
    def loss(w):
        return jnp.mean(jnp.tanh(jnp.tanh(x @ w[0]) @ w[1]) ** 2)

    value, grad = jax.value_and_grad(loss)(w)
    return w - 0.01 * grad, value


w = jnp.stack([jnp.eye(args.size), jnp.eye(args.size)]) * 0.5
x = jnp.ones((32, args.size))
for _ in range(args.steps):
    w, value = train_step(w, x)
print(f"capture_loop.py: {args.steps} steps, loss {float(value):.3e}")
