"""A script in the pattern of JAX's host-offloading tutorial (written here, not copied): two
functions share each jit name.

- ``scanned``: a plain ``lax.scan`` over layers, then the same scan with each layer remat'd and its
  input offloaded to host memory (``save_and_offload_only_these_names``); each run once;
- ``step``: an SGD-with-momentum step, first with the momentum on the device (3 steps), then with
  the momentum in host memory (``memory_kind="pinned_host"`` in and out: the optimizer state
  offloaded), the training loop (``--steps``, 6 by default).

So ``jit_scanned`` is two programs run once each and ``jit_step`` two programs, run 3 and 6 times:
the step is the second ``jit_step``, and its host placements are its own (the first has none).
``--describe`` prints the expected programs as JSON and exits.
"""

from __future__ import annotations

import argparse
import json
import sys

LAYERS, WIDTH, BATCH = 4, 256, 64


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--describe", action="store_true")
    args = ap.parse_args()
    if args.describe:
        print(json.dumps({"step": "jit_step", "step_executions": args.steps, "other_step_executions": 3}))
        return

    import jax
    import jax.numpy as jnp
    from jax.ad_checkpoint import checkpoint_name
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = jax.sharding.Mesh(jax.devices()[:1], ("x",))
    on_device = NamedSharding(mesh, PartitionSpec())
    on_host = NamedSharding(mesh, PartitionSpec(), memory_kind="pinned_host")

    def layer(x, w):
        x = checkpoint_name(x, "x")
        return jnp.tanh(x @ w), None

    offload = jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=["x"], offload_src="device", offload_dst="pinned_host"
    )

    def scanned(w, x):
        return jnp.sum(jax.lax.scan(layer, x, w)[0])

    plain_scan = jax.jit(jax.grad(scanned))

    def scanned(w, x):
        return jnp.sum(jax.lax.scan(jax.remat(layer, policy=offload), x, w)[0])

    offload_scan = jax.jit(jax.grad(scanned))
    key = jax.random.PRNGKey(0)
    w = jax.random.normal(key, (LAYERS, WIDTH, WIDTH)) / WIDTH**0.5
    x = jax.random.normal(key, (BATCH, WIDTH))
    plain_scan(w, x).block_until_ready()
    offload_scan(w, x).block_until_ready()

    def loss(w, x):
        return jnp.mean(jax.lax.scan(layer, x, w)[0] ** 2)

    def step(w, momentum, x):
        g = jax.grad(loss)(w, x)
        momentum = 0.9 * momentum + g
        return w - 1e-3 * momentum, momentum

    plain_step = jax.jit(step)

    def step(w, momentum, x):
        momentum = jax.device_put(momentum, on_device)
        g = jax.grad(loss)(w, x)
        momentum = 0.9 * momentum + g
        return w - 1e-3 * momentum, momentum

    host_step = jax.jit(step, in_shardings=(on_device, on_host, on_device), out_shardings=(on_device, on_host))
    m = jnp.zeros_like(w)
    for _ in range(3):
        w, m = plain_step(w, m, x)
    m = jax.device_put(m, on_host)
    for _ in range(args.steps):
        w, m = host_step(w, m, x)
    jax.block_until_ready(w)
    print("done", float(jnp.sum(w)), file=sys.stderr)


if __name__ == "__main__":
    main()
