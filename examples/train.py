"""A small decoder-only transformer training step with activation offloading, for profile-step.

Run it under the profiler (one run per policy)::

    profile-step --policies none,offload_qkv examples/train.py --layers 4 --steps 3

or alone (``--policy`` or ``$PROFILE_STEP_POLICY`` chooses the policy).

Activations carry MaxText's names through ``checkpoint_name``:
``decoder_layer_input``, ``query_proj``, ``key_proj``, ``value_proj``,
``out_proj``, ``mlpwi``, ``mlpwo``.  Policies:

- ``none``: no rematerialization, every activation stays on the device;
- ``remat``: recompute everything in the backward pass;
- ``offload_qkv``: q/k/v projections go to pinned host memory, the rest is recomputed;
- ``offload_mlp``: the MLP activations go to pinned host memory;
- ``offload_all``: every named activation goes to pinned host memory.

Each layer runs under ``jax.named_scope("layer_N")`` (unrolled) or, with
``--scan``, under ``lax.scan`` in ``jax.named_scope("layers")``: XLA puts these
scopes into its per-thunk NVTX ranges on a GPU.  ``--dispatch per-layer``
runs each layer's forward and backward as its own jitted call inside a
``layer=N`` NVTX range (what a CPU, which has no XLA thunk ranges, needs to show
layers); the default ``fused`` compiles the whole step, as one trains for real.
On a CPU no data moves to host memory; the step still runs end to end.

It marks its run with ``profiler.annotate`` although profile-step needs none of it
(a plain script is recorded whole, and on a GPU its steps and warm-up come from
XLA's own module ranges).  The marks say more than XLA can: ``capture()`` cuts
warm-up out exactly where the script knows it ends, ``step(i)`` times each step
as the loop sees it (host work included) on any backend, the CPU too, and labels
the trace with its policy and model facts.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from profiler import annotate
from profiler.conventions import EXAMPLE_POLICIES

QKV = ["query_proj", "key_proj", "value_proj"]
MLP = ["mlpwi", "mlpwo"]
ALL_NAMES = ["decoder_layer_input", *QKV, "out_proj", *MLP]
POLICIES = EXAMPLE_POLICIES  # none, remat, offload_qkv, offload_mlp, offload_all


def offload(names: list[str]):
    return jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[],
        names_which_can_be_offloaded=names,
        offload_src="device",
        offload_dst="pinned_host",
    )


OFFLOADED = {"offload_qkv": QKV, "offload_mlp": MLP, "offload_all": ALL_NAMES}  # the names each policy offloads


def remat_policy(policy: str):
    """None means: no jax.checkpoint at all."""
    return {
        "none": None,
        "remat": jax.checkpoint_policies.nothing_saveable,
        **{name: offload(names) for name, names in OFFLOADED.items()},
    }[policy]


def init_params(key, vocab: int, d: int, ffn: int, layers: int, dtype) -> dict:
    keys = jax.random.split(key, 1 + 6 * layers)
    scale = 1 / math.sqrt(d)

    def w(k, shape):
        return (jax.random.normal(k, shape, jnp.float32) * scale).astype(dtype)

    blocks = []
    for i in range(layers):
        k = keys[1 + 6 * i : 7 + 6 * i]
        blocks.append(
            {
                "wq": w(k[0], (d, d)),
                "wk": w(k[1], (d, d)),
                "wv": w(k[2], (d, d)),
                "wo": w(k[3], (d, d)),
                "w1": w(k[4], (d, ffn)),
                "w2": w(k[5], (ffn, d)),
                "ln1": jnp.ones((d,), dtype),
                "ln2": jnp.ones((d,), dtype),
            }
        )
    return {"embed": w(keys[0], (vocab, d)), "blocks": blocks}


def rms_norm(x, scale):
    x32 = x.astype(jnp.float32)
    return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-6)).astype(x.dtype) * scale


def named(name: str, fn, *args):
    """``fn(*args)`` under ``jax.named_scope(name)``, saved as ``checkpoint_name(name)``: XLA's
    op_name paths (and so the compiler's offload plan and the GPU thunk ranges) carry the name."""
    with jax.named_scope(name):
        return checkpoint_name(fn(*args), name)


def decoder_layer(x, p, heads: int):
    """One pre-norm decoder layer: causal self-attention and an MLP."""
    b, s, d = x.shape
    x = checkpoint_name(x, "decoder_layer_input")
    h = rms_norm(x, p["ln1"])
    q = named("query_proj", jnp.matmul, h, p["wq"])
    k = named("key_proj", jnp.matmul, h, p["wk"])
    v = named("value_proj", jnp.matmul, h, p["wv"])

    def split(t):
        return t.reshape(b, s, heads, d // heads).transpose(0, 2, 1, 3)

    scores = jnp.einsum("bhqd,bhkd->bhqk", split(q), split(k)) / math.sqrt(d // heads)
    mask = jnp.tril(jnp.ones((s, s), bool))
    scores = jnp.where(mask, scores.astype(jnp.float32), -1e9)
    ctx = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1).astype(x.dtype), split(v))
    ctx = ctx.transpose(0, 2, 1, 3).reshape(b, s, d)
    x = x + named("out_proj", jnp.matmul, ctx, p["wo"])
    h = rms_norm(x, p["ln2"])
    m = jax.nn.gelu(named("mlpwi", jnp.matmul, h, p["w1"]))
    return x + named("mlpwo", jnp.matmul, m, p["w2"])


def make_layer(policy: str, heads: int):
    fn = partial(decoder_layer, heads=heads)
    pol = remat_policy(policy)
    return fn if pol is None else jax.checkpoint(fn, policy=pol)


def loss_from_hidden(x, embed, tokens):
    logits = (x @ embed.T).astype(jnp.float32)
    logp = jax.nn.log_softmax(logits[:, :-1], axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1))


def forward_loss(params, tokens, layer, scan: bool):
    x = params["embed"][tokens]
    if scan:
        stacked = jax.tree.map(lambda *a: jnp.stack(a), *params["blocks"])
        with jax.named_scope("layers"):
            x, _ = jax.lax.scan(lambda c, p: (layer(c, p), None), x, stacked)
    else:
        for i, p in enumerate(params["blocks"]):
            with jax.named_scope(f"layer_{i}"):
                x = layer(x, p)
    return loss_from_hidden(x, params["embed"], tokens)


def fused_step(layer, scan: bool, lr: float):
    """The whole training step as one compiled program."""

    @partial(jax.jit, donate_argnums=0)
    def step(params, tokens):
        loss, grads = jax.value_and_grad(forward_loss)(params, tokens, layer, scan)
        params = jax.tree.map(lambda p, g: p - lr * g.astype(p.dtype), params, grads)
        return params, loss

    return step


def per_layer_step(layer, lr: float):
    """The step dispatched layer by layer, each forward/backward in a ``layer=N`` NVTX range.

    A layer's forward returns its pullback (residuals included, where the
    policy put them); the backward consumes it.
    """
    fwd = jax.jit(lambda x, p: jax.vjp(layer, x, p))
    bwd = jax.jit(lambda pullback, dy: pullback(dy))
    embed_in = jax.jit(lambda e, t: e[t])
    head = jax.jit(jax.value_and_grad(loss_from_hidden, argnums=(0, 1)))
    embed_grad = jax.jit(lambda e, t, dx: jax.vjp(lambda e_: e_[t], e)[1](dx)[0])
    update = jax.jit(lambda p, g: jax.tree.map(lambda a, b: a - lr * b.astype(a.dtype), p, g))

    def step(params, tokens):
        x = embed_in(params["embed"], tokens)
        pullbacks = []
        for i, p in enumerate(params["blocks"]):
            with annotate.layer(i):
                x, pb = fwd(x, p)
            pullbacks.append(pb)
        loss, (dx, d_embed_head) = head(x, params["embed"], tokens)
        grads = [None] * len(pullbacks)
        for i in reversed(range(len(pullbacks))):
            with annotate.layer(i):
                dx, grads[i] = bwd(pullbacks[i], dx)
        d_embed = d_embed_head + embed_grad(params["embed"], tokens, dx)
        params = update(params, {"embed": d_embed, "blocks": grads})
        return params, loss

    return step


def model_flops(batch: int, seq: int, d: int, ffn: int, layers: int, vocab: int) -> int:
    """Matmul FLOPs of one training step (forward x 3, causal attention counted in full, no
    recomputation): what MFU divides by."""
    per_token = layers * (8 * d * d + 4 * d * ffn + 4 * seq * d) + 2 * d * vocab
    return 3 * batch * seq * per_token


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--policy",
        choices=POLICIES,
        default=None,
        help="offload policy (default: $PROFILE_STEP_POLICY, else none)",
    )
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=256)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3, help="captured steps")
    ap.add_argument("--warmup", type=int, default=2, help="steps before the capture (compilation)")
    ap.add_argument("--scan", action="store_true", help="layers under lax.scan")
    ap.add_argument("--dispatch", choices=("fused", "per-layer"), default="fused")
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--fail-at-step", type=int, default=None, help="raise at this step (for tests)")
    ap.add_argument(
        "--jax-trace",
        default=None,
        metavar="DIR",
        help="also record the captured steps with jax.profiler (Perfetto trace) into DIR",
    )
    args = ap.parse_args(argv)
    policy = args.policy or annotate.policy_name("none")
    if policy not in POLICIES:
        ap.error(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)}")
    if args.d_model % args.heads:
        ap.error("--d-model must be a multiple of --heads")
    if args.scan and args.dispatch == "per-layer":
        ap.error("--scan and --dispatch per-layer exclude each other")

    dtype = jnp.dtype(args.dtype)

    def inputs():
        params = init_params(jax.random.key(0), args.vocab, args.d_model, args.ffn, args.layers, dtype)
        return params, jax.random.randint(jax.random.key(1), (args.batch, args.seq), 0, args.vocab)

    # under `profile-step plan` nothing runs: shapes are enough, no need to initialize
    params, tokens = jax.eval_shape(inputs) if annotate.planning() else inputs()
    layer = make_layer(policy, args.heads)
    step = per_layer_step(layer, args.lr) if args.dispatch == "per-layer" else fused_step(layer, args.scan, args.lr)

    print(
        f"train.py: policy={policy} backend={jax.default_backend()} layers={args.layers} "
        f"d_model={args.d_model} seq={args.seq} batch={args.batch} scan={args.scan} "
        f"dispatch={args.dispatch}",
        flush=True,
    )
    # the step's compiled module for profile-step (per-layer dispatch runs several programs: their
    # fused form is handed over); under `profile-step plan` the script ends here
    fused = step if args.dispatch == "fused" else fused_step(layer, args.scan, args.lr)
    compiled = annotate.compiled_step(fused, params, tokens)
    if compiled is not None and args.dispatch == "fused":
        step = compiled  # the executable just compiled: no second compilation
    for i in range(args.warmup):
        with annotate.warmup(i):
            params, loss = step(params, tokens)
            jax.block_until_ready(loss)
    facts = {k: v for k, v in vars(args).items() if k != "policy"}
    flops = model_flops(args.batch, args.seq, args.d_model, args.ffn, args.layers, args.vocab)
    jax_trace = (
        jax.profiler.trace(args.jax_trace, create_perfetto_trace=True) if args.jax_trace else contextlib.nullcontext()
    )
    tokens_per_step = args.batch * args.seq
    offloaded = OFFLOADED.get(policy, [])  # what offload-missing reads where the compiled step cannot say (a CPU)
    facts_out = {"model_flops_per_step": flops, "tokens_per_step": tokens_per_step, "offload_names": offloaded}
    with annotate.capture(policy, model=facts, **facts_out), jax_trace:
        for i in range(args.steps):
            if args.fail_at_step == i:
                raise RuntimeError(f"failing at step {i} as asked (--fail-at-step)")
            t0 = time.perf_counter()
            with annotate.step(i):
                params, loss = step(params, tokens)
                jax.block_until_ready(loss)
            print(f"step {i}: loss {float(loss):.4f} ({(time.perf_counter() - t0) * 1e3:.1f} ms)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
