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

Every number is predicted (the roofline over the compiled schedule, replayed), not measured.

    .venv/bin/python benchmarks/writeup_compare.py --model deepseek --target b200 --link nvlink-c2c
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiler.capture.plan import predict_links
from profiler.predict import roofline
from profiler.tune.candidate import Candidate, resting
from profiler.tune.compiler import Compiler
from profiler.tune.run import TuneRequest, limit_of, names_of, open_session
from profiler.tune.search import best_of, search
from profiler.units import human_bytes, parse_bytes
from profiler.xla import targets

LAYERS = Path(__file__).resolve().parent / "writeup_layers.py"
WRITEUP = {
    "deepseek": ["mla_q", "mla_kv", "moe_mlpwi_0", "moe_mlpwi_1"],
    "llama": ["query_proj", "key_proj", "value_proj"],
}
ON = {"xla_gpu_enable_latency_hiding_scheduler": True, "xla_gpu_enable_pipelined_host_offloading": True}
OFF = {"xla_gpu_enable_latency_hiding_scheduler": False, "xla_gpu_enable_pipelined_host_offloading": False}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(WRITEUP), required=True)
    ap.add_argument("--target", default="b200")
    ap.add_argument("--link", default="nvlink-c2c")
    ap.add_argument("--names", default=None, help="the names tune searches (default: all)")
    ap.add_argument("--max-compiles", type=int, default=24)
    ap.add_argument("--memory-limit", default=None, help="device memory for the step (default: 0.75 of the target's)")
    ap.add_argument("--out", required=True)
    args, rest = ap.parse_known_args()
    out = Path(args.out)
    out.mkdir(parents=True)
    label, spec, builtin = targets.resolve(args.target)
    link = predict_links([args.link], label)[0]
    limit_given = parse_bytes(args.memory_limit) if args.memory_limit else None
    req = TuneRequest(script=LAYERS, script_args=["--model", args.model, *rest], target=args.target, batch_arg=None,
                      memory_limit=limit_given)  # fmt: skip
    limit, why = limit_of(req, spec)
    device = roofline.device_from_spec(spec, builtin.peak_bf16_tflops if builtin else None)
    t0 = time.monotonic()
    with open_session(req, out, spec) as session:
        session.start()
        names = names_of(session.request({"op": "names"}))
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
        "target": label,
        "link": {"name": link.link.name, "gbps": link.link.gbps},
        "limit_bytes": limit,
        "limit_why": why,
        "names": [{"name": n.name, "bytes_per_step": n.bytes_per_step, "count": n.count} for n in names],
        "rows": {k: vars(v) if v is not None else None for k, v in rows.items()},
        "tune": {
            "choice": choice.candidate.label(names) if choice else None,
            "placements": choice.candidate.place() if choice else None,
            "outcome": vars(choice.outcome) if choice else None,
            "compiles": result.compiles,
            "stop": result.stop,
        },
        "compiles": on.compiles + off.compiles,
        "seconds": round(time.monotonic() - t0, 1),
    }
    (out / "writeup.json").write_text(json.dumps(doc, indent=2, default=str))
    print(f"\n{args.model} on {label}, {link.link.name}; limit {human_bytes(limit)} ({why}); predicted, not measured")
    base = rows["remat"]
    for k, o in [*rows.items(), (f"tune: {doc['tune']['choice']}", choice.outcome if choice else None)]:
        if o is None:
            print(f"  {k}: did not compile")
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
