"""``profile-step tune`` against MaxText's estimator (``src/maxtext/utils/estimator.py``, e591f30) on
MaxText's tiny CPU config (FIELD_NOTES), compiled for an H100 without a GPU.

The estimator (its mode 1, the batch given) orders MaxText's ``custom`` tensor names by its
``tensor_score`` (arithmetic intensity and size from the config), starts with every tensor on the
device and, while ``train_compile.is_oom`` says the step does not fit, moves the next tensor one
step toward less memory (device -> offload for each tensor in that order, then offload ->
remat): memory only, no time.  Its ``is_oom`` compiles through MaxText's ``train_compile``,
which for a GPU takes the local GPUs; here the same walk is written out (the code below, from the
estimator's description, not copied) and each ``is_oom`` is tune's compile for the H100 with its
fit rule (device memory of ``memory_analysis()`` over the limit), in the same MaxText process.
Then tune's own search (docs/tune.md) and presets, with a compile cache of their own.  Both are
predicted on the link by the same roofline.

    .venv/bin/python benchmarks/tune_vs_estimator.py --python /work/venvs/maxtext-aot/bin/python \\
        --maxtext /work/maxtext --memory-limit 2.25MiB --out /tmp/est
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiler.capture.plan import predict_links
from profiler.predict import roofline
from profiler.tune.candidate import Candidate
from profiler.tune.compiler import Compiler
from profiler.tune.document import brief
from profiler.tune.run import TuneRequest, evaluate_presets, limit_of, names_of, open_session
from profiler.tune.search import best_of, search
from profiler.units import human_bytes, parse_bytes
from profiler.xla import targets

TINY = dict(emb=64, heads=2, kv_heads=2, head_dim=32, mlp=128, seq=64)
ESTIMATOR_NAMES = ["context", "query_proj", "key_proj", "value_proj", "kv_proj", "mlpwi_0", "mlpwi_1", "mlpwo",
                   "out_proj"]  # fmt: skip  # its list for fused_mlp=false, two MLP activations


def estimator_order(c: dict[str, int]) -> list[str]:
    """The estimator's priority: ascending ``tensor_score`` (the larger and less intense first), a stable sort."""
    qh, kvh = c["heads"] * c["head_dim"], c["kv_heads"] * c["head_dim"]
    score = {
        "context": (-c["seq"], -qh),
        "mlpwi_0": (-c["emb"], -c["mlp"]),
        "mlpwi_1": (-c["emb"], -c["mlp"]),
        "mlpwo": (-c["mlp"], -c["emb"]),
        "query_proj": (-c["emb"], -qh),
        "key_proj": (-c["emb"], -kvh),
        "kv_proj": (-c["emb"], -kvh),
        "value_proj": (-c["emb"], -kvh),
        "out_proj": (-qh, -c["emb"]),
    }
    return sorted(ESTIMATOR_NAMES, key=lambda n: score[n])


def previous(policy: dict[str, str], order: list[str]) -> dict[str, str] | None:
    """One step toward less memory: the first tensor (in order) above offload goes to offload; when
    none, the first above remat goes to remat; None when everything is recomputed."""
    rank = {"remat": 0, "offload": 1, "device": 2}
    for target in ("offload", "remat"):
        for n in order:
            if rank[policy[n]] > rank[target]:
                return {**policy, n: target}
    return None


def estimator(names: list, compiler: Compiler, order: list[str]) -> dict:
    """The estimator's walk with tune's compiles as its is_oom; its answer, is_oom calls, compiles, seconds."""
    t0, compiles0 = time.monotonic(), compiler.compiles
    step_names = {n.name for n in names}
    policy = dict.fromkeys(order, "device")
    calls = 0
    while policy is not None:
        place = {n.name: ("device" if n.is_input else "remat") for n in names}  # decoder_layer_input=device
        place.update({k: v for k, v in policy.items() if k in step_names})
        cand = Candidate.of(place)
        calls += 1
        out = compiler(cand)
        if out is not None and out.fits:
            return {"policy": policy, "candidate": cand, "outcome": out, "is_oom_calls": calls,
                    "compiles": compiler.compiles - compiles0, "seconds": time.monotonic() - t0}  # fmt: skip
        policy = previous(policy, order)
    return {"policy": None, "candidate": None, "outcome": None, "is_oom_calls": calls,
            "compiles": compiler.compiles - compiles0, "seconds": time.monotonic() - t0}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", required=True, help="MaxText's Python with jax[cuda12] (docs/tune.md)")
    ap.add_argument("--maxtext", required=True, help="the MaxText checkout")
    ap.add_argument("--memory-limit", default=None)
    ap.add_argument("--link", default="pcie5")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    mt = Path(args.maxtext)
    out = Path(args.out)
    out.mkdir(parents=True)
    config = [str(mt / "src/maxtext/configs/base.yml"), "run_name=t", f"base_output_directory={out / 'mt'}",
              "dataset_type=synthetic", "steps=3", "per_device_batch_size=1", f"max_target_length={TINY['seq']}",
              f"base_emb_dim={TINY['emb']}", f"base_num_query_heads={TINY['heads']}",
              f"base_num_kv_heads={TINY['kv_heads']}", f"base_mlp_dim={TINY['mlp']}", "base_num_decoder_layers=2",
              f"head_dim={TINY['head_dim']}", "vocab_size=256", "enable_checkpointing=false", "hardware=cpu",
              "scan_layers=true", "attention=dot_product", "jax_cache_dir=", "log_period=1",
              "skip_jax_distributed_system=true", "remat_policy=full"]  # fmt: skip
    os.environ.setdefault("DECOUPLE_GCLOUD", "TRUE")
    limit_given = parse_bytes(args.memory_limit) if args.memory_limit else None
    train = mt / "src/maxtext/trainers/pre_train/train.py"
    req = TuneRequest(script=train, script_args=config, python=args.python, batch_arg=None, memory_limit=limit_given)
    label, spec, builtin = targets.resolve("h100")
    link = predict_links([args.link], label)[0]
    limit, why = limit_of(req, spec)
    device = roofline.device_from_spec(spec, builtin.peak_bf16_tflops)
    order = estimator_order(TINY)
    with open_session(req, out, spec) as session:
        session.start()
        names = names_of(session.request({"op": "names"}))
        est_c = Compiler(session, out / "estimator", device, link, limit)
        est_c.echo, est_c.names = print, names
        est = estimator(names, est_c, order)
        tune_c = Compiler(session, out / "tune", device, link, limit)
        tune_c.echo, tune_c.names = print, names
        t0 = time.monotonic()
        result = search(names, tune_c, 48, print)
        presets = evaluate_presets(names, tune_c)
        choice = best_of(result.tried + presets)
        tune_s = time.monotonic() - t0
    doc = {
        "limit_bytes": limit,
        "limit_why": why,
        "link": link.link.name,
        "order": order,
        "estimator": {
            "policy": est["policy"],
            "label": est["candidate"].label(names) if est["candidate"] else None,
            "outcome": vars(est["outcome"]) if est["outcome"] else None,
            "is_oom_calls": est["is_oom_calls"],
            "compiles": est["compiles"],
            "seconds": round(est["seconds"], 1),
        },
        "tune": {
            **brief(choice, names),
            "compiles": tune_c.compiles,
            "search_compiles": result.compiles,
            "stop": result.stop,
            "seconds": round(tune_s, 1),
        },
    }
    (out / "estimator.json").write_text(json.dumps(doc, indent=2, default=str))
    print(f"\nMaxText tiny, H100, {link.link.name}, limit {human_bytes(limit)} ({why}); predicted, not measured")
    print(f"  estimator order: {', '.join(order)}")
    for who in ("estimator", "tune"):
        d, o = doc[who], doc[who]["outcome"]
        state = "nothing fits" if o is None else (
            f"{o['step_ns'] / 1e3:.2f} µs, {human_bytes(o['device_bytes'])} on the device")  # fmt: skip
        extra = f", {d['is_oom_calls']} is_oom calls" if who == "estimator" else f", stopped: {d['stop']}"
        print(f"  {who}: {d['label']}: {state}; {d['compiles']} compiles, {d['seconds']:.0f} s{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
