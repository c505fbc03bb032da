"""A step whose one offloaded activation has --compute independent matmul layers to hide behind.

offload_overlap.py [--compute N] [--batch B] [--width D]: layer_0's output (B x D, bf16) is offloaded
to host by its checkpoint policy; N plain layers follow (each a D x D matmul, forward and backward),
then the loss.  With N = 0 nothing runs between the copy to host and the copy back.
"""

import argparse
import sys

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from profiler import annotate

ap = argparse.ArgumentParser()
ap.add_argument("--compute", type=int, default=4)
ap.add_argument("--batch", type=int, default=4096)
ap.add_argument("--width", type=int, default=4096)
ap.add_argument("--policy", default=None)
args = ap.parse_args()

OFFLOAD = jax.checkpoint_policies.save_and_offload_only_these_names(
    names_which_can_be_saved=[], names_which_can_be_offloaded=["act"], offload_src="device", offload_dst="pinned_host"
)


@jax.named_scope("layer_0")
def first(w, x):
    return checkpoint_name(jnp.sin(x @ w), "act")


def loss(params, x):
    h = jax.checkpoint(lambda w, x: jnp.sin(first(w, x)), policy=OFFLOAD)(params[0], x)
    for i, w in enumerate(params[1:]):
        with jax.named_scope(f"layer_{i + 1}"):
            h = jnp.tanh(h @ w)
    return jnp.mean(h.astype(jnp.float32) ** 2)


@jax.jit
def step(params, x):
    value, grads = jax.value_and_grad(loss)(params, x)
    return [w - 0.01 * g for w, g in zip(params, grads, strict=True)], value


shape = jax.ShapeDtypeStruct((args.width, args.width), jnp.bfloat16)
params = [shape] * (1 + args.compute)
x = jax.ShapeDtypeStruct((args.batch, args.width), jnp.bfloat16)
annotate.compiled_step(step, params, x)
print("offload_overlap.py: compiles only (run it under profile-step plan)", file=sys.stderr)
