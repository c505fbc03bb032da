"""A training script written in MaxText's patterns, small enough for the CPU; it knows nothing of
profile-step.

maxtext_pattern.py [remat_policy=NAME] [steps=N] [layers=N] [scan_layers=true|false] [TENSOR=device|remat|offload ...]

- configured by positional ``key=value`` overrides only (an unknown key, or a word without ``=``,
  ends the script with a CONFIG ERROR, as MaxText's config does);
- the state is made by a jitted initializer run once (MaxText's ``initialize_state``, ``jit__lambda``);
- the decoder layers are scanned (``scan_layers=true``: ``lax.scan`` over stacked weights, the
  layer in one ``jax.checkpoint``; ``false``: a Python loop of checkpointed layers), the layer's
  input tagged ``decoder_layer_input`` after a sharding-neutral ``reshape`` as MaxText tags it;
- ``train_step`` is compiled twice: lowered and compiled once for a memory printout (MaxText's
  ``print_mem_stats`` of ``train_step``), then called ``steps`` times.

Per step and layer it tags ``decoder_layer_input``, ``query_proj``, ``key_proj``, ``value_proj``,
``out_proj``, ``mlpwi`` and ``mlpwo`` once each (B x D, or B x F for ``mlpwi``).
"""

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from maxtext_config import overrides, remat_policy

TENSORS = ("decoder_layer_input", "query_proj", "key_proj", "value_proj", "out_proj", "mlpwi", "mlpwo")
POLICIES = ("full", "minimal", "minimal_offloaded", "custom")
config = {"remat_policy": "full", "steps": "3", "layers": "4", "scan_layers": "true", **dict.fromkeys(TENSORS, "remat")}
config["decoder_layer_input"] = "device"
config = overrides(config, POLICIES)
policy = remat_policy(config, TENSORS)
B, D, F, L = 32, 64, 128, int(config["layers"])


def layer(x, w):
    """One decoder layer: attention's projections and an MLP, MaxText's names on its activations."""
    x = checkpoint_name(jnp.reshape(x, (B, D)), "decoder_layer_input")
    q = checkpoint_name(x @ w["q"], "query_proj")
    k = checkpoint_name(x @ w["k"], "key_proj")
    v = checkpoint_name(x @ w["v"], "value_proj")
    a = checkpoint_name((jax.nn.softmax(q @ k.T / 8.0) @ v) @ w["o"], "out_proj")
    h = checkpoint_name(jnp.tanh((x + a) @ w["wi"]), "mlpwi")
    return x + a + checkpoint_name(h @ w["wo"], "mlpwo")


def decoder(params, x):
    body = jax.checkpoint(layer, policy=policy)
    if config["scan_layers"] == "true":
        x, _ = jax.lax.scan(lambda c, w: (body(c, w), None), x, params)
        return x
    for i in range(L):
        x = body(x, jax.tree.map(lambda p, i=i: p[i], params))
    return x


def loss(params, x):
    return jnp.mean(decoder(params, x) ** 2)


def train_step(params, x):
    value, grads = jax.value_and_grad(loss)(params, x)
    return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), value


def initialize_state(key):
    keys = jax.random.split(key, 7)
    shapes = {"q": (D, D), "k": (D, D), "v": (D, D), "o": (D, D), "wi": (D, F), "wo": (F, D)}
    return {n: jax.random.normal(k, (L, *s)) * 0.1 for k, (n, s) in zip(keys, shapes.items(), strict=False)}


params = jax.jit(initialize_state)(jax.random.PRNGKey(0))
x = jax.random.normal(jax.random.PRNGKey(1), (B, D))
p_train_step = jax.jit(train_step, donate_argnums=0)
compiled = p_train_step.lower(params, x).compile()  # MaxText's memory printout of the step
print(f"maxtext_pattern.py: remat_policy={config['remat_policy']} layers={L}", flush=True)
for step in range(int(config["steps"])):
    params, value = p_train_step(params, x)
    print(f"step {step} loss {float(value):.6f}", flush=True)
