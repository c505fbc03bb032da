"""The write-up's DeepSeek-V3 step on an 8-GPU mesh, with its collectives, for ``profile-step tune``.

``benchmarks/writeup_layers.py`` builds the layer as one GPU computes it, without the collectives.
This builds the smallest mesh that has every collective kind of the write-up's DeepSeek run:
one mesh axis ``x`` of 8 GPUs (the deviceless GPU target of ``$PROFILE_STEP_PLAN_TARGET``, as
``profile-step tune`` and ``plan`` set it), used as FSDP over data and as expert parallelism,
the whole layer written per GPU with ``jax.shard_map``:

- FSDP: every dense weight of a layer (MLA, output projection, router, shared expert) sharded
  over ``x`` on its first dimension, all-gathered in the layer (its transpose in the backward
  is a reduce-scatter of the gradient);
- expert parallelism: one routed expert per GPU; each token goes to 8 experts, one on each GPU
  (the payload of DeepSeek-V3's top-8 routing over its expert-parallel group: 8 copies of each
  token leave its GPU); dispatch and combine are ``all_to_all`` over ``x``;
  ``--no-all-to-all`` keeps the same shapes and work but moves nothing (the copies stay local);
- the other layers' optimizer states in device memory: an argument of ``--states-gb`` GB per GPU
  (default 62.9: fp32 master weights and Adam's two moments, 12 bytes a parameter, of 671B
  parameters over the write-up's 128 GPUs), passed through the step (donated, aliased); the 58
  MoE layers' own bf16 weights and gradients are in the program.

Layer dimensions as ``writeup_layers.py`` (MaxText's ``deepseek3-671b.yml``; attention as cuDNN's
fused kernel, heads folded to 128): per GPU micro batch ``--batch`` x ``--seq`` tokens, all 128
heads, each layer in ``jax.checkpoint`` under ``lax.scan`` over ``--layers`` stacked layers.

``--unroll 2`` puts two layers, each its own ``jax.checkpoint``, in each iteration of the scan (``--layers``
a multiple of it), so that XLA can issue one layer's copies back from host while the other layer of the
iteration computes (``lax.scan(..., unroll=2)`` does not compile with host offloading in this XLA: an
INTERNAL layout-assignment error on the host-memory residual stacks).

``--model llama``: Llama 3.1 405B's layer (``llama3.1-405b.yml``) on the 8 GPUs as one tensor-parallel
group (16 query heads, 1 key/value head, 6656 of the MLP per GPU; the attention and MLP outputs
all-reduced), micro batch 1 x 8192, 126 layers sharing one layer's weights (as ``writeup_layers.py``: the
FSDP gathers are not modelled), 50.6 GB of other states (16 bytes a parameter over 128 GPUs).

writeup_mesh.py [--model deepseek|llama] [--layers 58] [--batch 8] [--seq 4096] [--width 7168]
                [--no-all-to-all] [--unroll 1] [--states-gb 62.9]
"""

import argparse
import os
import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name as name
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from profiler.conventions import PLAN_TARGET_ENV, TUNE_FDS_ENV

GPUS = 8
DT = jnp.bfloat16

ap = argparse.ArgumentParser()
ap.add_argument("--model", choices=("deepseek", "llama"), default="deepseek")
ap.add_argument("--layers", type=int, default=None, help="58 (deepseek), 126 (llama)")
ap.add_argument("--batch", type=int, default=None, help="micro batch per GPU: 8 (deepseek), 1 (llama)")
ap.add_argument("--seq", type=int, default=None, help="4096 (deepseek), 8192 (llama)")
ap.add_argument("--width", type=int, default=None, help="model width: 7168 (deepseek), 16384 (llama); less for a toy")
ap.add_argument("--no-all-to-all", action="store_true", help="dispatch and combine without moving anything")
ap.add_argument(
    "--unroll", type=int, default=1, help="layers per scan iteration (2: a copy back can start a layer early)"
)
ap.add_argument("--states-gb", type=float, default=None, help="other device state per GPU, decimal GB")
args = ap.parse_args()
LLAMA = args.model == "llama"
DEFAULTS = {
    "layers": (58, 126),
    "batch": (8, 1),
    "seq": (4096, 8192),
    "width": (7168, 16384),
    "states_gb": (62.9, 50.6),
}
for key, (ds, ll) in DEFAULTS.items():
    if getattr(args, key) is None:
        setattr(args, key, ll if LLAMA else ds)
E = args.width
R = max(E // 14 // 8 * 8, 8)  # 7168 / 14 = 512: MLA's kv rank; q rank 3x that, expert width 4x
HEADS, QK, VD = 128 if E >= 7168 else 4, 192, 128


def rms(x):
    x32 = x.astype(jnp.float32)
    return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + 1e-6)).astype(x.dtype)


def gather(w):
    """FSDP: the layer's full weight from its shards (a reduce-scatter of the gradient backward)."""
    return jax.lax.all_gather(w, "x", axis=0, tiled=True)


def exchange(t):
    """Expert parallelism's all-to-all: slot k of every GPU to GPU k (or nothing, with --no-all-to-all)."""
    return t if args.no_all_to_all else jax.lax.all_to_all(t, "x", 0, 0, tiled=True)


def layer(x, w):
    b, s, e = x.shape
    x = name(x, "decoder_layer_input")
    h = rms(x)
    low_q = name(h @ gather(w["wq_a"]), "query_wa_proj")
    low_q = name(rms(low_q), "mla_q")
    q = name((low_q @ gather(w["wq_b"])).reshape(b, s, HEADS, QK), "query_proj")
    low_kv = name(h @ gather(w["wkv_a"]), "kv_wa_proj")
    main, rope = low_kv[..., :R], low_kv[..., R:]
    main = name(rms(main), "mla_kv")
    kv = (main @ gather(w["wkv_b"])).reshape(b, s, HEADS, 2 * VD)
    k_nope = name(kv[..., :VD], "key_proj")
    v = name(kv[..., VD:], "value_proj")
    q_att = q[..., :VD] + jnp.concatenate([q[..., VD:], q[..., VD:]], -1)
    k_att = k_nope + jnp.concatenate([rope, rope], -1)[:, :, None, :]
    att = jax.nn.dot_product_attention(q_att, k_att, v, is_causal=True, implementation="cudnn")
    att = name(att.reshape(b, s, HEADS * VD), "attention_out")
    x = x + name(att @ gather(w["wo"]), "out_proj")
    h = rms(x).reshape(b * s, e)
    gates = jax.nn.sigmoid(h @ gather(w["router"]))[:, :GPUS].astype(DT)  # (tokens, 8 experts)
    sent = name(exchange(gates.T[:, :, None] * h[None]), "moe_dispatched")  # (8 GPUs, tokens, width)
    w0 = name(sent @ w["moe_w0"][0], "moe_mlpwi_0")
    w1 = name(sent @ w["moe_w1"][0], "moe_mlpwi_1")
    out = name((jax.nn.silu(w0) * w1) @ w["moe_wo"][0], "moe_mlpwo")
    routed = exchange(out).sum(0)  # the combine
    s0 = name(h @ gather(w["sh_w0"]), "mlpwi_0")
    s1 = name(h @ gather(w["sh_w1"]), "mlpwi_1")
    shared = name((jax.nn.silu(s0) * s1) @ gather(w["sh_wo"]), "mlpwo")
    return x + (routed + shared).reshape(b, s, e)


def llama_layer(x, w):
    """Llama 3.1 405B's layer on one GPU of a tensor-parallel group of 8: 16 of the 128 query heads,
    1 of the 8 key/value heads, 1/8 of the MLP; the projections back all-reduced over ``x``."""
    b, s, _ = x.shape
    x = name(x, "decoder_layer_input")
    h = rms(x)
    q = name((h @ w["wq"]).reshape(b, s, LH, 128), "query_proj")
    k = name((h @ w["wk"]).reshape(b, s, 1, 128), "key_proj")
    v = name((h @ w["wv"]).reshape(b, s, 1, 128), "value_proj")
    k, v = jnp.broadcast_to(k, (b, s, LH, 128)), jnp.broadcast_to(v, (b, s, LH, 128))
    att = jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="cudnn")
    att = name(att.reshape(b, s, LH * 128), "attention_out")
    x = x + name(jax.lax.psum(att @ w["wo"], "x"), "out_proj")
    h = rms(x)
    m0 = name(h @ w["w0"], "mlpwi_0")
    m1 = name(h @ w["w1"], "mlpwi_1")
    return x + name(jax.lax.psum((jax.nn.silu(m0) * m1) @ w["w2"], "x"), "mlpwo")


LH = 16 if E >= 16384 else 2  # query heads per GPU
FF = E * 13 // 4  # 53248 for 16384
LLAMA_SHAPES = {"wq": (E, GPUS * LH * 128), "wk": (E, GPUS * 128), "wv": (E, GPUS * 128), "wo": (GPUS * LH * 128, E),
                "w0": (E, FF), "w1": (E, FF), "w2": (FF, E)}  # fmt: skip
# tensor parallelism: column-sharded in, row-sharded out
LLAMA_SPECS = {k: P(None, "x") if k in ("wq", "wk", "wv", "w0", "w1") else P("x", None) for k in LLAMA_SHAPES}
SHAPES = {
    "wq_a": (E, 3 * R), "wq_b": (3 * R, HEADS * QK), "wkv_a": (E, R + 64), "wkv_b": (R, HEADS * 2 * VD),
    "wo": (HEADS * VD, E), "router": (E, 256), "sh_w0": (E, 4 * R), "sh_w1": (E, 4 * R), "sh_wo": (4 * R, E),
    "moe_w0": (GPUS, E, 4 * R), "moe_w1": (GPUS, E, 4 * R), "moe_wo": (GPUS, 4 * R, E),
}  # fmt: skip
block = jax.checkpoint(llama_layer if LLAMA else layer, policy=jax.checkpoint_policies.nothing_saveable)


def llama_loss(w, x):
    """One layer's weights for every layer (FSDP's gathered layer, as writeup_layers.py)."""
    y, _ = jax.lax.scan(lambda c, _: (block(c, w), None), x, None, length=args.layers)
    return jnp.mean(y.astype(jnp.float32) ** 2)


def local_loss(w, x):
    n = args.unroll
    grouped = jax.tree.map(lambda a: a.reshape(a.shape[0] // n, n, *a.shape[1:]), w)

    def body(c, lw):
        for k in range(n):  # n checkpointed layers per iteration (lax.scan's unroll fails to compile here)
            c = block(c, jax.tree.map(lambda a, k=k: a[k], lw))
        return c, None

    y, _ = jax.lax.scan(body, x, grouped)
    return jax.lax.pmean(jnp.mean(y.astype(jnp.float32) ** 2), "x")


def main() -> int:
    spec_path = os.environ.get(PLAN_TARGET_ENV)
    if not spec_path:
        print("writeup_mesh.py: run it under profile-step tune or plan (it only describes a step)")
        return 0
    from jax.experimental import topologies

    spec = Path(spec_path).read_text()
    devices = topologies.get_topology_desc("writeup", "cuda", target_config=spec, topology=f"1x1x{GPUS}").devices
    mesh = jax.sharding.Mesh(np.array(list(devices)[:GPUS]), ("x",))
    if LLAMA:
        wspec, shapes, xspec = LLAMA_SPECS, LLAMA_SHAPES, P()
        loss = jax.shard_map(llama_loss, mesh=mesh, in_specs=(wspec, xspec), out_specs=P())
    else:
        wspec = {k: P(None, "x") for k in SHAPES}  # (layers, ...): FSDP or expert dimension over x
        shapes, xspec = {k: (args.layers, *v) for k, v in SHAPES.items()}, P("x")
        loss = jax.shard_map(local_loss, mesh=mesh, in_specs=(wspec, xspec), out_specs=P())

    @partial(jax.jit, donate_argnums=(0, 2))
    def step(w, x, states):
        value, grads = jax.value_and_grad(loss)(w, x)
        return jax.tree.map(lambda p, g: p - 1e-4 * g.astype(p.dtype), w, grads), value, states

    def arg(shape, dtype, pspec):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, pspec))

    weights = {k: arg(v, DT, wspec[k]) for k, v in shapes.items()}
    tokens = arg(((1 if LLAMA else GPUS) * args.batch, args.seq, E), DT, xspec)
    states = arg((GPUS * max(int(args.states_gb * 1e9 / 4), 1),), jnp.float32, P("x"))
    if os.environ.get(TUNE_FDS_ENV):  # annotate.compiled_step would move the arguments to one GPU
        from profiler.xla.tune_server import serve

        serve(step, (weights, tokens, states), {}, devices[0].device_kind)
    compiled = step.lower(weights, tokens, states).compile()  # under plan: this mesh, as is
    print(f"writeup_mesh.py: compiled for {devices[0].device_kind} x {GPUS}; peak {compiled.memory_analysis()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
