"""A plain JAX training loop (no profiler.annotate) in the patterns of public host-offloading
programs: layers under ``lax.scan``, activations offloaded by a checkpoint policy, parameters
and optimizer state kept in ``pinned_host`` and brought to the device inside the step.

host_placed.py [--steps N] [--layers N] [--width N] [--reads-policy]

It swallows unknown flags (``parse_known_args``) and, without ``--reads-policy``, never reads
``$PROFILE_STEP_POLICY``: every policy then compiles the same step.  With it, ``none`` saves
every activation, ``remat`` recomputes them and any other policy offloads them.
"""

import argparse
import os

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--layers", type=int, default=2)
ap.add_argument("--width", type=int, default=64)
ap.add_argument("--reads-policy", action="store_true")
args, _unknown = ap.parse_known_args()  # swallows --policy NAME

policy_name = os.environ.get("PROFILE_STEP_POLICY", "offload") if args.reads_policy else "offload"
if policy_name == "none":
    policy = jax.checkpoint_policies.everything_saveable
elif policy_name == "remat":
    policy = jax.checkpoint_policies.nothing_saveable
else:
    policy = jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[],
        names_which_can_be_offloaded=["hidden"],
        offload_src="device",
        offload_dst="pinned_host",
    )

mesh = jax.make_mesh((1,), ("d",))
host = NamedSharding(mesh, P(), memory_kind="pinned_host")
device = NamedSharding(mesh, P(), memory_kind="device")


def block(x, w):
    h = checkpoint_name(jnp.tanh(x @ w), "hidden")
    return jnp.tanh(h @ w.T), None


def loss(ws, x):
    y, _ = jax.lax.scan(jax.checkpoint(block, policy=policy), x, ws)
    return jnp.mean(y**2)


def update(ws, mom, x):
    ws_d, mom_d = jax.device_put(ws, device), jax.device_put(mom, device)
    g = jax.grad(loss)(ws_d, x)
    mom_d = 0.9 * mom_d + g
    return jax.device_put(ws_d - 0.01 * mom_d, host), jax.device_put(mom_d, host)


step = jax.jit(update, out_shardings=(host, host))
ws = jax.device_put(jnp.full((args.layers, args.width, args.width), 0.01, jnp.float32), host)
mom = jax.device_put(jnp.zeros((args.layers, args.width, args.width), jnp.float32), host)
x = jnp.ones((8, args.width), jnp.float32)
for _ in range(args.steps):
    ws, mom = step(ws, mom, x)
jax.block_until_ready(ws)
print(f"host_placed.py: {args.steps} steps, policy {policy_name}, parameters in {ws.sharding.memory_kind}")
