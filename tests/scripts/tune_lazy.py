"""A small remat step for tune's launch key (tests/tune/test_tune_launch.py): its layer comes from a module
beside it (``tune_lazy_layers.py``), so that editing that module is a change tune must see; each start
appends its process id to the file ``$TUNE_LAZY_STARTS`` names (how the tests count the script's starts).

tune_lazy.py [--layers L] [--batch B] [--d D]
"""

import argparse
import os

import jax
import jax.numpy as jnp
from tune_lazy_layers import layer

if os.environ.get("TUNE_LAZY_STARTS"):
    with open(os.environ["TUNE_LAZY_STARTS"], "a") as f:
        f.write(f"{os.getpid()}\n")

ap = argparse.ArgumentParser()
ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--batch", type=int, default=256)
ap.add_argument("--d", type=int, default=256)
args = ap.parse_args()

block = jax.checkpoint(layer, policy=jax.checkpoint_policies.nothing_saveable)


def loss(w, x):
    y, _ = jax.lax.scan(lambda c, wl: (block(c, wl), None), x, w)
    return jnp.mean(y**2)


@jax.jit
def train_step(w, x):
    value, grads = jax.value_and_grad(loss)(w, x)
    return jax.tree.map(lambda p, g: p - 0.1 * g, w, grads), value


k1, k2 = jax.random.split(jax.random.key(0))
d = args.d
w = {"a": jax.random.normal(k1, (args.layers, d, 4 * d)) * 0.02,
     "b": jax.random.normal(k2, (args.layers, 4 * d, d)) * 0.02}  # fmt: skip
x = jnp.ones((args.batch, d))
for i in range(3):
    w, value = train_step(w, x)
    print(f"step {i}: loss {float(value):.5f}", flush=True)
