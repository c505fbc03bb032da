"""A plain JAX training loop with rematerialized layers that knows nothing of profile-step.

Its layers are in ``jax.checkpoint`` with ``checkpoint_name`` tags (``proj``, ``hidden``), under
``lax.scan``; an init jit runs once, the step each iteration.  ``--devices N`` shards the batch
over a mesh of N devices (on a CPU: XLA_FLAGS=--xla_force_host_platform_device_count=N).

plain_remat.py [--steps N] [--devices N] [--layers L] [--batch B] [--d D]
"""

import argparse
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import Mesh, NamedSharding, PartitionSpec

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--devices", type=int, default=1)
ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--d", type=int, default=128)
args = ap.parse_args()


def layer(x, w):
    proj = checkpoint_name(x @ w["a"], "proj")
    hidden = checkpoint_name(jax.nn.gelu(proj), "hidden")
    return x + hidden @ w["b"]


block = jax.checkpoint(layer, policy=jax.checkpoint_policies.nothing_saveable)


def loss(w, x):
    y, _ = jax.lax.scan(lambda c, wl: (block(c, wl), None), x, w)
    return jnp.mean(y**2)


mesh = Mesh(np.array(jax.devices()[: args.devices]), ("data",))
batch_sharding = NamedSharding(mesh, PartitionSpec("data"))
replicated = NamedSharding(mesh, PartitionSpec())


@jax.jit
def init(key):
    k1, k2 = jax.random.split(key)
    d, f = args.d, 4 * args.d
    return {
        "a": jax.random.normal(k1, (args.layers, d, f)) * 0.02,
        "b": jax.random.normal(k2, (args.layers, f, d)) * 0.02,
    }


@partial(jax.jit, donate_argnums=0, in_shardings=(replicated, batch_sharding), out_shardings=(replicated, replicated))
def train_step(w, x):
    value, grads = jax.value_and_grad(loss)(w, x)
    return jax.tree.map(lambda p, g: p - 0.1 * g, w, grads), value


w = init(jax.random.key(0))
x = jax.device_put(jnp.ones((args.batch, args.d)), batch_sharding)
for i in range(args.steps):
    w, value = train_step(w, x)
    print(f"step {i}: loss {float(value):.5f}", flush=True)
