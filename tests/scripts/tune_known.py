"""A training step whose best placement is known by construction, for ``profile-step tune``.

L layers under ``lax.scan``, each in ``jax.checkpoint`` (tune substitutes its policy): an MLP
(``x + gelu(x W1) W2``, W1: D x F, trained) and two named activations beside it:

- ``small`` (B x D): a frozen feature chain under ``stop_gradient``, K matmuls with a D x D
  weight and tanh: *expensive to recompute* (2 K B D^2 FLOPs) and *small* (2 B D bytes);
- ``big`` (B x R D): ``sin`` of ``small`` tiled R times: *cheap to recompute* (elementwise, its
  bytes once over HBM at most; XLA fuses it into its users when it is not kept) and *large*
  (2 B R D bytes).  It gates the layer's output (``x * tanh(sum(big * s))``, s trained), so each
  layer's backward pass needs its ``big``, in the layers' order, and nothing else of the two:
  ``big`` kept makes ``small`` unneeded; ``big`` recomputed needs ``small``.

By hand, with the defaults (B 32768, D 1024, F 4096, R 8, K 12, L 16, bf16) on an H100 (989
TFLOP/s bf16, 3.35 TB/s HBM), per layer:

- compute: forward 2 B D (K D + 2 F) = 1.39 ms, backward (the MLP again and its gradients)
  2 B D F x 5 = 1.39 ms;
- ``small``: 64 MiB.  Recomputing it: 2 K B D^2 = 0.83 ms.  Its copy takes 0.15 ms each way
  on NVLink-C2C (450 GB/s), a tenth of a layer's compute: it hides there, and offloading beats
  recomputing.  On PCIe Gen5 (63 GB/s) it takes 1.07 ms, about a layer's compute, with the
  copy of the next layer behind it on the same link: it cannot all hide, and the 0.83 ms it
  saves is less than what stays exposed;
- ``big``: 512 MiB.  Offloading it writes it to HBM first (0.16 ms; recomputed, it is fused into
  its users and never written) and its copy takes 1.19 ms each way even on NVLink-C2C: it is
  recomputed on every link;
- memory: keeping every ``small`` on the device adds L x 64 MiB = 1 GiB, every ``big`` 8 GiB;
  offloading keeps about one layer's worth on the device.

(These are the roofline's figures: the tests tune this script with
``XLA_FLAGS=--xla_gpu_collect_cost_model_stats=false``.  By default plan and tune cost the GEMMs by
XLA's own estimates, about a quarter above the roofline here: a layer's compute then outlasts
``small``'s copy on PCIe Gen5 too, and ``small`` is offloaded on both links.)

So, under a memory limit that keeps neither on the device: ``small`` offloaded and ``big``
recomputed on NVLink-C2C; both recomputed on PCIe Gen5; with room for the smalls (and not the
bigs), ``small`` kept on the device.  ``--unroll`` unrolls the layers instead: this XLA (jaxlib
0.10.2) then schedules most device-to-host copies of an unrolled step late, in the backward pass,
where they save no memory.

tune_known.py [--layers L] [--batch B] [--d D] [--f F] [--r R] [--k K] [--unroll]
"""

import argparse
import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from profiler import annotate

ap = argparse.ArgumentParser()
ap.add_argument("--layers", type=int, default=16)
ap.add_argument("--batch", type=int, default=32768)
ap.add_argument("--d", type=int, default=1024)
ap.add_argument("--f", type=int, default=4096)
ap.add_argument("--r", type=int, default=8)
ap.add_argument("--k", type=int, default=12)
ap.add_argument("--unroll", action="store_true", help="the layers unrolled instead of under lax.scan")
args = ap.parse_args()
B, D, F, R, K, L = args.batch, args.d, args.f, args.r, args.k, args.layers
DT = jnp.bfloat16


def layer(x, p, wc):
    h = x
    for _ in range(K):  # the frozen chain
        h = jnp.tanh(h @ wc)
    small = checkpoint_name(jax.lax.stop_gradient(h), "small")
    big = checkpoint_name(jnp.sin(jnp.tile(small, (1, R))), "big")
    gate = jnp.tanh((big * p["s"]).reshape(B, R, D).sum(axis=1))
    return x + jax.nn.gelu(x @ p["w1"]) @ p["w2"] + x * gate


block = jax.checkpoint(layer, policy=jax.checkpoint_policies.nothing_saveable)


def loss(params, frozen, x):
    if not args.unroll:
        x, _ = jax.lax.scan(lambda c, pw: (block(c, *pw), None), x, (params, frozen))
    else:
        for i in range(L):
            x = block(x, jax.tree.map(lambda a, i=i: a[i], params), frozen[i])
    return jnp.mean(x.astype(jnp.float32) ** 2)


@partial(jax.jit, donate_argnums=0)
def step(params, frozen, x):
    value, grads = jax.value_and_grad(loss)(params, frozen, x)
    return jax.tree.map(lambda p, g: p - 1e-3 * g.astype(p.dtype), params, grads), value


params = {
    "w1": jax.ShapeDtypeStruct((L, D, F), DT),
    "w2": jax.ShapeDtypeStruct((L, F, D), DT),
    "s": jax.ShapeDtypeStruct((L, R * D), DT),
}
frozen = jax.ShapeDtypeStruct((L, D, D), DT)
x = jax.ShapeDtypeStruct((B, D), DT)
if annotate.compiled_step(step, params, frozen, x) is None:
    print("tune_known.py: run it under profile-step tune (it only describes a step)")
