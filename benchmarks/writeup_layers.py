"""Decoder layers of the host-offloading write-up at per-GPU shapes, for ``profile-step tune``.

NVIDIA's July 2026 write-up (GB200 NVL72, 128 GPUs, MaxText; FIELD_NOTES, "Headline results"):
DeepSeek-V3 671B with its MLA projections and MoE up-projections offloaded, 57% faster than
rematerialization at micro batch 8; Llama 3.1 405B with QKV offloaded under a layer scan, 2.9%
faster.  This script builds one model's decoder stack as one GPU of such a run computes it,
with MaxText's activation names (``checkpoint_name``), each layer in ``jax.checkpoint`` under
``lax.scan``, so that ``tune`` can place them.

Model dimensions: MaxText's configs (``src/maxtext/configs/models/deepseek3-671b.yml``,
``llama3.1-405b.yml``, commit e591f30).  Per-GPU shapes (the write-up gives the micro batch, not
the parallelism; these are assumptions, written down so that they can be changed):

- ``deepseek``: micro batch 8 x sequence 4096 (DeepSeek-V3's pre-training length) = 32768 tokens
  per GPU; attention unsharded (all 128 heads: FSDP over data, no tensor parallelism); the MoE
  as expert parallelism leaves it on one GPU: each token's 8 routed experts as 8 dense slots of
  the expert MLP (7168 -> 2048 x 2 -> 7168), plus the shared expert; the dispatch all-to-all is
  not modelled (one device); 58 MoE layers (61 less the 3 dense ones).
- ``llama``: micro batch 1 x sequence 8192 = 8192 tokens per GPU, tensor parallelism 8: 16 of
  the 128 query heads and 1 of the 8 key/value heads, 53248 / 8 = 6656 of the MLP per GPU; 126
  layers; the tensor-parallel all-reduces are not modelled.

Both: one layer's weights shared by every layer of the scan (what FSDP all-gathers for one
layer at a time; the parameters and gradients of the other layers, sharded over 128 GPUs, are
left out), bf16, attention causal as cuDNN's fused kernel (``jax.nn.dot_product_attention``,
``implementation="cudnn"``), which here takes head dims up to 128: DeepSeek's query/key head
dim of 192 (128 + 64 rope) is folded to 128, so its attention FLOPs are 5/6 of the real ones.

writeup_layers.py --model deepseek|llama [--layers N] [--batch B] [--seq S]
"""

import argparse
import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name as name

from profiler import annotate

ap = argparse.ArgumentParser()
ap.add_argument("--model", choices=("deepseek", "llama"), required=True)
ap.add_argument("--layers", type=int, default=None)
ap.add_argument("--batch", type=int, default=None, help="micro batch per GPU")
ap.add_argument("--seq", type=int, default=None)
args = ap.parse_args()
DT = jnp.bfloat16


def rms(x):
    x32 = x.astype(jnp.float32)
    return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + 1e-6)).astype(x.dtype)


def attention(q, k, v):
    """Causal attention as cuDNN's fused kernel (``__cudnn$fmha*``: XLA compiles it without a GPU;
    the roofline counts its FLOPs, docs/plan.md): q, k, v (B, S, H, 128)."""
    return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="cudnn")


def deepseek_layer(x, w):
    b, s, e = x.shape
    x = name(x, "decoder_layer_input")
    h = rms(x)
    low_q = name(h @ w["wq_a"], "query_wa_proj")
    low_q = name(rms(low_q), "mla_q")
    q = name((low_q @ w["wq_b"]).reshape(b, s, 128, 192), "query_proj")
    low_kv = name(h @ w["wkv_a"], "kv_wa_proj")
    main, rope = low_kv[..., :512], low_kv[..., 512:]
    main = name(rms(main), "mla_kv")
    kv = (main @ w["wkv_b"]).reshape(b, s, 128, 256)
    k_nope = name(kv[..., :128], "key_proj")
    v = name(kv[..., 128:], "value_proj")
    # cuDNN here takes head dims up to 128: the rope part (64) is folded into the 128 nope dims
    q_att = q[..., :128] + jnp.concatenate([q[..., 128:], q[..., 128:]], -1)
    k_att = k_nope + jnp.concatenate([rope, rope], -1)[:, :, None, :]
    att = name(attention(q_att, k_att, v).reshape(b, s, 128 * 128), "attention_out")
    x = x + name(att @ w["wo"], "out_proj")
    h = rms(x).reshape(b * s, e)
    gates = jax.nn.sigmoid(h @ w["router"])[:, :8]  # 8 routed experts per token, as 8 slots
    w0 = name(jnp.einsum("te,kef->ktf", h, w["moe_w0"]), "moe_mlpwi_0")
    w1 = name(jnp.einsum("te,kef->ktf", h, w["moe_w1"]), "moe_mlpwi_1")
    out = name(jnp.einsum("ktf,kfe->kte", jax.nn.silu(w0) * w1, w["moe_wo"]), "moe_mlpwo")
    routed = jnp.einsum("kte,tk->te", out, gates.astype(DT))
    s0 = name(h @ w["sh_w0"], "mlpwi_0")
    s1 = name(h @ w["sh_w1"], "mlpwi_1")
    shared = name((jax.nn.silu(s0) * s1) @ w["sh_wo"], "mlpwo")
    return x + (routed + shared).reshape(b, s, e)


def llama_layer(x, w):
    b, s, _ = x.shape
    x = name(x, "decoder_layer_input")
    h = rms(x)
    q = name((h @ w["wq"]).reshape(b, s, 16, 128), "query_proj")
    k = name((h @ w["wk"]).reshape(b, s, 1, 128), "key_proj")
    v = name((h @ w["wv"]).reshape(b, s, 1, 128), "value_proj")
    k, v = jnp.broadcast_to(k, (b, s, 16, 128)), jnp.broadcast_to(v, (b, s, 16, 128))
    att = name(attention(q, k, v).reshape(b, s, 16 * 128), "attention_out")
    x = x + name(att @ w["wo"], "out_proj")
    h = rms(x)
    m0 = name(h @ w["w0"], "mlpwi_0")
    m1 = name(h @ w["w1"], "mlpwi_1")
    return x + name((jax.nn.silu(m0) * m1) @ w["w2"], "mlpwo")


if args.model == "deepseek":
    E, layers, batch, seq = 7168, args.layers or 58, args.batch or 8, args.seq or 4096
    shapes = {
        "wq_a": (E, 1536), "wq_b": (1536, 128 * 192), "wkv_a": (E, 512 + 64), "wkv_b": (512, 128 * 256),
        "wo": (128 * 128, E), "router": (E, 256), "moe_w0": (8, E, 2048), "moe_w1": (8, E, 2048),
        "moe_wo": (8, 2048, E), "sh_w0": (E, 2048), "sh_w1": (E, 2048), "sh_wo": (2048, E),
    }  # fmt: skip
    layer = deepseek_layer
else:
    E, layers, batch, seq = 16384, args.layers or 126, args.batch or 1, args.seq or 8192
    shapes = {"wq": (E, 16 * 128), "wk": (E, 128), "wv": (E, 128), "wo": (16 * 128, E), "w0": (E, 6656),
              "w1": (E, 6656), "w2": (6656, E)}  # fmt: skip
    layer = llama_layer

block = jax.checkpoint(layer, policy=jax.checkpoint_policies.nothing_saveable)


def loss(w, x):
    y, _ = jax.lax.scan(lambda c, _: (block(c, w), None), x, None, length=layers)
    return jnp.mean(y.astype(jnp.float32) ** 2)


@partial(jax.jit, donate_argnums=0)
def step(w, x):
    value, grads = jax.value_and_grad(loss)(w, x)
    return jax.tree.map(lambda p, g: p - 1e-4 * g.astype(p.dtype), w, grads), value


weights = {k: jax.ShapeDtypeStruct(v, DT) for k, v in shapes.items()}
tokens = jax.ShapeDtypeStruct((batch, seq, E), DT)
if annotate.compiled_step(step, weights, tokens) is None:
    print("writeup_layers.py: run it under profile-step tune or plan (it only describes a step)")
