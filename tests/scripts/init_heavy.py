"""A script whose init module does more work than its step: init runs once, the step 5 times.

No profile-step annotation, as many scripts are written.  ``--describe`` prints each jitted
function's module name and XLA FLOPs (cost analysis) as JSON and exits, for the tests.

init_heavy.py [--steps N] [--describe]
"""

import argparse
import json

import jax
import jax.numpy as jnp

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=5)
ap.add_argument("--describe", action="store_true")
args = ap.parse_args()

N = 256


@jax.jit
def init(key):
    """Random weights mixed by a chain of large products: many FLOPs, run once."""
    k1, k2 = jax.random.split(key)
    a = jax.random.normal(k1, (N, N))
    b = jax.random.normal(k2, (N, N))
    for _ in range(8):
        a = jnp.tanh(a @ b) + a
    return a[:, :32] * 0.01


@jax.jit
def update(w, x):
    """One small gradient step: few FLOPs, run every step."""

    def loss(w):
        return jnp.mean((x @ w) ** 2)

    return w - 0.1 * jax.grad(loss)(w)


x = jnp.ones((64, N))
if args.describe:
    w0 = jax.ShapeDtypeStruct((N, 32), jnp.float32)
    out = {}
    for f, a in ((init, (jax.random.key(0),)), (update, (w0, x))):
        c = f.lower(*a).compile()
        cost = c.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        out[c.as_text().split()[1].rstrip(",")] = cost["flops"]
    print(json.dumps(out))
    raise SystemExit(0)

w = init(jax.random.key(0))
for _ in range(args.steps):
    w = update(w, x)
print(f"done {args.steps} steps, |w| {float(jnp.abs(w).sum()):.4f}", flush=True)
