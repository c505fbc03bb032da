"""A long loop of small jitted steps, the shape that made capture expensive (issue 19, item 6).

capture_loop.py [--steps N] [--size N]

Plain JAX: no profile-step code, no NVTX of its own; the parameters stay on the device and the
loss is read once at the end, as a training loop that logs rarely does.  ``hook_cost.py`` times
this step (``start`` and ``train_step``, imported).
"""

import argparse

import jax
import jax.numpy as jnp


@jax.jit
def train_step(w, x):
    def loss(w):
        return jnp.mean(jnp.tanh(jnp.tanh(x @ w[0]) @ w[1]) ** 2)

    value, grad = jax.value_and_grad(loss)(w)
    return w - 0.01 * grad, value


def start(size):
    """The weights and the batch the loop starts from."""
    return jnp.stack([jnp.eye(size), jnp.eye(size)]) * 0.5, jnp.ones((32, size))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--size", type=int, default=64)
    args = ap.parse_args()
    w, x = start(args.size)
    for _ in range(args.steps):
        w, value = train_step(w, x)
    print(f"capture_loop.py: {args.steps} steps, loss {float(value):.3e}")
