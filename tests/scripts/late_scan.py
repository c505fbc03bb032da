"""A scanned training step whose copies back to the device are late, or not, by construction.

L layers under ``lax.scan``, each in ``jax.checkpoint`` with the policy ``$PROFILE_STEP_POLICY``
(``offload``: the activation ``act`` to pinned host memory; ``remat``: nothing saved), or ``ahead``: the
same offload written by hand (a ``custom_vjp`` of the layer loop) whose backward scan fetches the next
layer's activation one iteration ahead, in its carry.  A layer:
``act = tanh(x W)`` (B x D), then K more matmuls with a D x D weight and tanh on it, added back to
``x``.  The backward pass of a layer needs its ``act`` back from host memory before the first of
those K matmuls' gradients; the compute between that copy's start and its use is what XLA puts
there.

- ``--k 1 --batch 16384 --d 2048`` (the defaults): a 64 MiB activation a layer; its copy back takes about
  1 ms on PCIe Gen5 (63 GB/s), and XLA puts 50 us of compute beside it (``plan``'s replay on an H100):
  each copy back is late, 8.1 ms waited per step; with ``ahead`` each has 1 ms beside it;
- ``--k 16 --batch 256 --d 2048``: a 1 MiB activation under 16 matmuls: its copy (17 us) has more
  compute than that beside it: none is late.

``--chain C``: ``act`` made by C more matmuls (frozen: under ``stop_gradient``), so that recomputing it
costs more than waiting for its copy: ``tune`` then offloads it, late copies and all.

``--unroll 0``: the layers in a Python loop instead (``--unroll N``: lax.scan's unroll; this XLA fails to
compile N = 2 with the offload).

late_scan.py [--layers L] [--batch B] [--d D] [--k K] [--chain C] [--unroll N]
"""

import argparse
import os
import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from profiler import annotate

ap = argparse.ArgumentParser()
ap.add_argument("--layers", type=int, default=8)
ap.add_argument("--batch", type=int, default=16384)
ap.add_argument("--d", type=int, default=2048)
ap.add_argument("--k", type=int, default=1)
ap.add_argument("--chain", type=int, default=0, help="frozen matmuls that make act (stop_gradient)")
ap.add_argument("--unroll", type=int, default=1, help="lax.scan's unroll (layers per iteration); 0: a Python loop")
args = ap.parse_args()
B, D, K, L, C = args.batch, args.d, args.k, args.layers, args.chain
DT = jnp.bfloat16
POLICIES = {
    "offload": jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[],
        names_which_can_be_offloaded=["act"],
        offload_src="device",
        offload_dst="pinned_host",
    ),
    "remat": jax.checkpoint_policies.nothing_saveable,
}
policy = os.environ.get("PROFILE_STEP_POLICY", "offload")
if policy not in (*POLICIES, "ahead"):
    ap.error(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)}")


def act_of(x, w):
    h = jnp.tanh(x @ w[0])
    if C:  # a frozen chain: act costs C + 1 matmuls to recompute, its gradient is x's residual alone
        for i in range(C):
            h = jnp.tanh(h @ w[1 + K + i])
        h = jax.lax.stop_gradient(h)
    return h


def rest(h, w):
    for i in range(K):
        h = jnp.tanh(h @ w[1 + i])
    return h


def layer(x, w):
    return x + rest(checkpoint_name(act_of(x, w), "act"), w)


block = jax.checkpoint(layer, policy=POLICIES.get(policy, POLICIES["remat"]))


@jax.custom_vjp
def ahead(w, x):
    """The layer loop with ``act`` offloaded by hand, each copy back fetched one iteration ahead."""
    return ahead_fwd(w, x)[0]


def ahead_fwd(w, x):
    def body(c, wl):
        a = act_of(c, wl)
        return c + rest(a, wl), (c, jax.device_put(a, jax.memory.Space.Host))

    y, (xs, acts) = jax.lax.scan(body, x, w)
    return y, (w, xs, acts)


def ahead_bwd(res, g):
    w, xs, acts = res

    def fetch(i):
        return jax.device_put(jax.lax.dynamic_index_in_dim(acts, i, keepdims=False), jax.memory.Space.Device)

    def body(carry, inp):
        g, a, i = carry
        c, wl = inp
        nxt = fetch(jnp.maximum(i - 1, 0))  # the next iteration's activation, fetched during this one
        _, back_rest = jax.vjp(rest, a, wl)
        ga, gw = back_rest(g)
        _, back_act = jax.vjp(act_of, c, wl)
        gx, gw_act = back_act(ga)
        return (g + gx, nxt, i - 1), gw + gw_act

    (gx, _, _), gw = jax.lax.scan(body, (g, fetch(L - 1), L - 1), (xs, w), reverse=True)
    return gw, gx


ahead.defvjp(ahead_fwd, ahead_bwd)


def loss(w, x):
    if policy == "ahead":
        x = ahead(w, x)
    elif args.unroll == 0:
        for i in range(L):
            x = block(x, w[i])
    else:
        x, _ = jax.lax.scan(lambda c, wl: (block(c, wl), None), x, w, unroll=args.unroll)
    return jnp.mean(x.astype(jnp.float32) ** 2)


@partial(jax.jit, donate_argnums=0)
def step(w, x):
    value, grads = jax.value_and_grad(loss)(w, x)
    return w - 1e-3 * grads, value


w = jax.ShapeDtypeStruct((L, K + 1 + C, D, D), DT)
x = jax.ShapeDtypeStruct((B, D), DT)
if annotate.compiled_step(step, w, x) is None:
    print("late_scan.py: run it under profile-step plan (it only describes a step)")
