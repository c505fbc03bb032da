"""A trainer in the pattern of issue 44's public one (written here): its training step is compiled
as two programs under one jit name, and a helper is jitted once per step.

- ``train_step(params, batch, lr, log)``: an MLP of ``--layers`` layers, each in ``jax.checkpoint``
  (the script's remat policy, ``--policy``: ``nothing`` or ``dots``), an SGD update; ``log`` is a
  static argument, so every ``--log-every``-th step runs a second program (it also returns the
  gradient norm);
- ``schedule(step)``: the learning rate, jitted and called once per step (a few FLOPs);
- ``init(key)``: the parameters, once.

With the defaults (9 steps, logging every 2nd from step 1): ``jit_train_step`` runs as two programs,
5 and 4 times, and ``jit_schedule`` 9 times: counted by program the schedule ran most often;
counted by name the two tie, and the step's work (FLOPs) is thousands of times the schedule's.
``--describe`` prints the expected names and counts as JSON and exits.
"""

from __future__ import annotations

import argparse
import json
import os
from functools import partial

WIDTH, BATCH = 128, 32


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=9)
    ap.add_argument("--log-every", type=int, default=2)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--policy", default=os.environ.get("PROFILE_STEP_POLICY", "nothing"))
    ap.add_argument("--describe", action="store_true")
    args = ap.parse_args()
    logged = len(range(1, args.steps, args.log_every))
    if args.describe:
        counts = {"jit_train_step": sorted([args.steps - logged, logged]), "jit_schedule": args.steps}
        print(json.dumps({"step": "jit_train_step", "helper": "jit_schedule", "executions": counts}))
        return

    import jax
    import jax.numpy as jnp

    policies = {"nothing": jax.checkpoint_policies.nothing_saveable, "dots": jax.checkpoint_policies.dots_saveable}
    policy = policies.get(args.policy, jax.checkpoint_policies.nothing_saveable)

    @jax.jit
    def init(key):
        keys = jax.random.split(key, args.layers)
        return [jax.random.normal(k, (WIDTH, WIDTH)) / WIDTH**0.5 for k in keys]

    @jax.jit
    def schedule(step):
        warm = jnp.minimum(1.0, (step + 1) / 4.0)
        return 0.05 * warm * jnp.cos(step / 100.0)

    def layer(w, x):
        return jnp.tanh(x @ w)

    def loss(params, batch):
        x = batch
        for w in params:
            x = jax.checkpoint(layer, policy=policy)(w, x)
        return jnp.mean(x**2)

    @partial(jax.jit, static_argnames="log")
    def train_step(params, batch, lr, log=False):
        value, grads = jax.value_and_grad(loss)(params, batch)
        new = [w - lr * g for w, g in zip(params, grads, strict=True)]
        if log:
            norm = jnp.sqrt(sum(jnp.sum(g * g) for g in grads))
            return new, value, norm
        return new, value, None

    params = init(jax.random.PRNGKey(0))
    batch = jax.random.normal(jax.random.PRNGKey(1), (BATCH, WIDTH))
    for step in range(args.steps):
        lr = schedule(jnp.asarray(step, jnp.int32))
        log = step % args.log_every == 1
        params, value, norm = train_step(params, batch, lr, log=log)
        if log:
            print(f"step {step} loss {float(value):.5f} grad norm {float(norm):.4f}", flush=True)
    print(f"done {args.steps} steps", flush=True)


if __name__ == "__main__":
    main()
