"""A training loop that reads its own flags with ``parse_known_args`` and ignores the rest.

known_args.py [--remat NAME] [--steps N] [anything else, ignored]

Unknown arguments are swallowed, as many real scripts do, so a policy passed the wrong way is
silently lost; the script says which remat setting it ran with.  It knows nothing of profile-step.
"""

import argparse

import jax
import jax.numpy as jnp

ap = argparse.ArgumentParser()
ap.add_argument("--remat", default="none", choices=("none", "full", "dots"))
ap.add_argument("--steps", type=int, default=3)
args, ignored = ap.parse_known_args()
print(f"known_args.py: remat={args.remat} ignored={ignored}", flush=True)
policy = {"full": jax.checkpoint_policies.nothing_saveable, "dots": jax.checkpoint_policies.dots_saveable}.get(
    args.remat
)


def block(x, w):
    return jnp.tanh(x @ w)


def loss(w, x):
    f = block if policy is None else jax.checkpoint(block, policy=policy)
    return jnp.mean(f(f(x, w), w) ** 2)


@jax.jit
def train_step(w, x):
    value, grad = jax.value_and_grad(loss)(w, x)
    return w - 0.01 * grad, value


w = jnp.eye(64) * 0.5
x = jnp.ones((16, 64))
for step in range(args.steps):
    w, value = train_step(w, x)
    print(f"step {step} loss {float(value):.6f}", flush=True)
