"""A training loop configured the MaxText way: positional ``key=value`` overrides, nothing else.

kv_overrides.py [remat_policy=NAME] [steps=N] [layers=N] [TENSOR=device|remat|offload ...]

Anything that is not ``key=value`` with a known key fails (as MaxText's config does), so a policy
passed as two words (``remat_policy minimal``) ends the script with an error.  ``remat_policy`` is
one of MaxText's names: full, minimal, minimal_offloaded, qkv_proj_offloaded, custom (then each
named tensor says where it goes: ``query_proj=offload``).  The script knows nothing of profile-step.
"""

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from maxtext_config import overrides, remat_policy

TENSORS = ("query_proj", "key_proj", "value_proj", "mlpwi")
POLICIES = ("full", "minimal", "minimal_offloaded", "qkv_proj_offloaded", "custom")
config = overrides({"remat_policy": "full", "steps": "3", "layers": "2", **dict.fromkeys(TENSORS, "remat")}, POLICIES)
print(f"kv_overrides.py: remat_policy={config['remat_policy']}", flush=True)
policy = remat_policy(config, TENSORS)


def layer(x, w):
    q = checkpoint_name(x @ w[0], "query_proj")
    k = checkpoint_name(x @ w[1], "key_proj")
    v = checkpoint_name(x @ w[2], "value_proj")
    a = jax.nn.softmax(q @ k.T / 8.0) @ v
    h = checkpoint_name(jnp.tanh(a @ w[3]), "mlpwi")
    return x + h


def loss(ws, x):
    for w in ws:
        x = jax.checkpoint(layer, policy=policy)(x, w)
    return jnp.mean(x**2)


@jax.jit
def train_step(ws, x):
    value, grads = jax.value_and_grad(loss)(ws, x)
    return [w - 0.01 * g for w, g in zip(ws, grads, strict=True)], value


keys = jax.random.split(jax.random.PRNGKey(0), int(config["layers"]) + 1)
ws = [jax.random.normal(k, (4, 64, 64)) * 0.1 for k in keys[1:]]
x = jax.random.normal(keys[0], (32, 64))
for step in range(int(config["steps"])):
    ws, value = train_step(ws, x)
    print(f"step {step} loss {float(value):.6f}", flush=True)
