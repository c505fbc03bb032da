"""The host-offloading write-up's comparisons, compiled and predicted by profile-step's tune pieces.

For one model of ``benchmarks/writeup_layers.py`` on one target and host link, in one script
process (``profiler.capture.tune_session``), compiled for the target without a GPU:

- *remat*: every named activation recomputed (MaxText's ``remat_policy=full``);
- *write-up*: the write-up's offload policy (DeepSeek-V3: the MLA projections ``mla_q``,
  ``mla_kv`` and the MoE up-projections ``moe_mlpwi_0``, ``moe_mlpwi_1`` offloaded; Llama 3.1
  405B: ``query_proj``, ``key_proj``, ``value_proj`` offloaded; the rest recomputed), with the
  latency-hiding scheduler and pipelined host offloading on (the write-up's flags), and without
  either;
- *tune*: the search of ``profile-step tune`` (docs/tune.md) over the names given, with the flags
  on, and its choice.

``--mesh``: the same rows from ``benchmarks/writeup_mesh.py`` instead, the step on 8 GPUs with its
collectives (DeepSeek-V3: FSDP and expert parallelism's all-to-alls; Llama 3.1 405B: tensor
parallelism's all-reduces) and the other layers' states in device memory; the arguments after the
options go to that script (``--batch 2``, a toy's ``--width 256``).  tune's name search does not see
inside ``jax.shard_map``, so the names searched are the ones ``writeup_mesh.py`` tags
(``writeup_causes.ALL``); the memory limit is a GB200's (186 GB) times the share JAX takes, with
nothing taken off (the program holds the other states already).

Every number is predicted (the roofline over the compiled schedule, replayed), not measured.

    .venv/bin/python benchmarks/writeup_compare.py --model deepseek --target b200 --link nvlink-c2c
    .venv/bin/python benchmarks/writeup_compare.py --mesh --model llama --max-compiles 10 --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiler.capture.plan import predict_links, usable_fraction
from profiler.predict import roofline
from profiler.tune.candidate import Candidate, Name, resting
from profiler.tune.compiler import Compiler
from profiler.tune.document import brief
from profiler.tune.run import TuneRequest, limit_of, names_of, open_session
from profiler.tune.search import best_of, search
from profiler.units import human_bytes, parse_bytes
from profiler.xla import targets

sys.path.insert(0, str(Path(__file__).resolve().parent))
from writeup_causes import ALL

LAYERS = Path(__file__).resolve().parent / "writeup_layers.py"
MESH = Path(__file__).resolve().parent / "writeup_mesh.py"
GB200_BYTES = 186 * 10**9  # a GB200's GPU memory (the write-up's GPUs; the B200 target's is 183,359 MiB)
WRITEUP = {
    "deepseek": ["mla_q", "mla_kv", "moe_mlpwi_0", "moe_mlpwi_1"],
    "llama": ["query_proj", "key_proj", "value_proj"],
}
ON = {"xla_gpu_enable_latency_hiding_scheduler": True, "xla_gpu_enable_pipelined_host_offloading": True}
OFF = {"xla_gpu_enable_latency_hiding_scheduler": False, "xla_gpu_enable_pipelined_host_offloading": False}


def mesh_names(model: str, seen: list[Name]) -> list[Name]:
    """Every name ``writeup_mesh.py`` tags for *model*, as the script answered them where it did (tune's
    name search stops at ``jax.shard_map``: it sees only the layer's input), in the script's order."""
    answered = {n.name: n for n in seen}
    return [answered.get(n, Name(n, is_input=n == "decoder_layer_input")) for n in ALL[model]]


def mesh_limit(given: int | None, label: str, target_limit: tuple[int | None, str]) -> tuple[int | None, str]:
    """The mesh program's memory limit: *given*, else (the B200 target standing for the write-up's GB200) a
    GB200's memory times the share JAX takes, else the target's (*target_limit*); nothing taken off for the
    other layers' states either way (``writeup_mesh.py --states-gb`` puts them in the program)."""
    if given is not None or "B200" not in label:
        return target_limit
    frac = usable_fraction(None)
    return int(GB200_BYTES * frac), f"a GB200's 186 GB x {frac:g}, the share JAX takes; the states are in the program"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(WRITEUP), required=True)
    ap.add_argument("--target", default="b200")
    ap.add_argument("--link", default="nvlink-c2c")
    ap.add_argument("--names", default=None, help="the names tune searches (default: all)")
    ap.add_argument("--max-compiles", type=int, default=24)
    ap.add_argument("--memory-limit", default=None, help="device memory for the step (default: 0.75 of the target's)")
    ap.add_argument("--mesh", action="store_true", help="the 8-GPU programs of writeup_mesh.py, collectives in")
    ap.add_argument("--out", required=True)
    args, rest = ap.parse_known_args()
    rest = [a for a in rest if a != "--"]
    try:
        limit_given = parse_bytes(args.memory_limit) if args.memory_limit else None
    except ValueError as exc:
        print(f"writeup_compare.py: --memory-limit: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True)
    label, spec, builtin = targets.resolve(args.target)
    link = predict_links([args.link], label)[0]
    req = TuneRequest(script=MESH if args.mesh else LAYERS, script_args=["--model", args.model, *rest],
                      target=args.target, batch_arg=None, memory_limit=limit_given)  # fmt: skip
    limit, why = mesh_limit(limit_given, label, limit_of(req, spec)) if args.mesh else limit_of(req, spec)
    device = roofline.device_from_spec(spec, builtin.peak_bf16_tflops if builtin else None)
    t0 = time.monotonic()
    with open_session(req, out, spec) as session:
        session.start()
        names = names_of(session.request({"op": "names"}))
        if args.mesh:
            names = mesh_names(args.model, names)
        say = print
        on = Compiler(session, out / "on", device, link, limit, ON)
        off = Compiler(session, out / "off", device, link, limit, OFF)
        for c in (on, off):
            c.echo, c.names = say, names
        remat = resting(names)
        writeup = Candidate.of({**remat.place(), **dict.fromkeys(WRITEUP[args.model], "offload")})
        rows = {
            "remat": on(remat),
            "write-up policy (LHS + pipelining)": on(writeup),
            "write-up policy (neither)": off(writeup),
            "remat (neither)": off(remat),
        }
        only = {n.strip() for n in args.names.split(",")} if args.names else None
        result = search(names, on, args.max_compiles, say, only)
        choice = best_of(result.tried)
    doc = {
        "model": args.model,
        "program": "writeup_mesh.py (8 GPUs)" if args.mesh else "writeup_layers.py (1 GPU)",
        "script_args": req.script_args,
        "target": label,
        "link": {"name": link.link.name, "gbps": link.link.gbps},
        "limit_bytes": limit,
        "limit_why": why,
        "names": [{"name": n.name, "bytes_per_step": n.bytes_per_step, "count": n.count} for n in names],
        "rows": {k: vars(v) if v is not None else None for k, v in rows.items()},
        "tune": {
            **brief(choice, names),
            "compiles": result.compiles,
            "stop": result.stop,
        },
        "compiles": on.compiles + off.compiles,
        "seconds": round(time.monotonic() - t0, 1),
    }
    (out / "writeup.json").write_text(json.dumps(doc, indent=2, default=str))
    print(f"\n{args.model} ({doc['program']}) on {label}, {link.link.name}; predicted, not measured")
    print(f"  limit {human_bytes(limit)} ({why})")
    base = rows["remat"]
    for k, o in [*rows.items(), (f"tune: {doc['tune']['label']}", choice.outcome if choice else None)]:
        if o is None:
            print(f"  {k}: {'no candidate tried fits the limit' if k.startswith('tune') else 'did not compile'}")
            continue
        vs = f"{100 * (base.step_ns / o.step_ns - 1):+.1f}% against remat" if base else ""
        print(f"  {k}: {o.step_ns / 1e6:.1f} ms, {o.exposed_ns / 1e6:.2f} ms exposed, {human_bytes(o.device_bytes)} "
              f"device{'' if o.fits else ' (does NOT fit)'}, {vs}")  # fmt: skip
    print(
        f"  tune: {result.compiles} compiles, stopped: {result.stop}; {doc['compiles']} compiles in all, "
        f"{doc['seconds']:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
