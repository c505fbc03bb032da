"""A script that assigns XLA_FLAGS itself before importing JAX, replacing what it was given.

own_xla_flags.py [--steps N] [--after-import]   (--after-import: assign after ``import jax``)
"""

import os
import sys

MINE = "--xla_cpu_enable_fast_math=false"
if "--after-import" not in sys.argv:
    os.environ["XLA_FLAGS"] = MINE

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

if "--after-import" in sys.argv:
    os.environ["XLA_FLAGS"] = MINE
steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 3


@jax.jit
def step(w, x):
    return w - 0.01 * jnp.tanh(x.T @ (x @ w))


w, x = jnp.zeros((64, 64)), jnp.ones((16, 64))
for _ in range(steps):
    w = step(w, x)
w.block_until_ready()
print(f"done {steps} steps; XLA_FLAGS in the script: {os.environ.get('XLA_FLAGS')}", flush=True)
