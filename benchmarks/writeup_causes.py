"""The write-up's DeepSeek gap, cause by cause: ``benchmarks/writeup_mesh.py`` compiled under several
policies and XLA flags in one script process, each predicted by profile-step's roofline replay.

Policies: ``remat`` (every name recomputed), ``writeup`` (the write-up's: DeepSeek's ``mla_q``, ``mla_kv``,
``moe_mlpwi_0``, ``moe_mlpwi_1``, Llama's ``query_proj``, ``key_proj``, ``value_proj`` offloaded, the rest
recomputed), ``writeup+dispatched`` (the same and
the tokens the dispatch all-to-all brought, ``moe_dispatched``), ``keep`` (every name kept).
Flag sets (compile options): ``on`` (latency-hiding scheduler and pipelined host offloading, as
``writeup_compare.py``), ``on8`` (the same and ``xla_gpu_experimental_parallel_async_compute_limit=8``,
the write-up's third flag), ``nopipe`` (the scheduler on, pipelined host offloading off).

Per row: the predicted step, its compute, the collectives' time and what of it is exposed, the
host copies' exposed time, the copies back that are late (the compute stream waited on their
done) and the compiled peak device memory; the all-to-alls and all-gathers in the compiled
module are counted.  Every time is predicted, not measured.

``--calibrate RECORDING`` adds each row's step under the cost model calibrated on a real recording
(``predict.calibrate``: per op class, measured over roofline on that run's GPU, described by
``--calibrate-spec``), carried to the target as ``plan --calibrate`` does; ``--compute-only`` keeps
the collectives at the roofline (only the compute classes' scales carried).

    .venv/bin/python benchmarks/writeup_causes.py --rows remat:on,writeup:on --out DIR -- --batch 8
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiler.capture.plan import predict_links
from profiler.predict import calibrate, roofline
from profiler.predict.measured import load
from profiler.predict.simulate import Prediction, simulate
from profiler.tune.candidate import Candidate
from profiler.tune.compiler import Compiler
from profiler.tune.run import TuneRequest, limit_of, names_of, open_session
from profiler.units import human_bytes
from profiler.xla import targets
from profiler.xla.compiled import load_module

MESH = Path(__file__).resolve().parent / "writeup_mesh.py"
WRITEUP = {
    "deepseek": ["mla_q", "mla_kv", "moe_mlpwi_0", "moe_mlpwi_1"],
    "llama": ["query_proj", "key_proj", "value_proj"],
}
# every name writeup_mesh.py tags (profile-step's name search does not see inside jax.shard_map yet)
ALL = {
    "deepseek": ["decoder_layer_input", "query_wa_proj", "mla_q", "query_proj", "kv_wa_proj", "mla_kv", "key_proj",
                 "value_proj", "attention_out", "out_proj", "moe_dispatched", "moe_mlpwi_0", "moe_mlpwi_1", "moe_mlpwo",
                 "mlpwi_0", "mlpwi_1", "mlpwo"],
    "llama": ["decoder_layer_input", "query_proj", "key_proj", "value_proj", "attention_out", "out_proj", "mlpwi_0",
              "mlpwi_1", "mlpwo"],
}  # fmt: skip
POLICIES = ("remat", "writeup", "writeup+dispatched", "keep")
LHS = {"xla_gpu_enable_latency_hiding_scheduler": True}
FLAGS: dict[str, dict[str, Any]] = {
    "on": {**LHS, "xla_gpu_enable_pipelined_host_offloading": True},
    "on8": {**LHS, "xla_gpu_enable_pipelined_host_offloading": True,
            "xla_gpu_experimental_parallel_async_compute_limit": 8},
    "nopipe": {**LHS, "xla_gpu_enable_pipelined_host_offloading": False},
}  # fmt: skip
COLLECTIVE = re.compile(r"\s(all-to-all|all-gather|reduce-scatter|all-reduce)(?:-start)?\(")


def policy(which: str, model: str = "deepseek") -> Candidate:
    """The candidate a policy word names for *model* (ValueError for another word)."""
    remat = dict.fromkeys(ALL[model], "remat") | {"decoder_layer_input": "device"}
    if which == "remat":
        return Candidate.of(remat)
    if which == "writeup":
        return Candidate.of(remat | dict.fromkeys(WRITEUP[model], "offload"))
    if which == "writeup+dispatched" and model == "deepseek":  # and the tokens the dispatch brought: not re-sent
        return Candidate.of(remat | dict.fromkeys([*WRITEUP[model], "moe_dispatched"], "offload"))
    if which == "keep":
        return Candidate.of(dict.fromkeys(ALL[model], "device"))
    raise ValueError(f"unknown policy {which!r} for {model} ({', '.join(POLICIES)})")


def parse_rows(text: str) -> list[tuple[str, str]]:
    """``policy:flags,...`` into pairs, checked (ValueError naming the bad one)."""
    rows = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        pol, _, flags = item.partition(":")
        if pol not in POLICIES or flags not in FLAGS:
            want = f"POLICY:FLAGS, POLICY {'|'.join(POLICIES)}, FLAGS {'|'.join(FLAGS)}"
            raise ValueError(f"bad row {item!r}: want {want}")
        rows.append((pol, flags))
    return rows


def collectives(hlo_text: str) -> dict[str, int]:
    """How many of each collective the compiled module's text holds (a loop body's once)."""
    out: dict[str, int] = {}
    for m in COLLECTIVE.finditer(hlo_text):
        out[m.group(1)] = out.get(m.group(1), 0) + 1
    return out


def step_ms(p: Prediction) -> dict[str, float]:
    """A predicted step's times in ms: the step, its compute and collectives, and what of them is exposed."""
    return {
        "step_ms": p.step_ns / 1e6,
        "compute_ms": p.compute_ns / 1e6,
        "collective_ms": p.collective_ns / 1e6,
        "exposed_collective_ms": p.exposed_collective_ns / 1e6,
        "exposed_copy_ms": p.exposed_ns / 1e6,
    }


def calibrated(cal: calibrate.Calibration, hlo_file: str, spec: str, c: Compiler) -> dict[str, Any]:
    """The step of the compiled program *hlo_file* under calibration *cal*, on the target *spec*."""
    module = load_module(Path(hlo_file))[0]
    sched, costs, how = calibrate.calibrated_costs(cal, module, spec, c.link)
    return step_ms(simulate(sched, costs, c.link)) | {"costed": how}


def row_doc(c: Compiler, cand: Candidate, cal: calibrate.Calibration | None = None, spec: str = "") -> dict[str, Any]:
    """One compiled row's numbers (its error where it did not compile)."""
    comp = c.compiled(cand)
    if comp is None:
        return {"error": c.errors.get(c._key(cand))}
    pred = comp.predict(c.link)
    o = c.outcome(cand)
    late = o.late_h2d or {}
    return {
        **step_ms(pred),
        "copy_ms": {k: v / 1e6 for k, v in pred.copy_ns.items()},
        "late_h2d": {"count": late.get("count", 0), "wait_ms": late.get("waited_ns", 0) / 1e6},
        "device_bytes": comp.device_bytes,
        "device": human_bytes(comp.device_bytes) if comp.device_bytes else None,
        "collectives": collectives(Path(comp.hlo_file).read_text()),
        "compile_s": comp.seconds,
    } | ({"calibrated": calibrated(cal, comp.hlo_file, spec, c)} if cal is not None else {})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", required=True, help="POLICY:FLAGS,... (remat|writeup|keep : on|on8|nopipe)")
    ap.add_argument("--model", choices=sorted(WRITEUP), default="deepseek")
    ap.add_argument("--target", default="b200")
    ap.add_argument("--link", default="nvlink-c2c")
    ap.add_argument("--gpu-gbps", type=float, default=None, help="GPU-to-GPU GB/s a direction (default: the target's)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--calibrate", type=Path, default=None, help="a recording to calibrate the cost model on")
    ap.add_argument("--calibrate-spec", type=Path, default=None, help="the recording's GPU description (.txtpb)")
    ap.add_argument("--compute-only", action="store_true", help="carry the compute classes' scales only")
    args, rest = ap.parse_known_args()
    rest = ["--model", args.model, *(a for a in rest if a != "--")]
    try:
        rows = parse_rows(args.rows)
        cands = {(pol, flags): policy(pol, args.model) for pol, flags in rows}
    except ValueError as exc:
        print(f"writeup_causes.py: --rows: {exc}", file=sys.stderr)
        return 2
    cal = None
    if args.calibrate:
        if args.calibrate_spec is None or args.gpu_gbps:
            print("writeup_causes.py: --calibrate needs --calibrate-spec, and not --gpu-gbps", file=sys.stderr)
            return 2
        cal = calibrate.calibrate(load(args.calibrate), args.calibrate_spec.read_text())
        if args.compute_only:
            cal.scale = {k: v for k, v in cal.scale.items() if k != "collective"}
        scales = ", ".join(f"{k} {v:.2f}" for k, v in sorted(cal.scale.items()))
        print(f"calibrated on {args.calibrate.name}: {scales}")
    out = Path(args.out)
    out.mkdir(parents=True)
    label, spec, builtin = targets.resolve(args.target)
    link = predict_links([args.link], label)[0]
    req = TuneRequest(script=MESH, script_args=rest, target=args.target, batch_arg=None, memory_limit=None)
    limit, _ = limit_of(req, spec)
    device = roofline.device_from_spec(spec, builtin.peak_bf16_tflops if builtin else None)
    if args.gpu_gbps:
        device = dataclasses.replace(device, interconnect_bytes_s=args.gpu_gbps * 1e9)
    t0 = time.monotonic()
    docs: dict[str, Any] = {}
    with open_session(req, out, spec) as session:
        session.start()
        names = names_of(session.request({"op": "names"}))  # the ones tune would see
        compilers = {f: Compiler(session, out / f, device, link, limit, FLAGS[f]) for f in {f for _, f in rows}}
        for c in compilers.values():
            c.echo = print
        for pol, flags in rows:
            docs[f"{pol}:{flags}"] = row_doc(compilers[flags], cands[pol, flags], cal, spec)
            print(f"{pol}:{flags}: {json.dumps(docs[f'{pol}:{flags}'])}", flush=True)
    doc = {"script_args": rest, "target": label, "link": link.link.name, "names": [n.name for n in names],
           "interconnect_gbps": device.interconnect_bytes_s / 1e9, "rows": docs,
           "calibration": ({"source": str(args.calibrate), "scale": cal.scale} if cal else None),
           "seconds": round(time.monotonic() - t0, 1)}  # fmt: skip
    (out / "causes.json").write_text(json.dumps(doc, indent=2, default=str))
    print(f"{label}, host link {link.link.name}, GPU link {doc['interconnect_gbps']:.0f} GB/s; predicted, not measured")
    return 0


if __name__ == "__main__":
    sys.exit(main())
