"""A script that defines several steps, in the patterns of issue 44 (written here): what ``tune``
must take as the step, and what it must never take.

In the order the script runs them:

1. traced-only helpers, each twice with the same shapes: ``jax.make_jaxpr`` of a jitted loss,
   ``.lower()`` of it (its HLO printed), ``jax.eval_shape`` of it, ``jax.vjp`` through a lambda
   that calls it: none of them runs the function;
2. ``predict``: jitted, no ``jax.checkpoint``, run ``--predict`` times (3) with the same shapes (a step without
   a policy: never the step while one with a policy runs);
3. ``scanned``, defined twice under one name: first a plain ``lax.scan`` over the layers, then
   the same scan with each layer in ``jax.checkpoint`` whose policy offloads its input to pinned
   host memory; each run once;
4. ``hybrid_step``: a training step whose layers are in ``jax.checkpoint`` (policy ``--policy``:
   ``offload`` or ``nothing``) and which moves its momentum to host memory itself,
   ``jax.device_put(m, sharding.with_memory_kind("pinned_host"))`` with the sharding of its
   arguments (one device); run ``--steps`` times (0: the script ends without a step).

So the step is ``hybrid_step`` by default (``--hand-over``: handed to ``annotate.compiled_step``);
``--step scanned`` is the first ``scanned``, ``--step scanned@LINE`` or ``--step
several_steps.py:LINE`` (a line of the second) the second.
"""

from __future__ import annotations

import argparse
import os

LAYERS, WIDTH, BATCH = 3, 128, 16


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--predict", type=int, default=3, help="how often predict runs")
    ap.add_argument("--hand-over", action="store_true", help="hand hybrid_step to annotate.compiled_step first")
    ap.add_argument("--policy", default=os.environ.get("PROFILE_STEP_POLICY") or "offload")
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp
    from jax.ad_checkpoint import checkpoint_name

    dev = jax.devices()[0]
    on_device = jax.sharding.SingleDeviceSharding(dev)
    offload = jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=["x"], offload_src="device", offload_dst="pinned_host"
    )
    policy = offload if args.policy == "offload" else jax.checkpoint_policies.nothing_saveable

    def layer(x, w):
        x = checkpoint_name(x, "x")
        return jnp.tanh(x @ w), None

    key = jax.random.PRNGKey(0)
    w = jax.device_put(jax.random.normal(key, (LAYERS, WIDTH, WIDTH)) / WIDTH**0.5, on_device)
    x = jax.device_put(jax.random.normal(key, (BATCH, WIDTH)), on_device)

    @jax.jit
    def loss(w, x):
        return jnp.mean(jax.lax.scan(jax.checkpoint(layer, policy=policy), x, w)[0] ** 2)

    for _ in range(2):  # 1. traced only, never run
        print(len(str(jax.make_jaxpr(loss)(w, x))), flush=True)
        print(len(loss.lower(w, x).as_text()), flush=True)
        print(jax.eval_shape(loss, w, x).shape, flush=True)
        _, pull = jax.vjp(lambda v: loss(v, x), w)
        print(pull(jnp.float32(1.0))[0].shape, flush=True)

    @jax.jit
    def predict(w, x):  # 2. no checkpoint
        return jax.lax.scan(layer, x, w)[0]

    for _ in range(args.predict):
        predict(w, x).block_until_ready()

    def scanned(w, x):  # 3. the first of two
        return jnp.sum(jax.lax.scan(layer, x, w)[0])

    first = jax.jit(jax.grad(scanned))
    first(w, x).block_until_ready()

    def scanned(w, x):  # the second: its layers remat'd, their inputs offloaded
        return jnp.sum(jax.lax.scan(jax.checkpoint(layer, policy=offload), x, w)[0])

    second = jax.jit(jax.grad(scanned))
    second(w, x).block_until_ready()

    @jax.jit
    def hybrid_step(w, m, x):  # 4. the training step
        grads = jax.grad(lambda v: jnp.mean(jax.lax.scan(jax.checkpoint(layer, policy=policy), x, v)[0] ** 2))(w)
        m = 0.9 * m + grads
        m = jax.device_put(m, on_device.with_memory_kind("pinned_host"))  # the momentum to host memory
        return w - 0.01 * jax.device_put(m, on_device), m

    m = jax.device_put(jnp.zeros_like(w), on_device)
    if args.hand_over:
        from profiler import annotate

        annotate.compiled_step(hybrid_step, w, m, x)
    for _ in range(args.steps):
        w, m = hybrid_step(w, jax.device_put(m, on_device), x)
    print(f"done {args.steps} steps", flush=True)


if __name__ == "__main__":
    main()
