"""A training script whose step's jit name is several programs, in the patterns real trainers have
(issue 29), for one capture under the real nsys:

- the policy comes as a JSON-valued flag, ``--config_overlay={"remat_policy": "NAME"}`` (it must
  reach the script as one word, quotes kept);
- a blocking collective before the loop: ``jit__psum`` (a psum over the device mesh whose host
  callback waits ``--block-ms``), run once, longer on the host than the whole loop;
- framework-style first steps that compile: step 0 gets the step counter as a Python int (weakly
  typed), the step returns it strongly typed, so step 1 compiles ``jit_train_step`` again;
- one jit name compiled twice through a static argument: every ``--log-every``-th step runs the
  logging variant (``log=True``: it also computes the gradient norm).

With the defaults (8 steps, logging at steps 2 and 5): ``jit_train_step`` is three programs, run
once (step 0), 5 times (steps 1, 3, 4, 6, 7: the step) and twice (steps 2 and 5).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config_overlay", required=True, help='JSON, e.g. {"remat_policy": "minimal"}')
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--log-every", type=int, default=3)
    ap.add_argument("--block-ms", type=float, default=400.0)
    args = ap.parse_args()
    overlay = json.loads(args.config_overlay)  # a JSON error here: the flag lost its quotes
    policy = overlay["remat_policy"]
    print(f"policy from --config_overlay: {policy}", file=sys.stderr, flush=True)

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, PartitionSpec

    try:
        from jax import shard_map
    except ImportError:  # older JAX
        from jax.experimental.shard_map import shard_map

    mesh = Mesh(np.array(jax.devices()[:1]), ("i",))

    def wait(x):
        time.sleep(args.block_ms / 1e3)  # a collective that blocks the host (another rank is late)
        return x

    def _psum(x):
        x = jax.pure_callback(wait, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        return shard_map(
            lambda v: jax.lax.psum(v, "i"), mesh=mesh, in_specs=PartitionSpec(), out_specs=PartitionSpec()
        )(x)

    jax.jit(_psum)(jnp.ones(4)).block_until_ready()

    @partial(jax.jit, static_argnames="log")
    def train_step(state, x, log=False):
        def loss(w):
            return jnp.mean(jnp.tanh(x @ w) ** 2)

        value, g = jax.value_and_grad(loss)(state["w"])
        out = {"w": state["w"] - 0.1 * g, "count": state["count"] + jnp.int32(1)}
        if log:  # the logging variant: more work, the same jit name
            out["gnorm"] = jnp.sqrt(jnp.sum(g * g)) + jnp.linalg.norm(x @ state["w"])
        return out, value

    key = jax.random.PRNGKey(0)
    state = {"w": jax.random.normal(key, (128, 128)) / 16, "count": 0}  # a Python int: weakly typed
    x = jax.random.normal(key, (64, 128))
    for i in range(args.steps):
        log = i % args.log_every == args.log_every - 1
        out, value = train_step(state, x, log=log)
        state = {"w": out["w"], "count": out["count"]}
        value.block_until_ready()
    print(f"done: {int(state['count'])} steps, loss {float(value):.4f}", file=sys.stderr)


if __name__ == "__main__":
    main()
