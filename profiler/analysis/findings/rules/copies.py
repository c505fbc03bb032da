"""Rules about the copies themselves: host memory, synchronous calls, streams, link speed,
contention with kernels and with NCCL."""

from __future__ import annotations

import re

import numpy as np
import polars as pl

from profiler.analysis.contexts import CONTEXTS
from profiler.analysis.findings import Finding, changes, rule
from profiler.analysis.findings.config import exceeds, under
from profiler.analysis.findings.evidence import CannotDecide, Evidence
from profiler.analysis.findings.rules.text import dur, ms, names, pct, size
from profiler.analysis.intervals import length_by_group, measure_within, union
from profiler.analysis.links import run_link
from profiler.analysis.overlap import valid
from profiler.units import count

# cudaMemcpy, cudaMemcpy2D, cuMemcpyDtoH_v2, cudaMemcpyPeer ...: every copy call without "Async"
COPY_CALL = r"^cu(?:da)?Memcpy"
# XLA's fusion kinds and library kernels that are limited by memory bandwidth, and those that are not
MEMORY_BOUND = re.compile(
    r"(?:^|[_.])(loop|input|reduce|reduction|transpose|copy|concatenate|dynamic|slice|convert|broadcast|"
    r"elementwise|scatter|gather|memcpy|memset|pad)",
    re.IGNORECASE,
)
COMPUTE_BOUND = re.compile(r"gemm|cublas|cutlass|xmma|conv|matmul|dot|flash|attention|wgmma", re.IGNORECASE)


def memory_bound(name: str | None) -> bool | None:
    """True for a kernel that by its name is limited by memory bandwidth, False for a matmul-like
    one, None when the name does not tell."""
    if not name:
        return None
    if COMPUTE_BOUND.search(name):
        return False
    return True if MEMORY_BOUND.search(name) else None


@rule("pageable-copies")
def pageable_copies(ev: Evidence) -> list[Finding]:
    pg = ev.pageable_copies
    exposed = length_by_group(ev.exposed_pageable)  # cost: the pageable copies' exposed time, per device
    moved = dict(pg.group_by("device").agg(pl.col("bytes").sum()).iter_rows())
    out = []
    for dev, d in ev.devices.items():
        per = {cls: (d["copies"][cls]["pageable_count"], d["copies"][cls]["count"]) for cls in ("h2d", "d2h")}
        n = sum(p for p, _ in per.values())
        if not n or n < ev.config["pageable_min_count"]:
            continue
        listed = " and ".join(f"{p} of {c} {cls}" for cls, (p, c) in per.items() if p)
        cost = exposed.get(int(dev), 0)
        out.append(
            Finding(
                "pageable-copies",
                "problem",
                f"{ev.device_word} {dev}: "
                f"{listed} copies ({size(moved.get(int(dev), 0))}) use pageable host memory: they are "
                f"staged through a bounce buffer and cannot overlap kernels; {dur(cost)} of them ran with no kernel "
                "beside them",
                'put the host side in pinned memory: memory_kind="pinned_host" (not "unpinned_host") in JAX, '
                "cudaHostAlloc or cudaHostRegister in your own code",
                where={"device": dev},
                evidence={f"{cls}_pageable": p for cls, (p, _) in per.items()} | {"exposed_ns": cost},
                view="streams",
                attributed_ns=cost,
                change=changes.pinned(ev, dev),
                **ev.basis_device(dev),
            )
        )
    return out


@rule("sync-copies")
def sync_copies(ev: Evidence) -> list[Finding]:
    calls = ev.need_runtime(COPY_CALL, without="Async")  # only the synchronous calls are read
    steps = [s for s in ev.steps["steps"] if not s["excluded"]]
    scope = "the capture"
    if steps and calls.height:
        lo = np.array([s["start_ns"] for s in steps])
        hi = np.array([s["end_ns"] for s in steps])
        order = np.argsort(lo)
        lo, hi = lo[order], hi[order]
        t = calls["start"].to_numpy()
        i = np.searchsorted(lo, t, side="right") - 1
        inside = (i >= 0) & (t < hi[np.maximum(i, 0)])
        calls = calls.filter(pl.Series(inside))
        scope = f"the {count(len(steps), 'step')}"
    elif steps:
        scope = f"the {count(len(steps), 'step')}"
    n = calls.height
    if n == 0 or n < ev.config["sync_copy_min_count"]:
        return []
    top = calls.group_by("name").len().sort(["len", "name"], descending=[True, False])
    blocked = int((calls["end"] - calls["start"]).sum())
    # cost: the wall-clock time during which at least one host thread sat in such a call
    wall = int(sum(length_by_group(union(np.zeros(n, dtype=np.int64), calls["start"], calls["end"])).values()))
    listed = [f"{name} x{n}" for name, n in top.iter_rows()]
    threads = f" ({ms(wall)} of wall time: calls on several threads overlapped)" if wall < blocked else ""
    basis = ev.basis_steps(steps) if steps else ev.basis_capture()
    return [
        Finding(
            "sync-copies",
            "problem",
            f"{n} synchronous copy calls during {scope} ({names(listed)}) held the host for {ms(blocked)}{threads}",
            "use the asynchronous form on a stream of its own (cudaMemcpyAsync); in JAX a synchronous copy "
            "inside the step usually comes from reading a device array there (float(loss), np.asarray, "
            "jax.device_get, print): read it after the step",
            where={"steps": scope},
            evidence={"calls": n, "host_ns": blocked, "wall_ns": wall, "by_name": dict(top.iter_rows())},
            view="timeline",
            attributed_ns=wall,
            change=changes.sync_calls(ev, steps),
            **basis,
        )
    ]


@rule("copy-on-compute-stream")
def copy_on_compute_stream(ev: Evidence) -> list[Finding]:
    copies = ev.offload_copies.group_by("device", "stream").agg(pl.len().alias("copies"), pl.col("bytes").sum())
    kernels = (
        ev.trace.kernel_ops.filter((pl.col("end") >= pl.col("start")) & ~pl.col("is_nccl").fill_null(False))
        .group_by("device", "stream")
        .agg(pl.len().alias("kernels"))
        .with_columns((pl.col("kernels") / pl.col("kernels").sum().over("device")).alias("share"))
    )
    shared = (
        copies.join(kernels, on=["device", "stream"])
        .filter(pl.col("share") >= ev.config["compute_stream_share"] * (1 - 1e-9))
        .sort("device", "stream")
    )
    # cost: the time the compute stream spent copying, |U(h2d/d2h copies on it)|
    c = ev.offload_copies.join(shared.select("device", "stream"), on=["device", "stream"])
    key = c["device"].to_numpy().astype(np.int64) * (1 << 32) + c["stream"].to_numpy()
    held = length_by_group(union(key, c["start"].to_numpy(), c["end"].to_numpy()))
    return [
        Finding(
            "copy-on-compute-stream",
            "problem",
            f"{ev.device_word} {dev}: {n} h2d/d2h copies ({size(nbytes or 0)}) run on stream {stream}, the stream of "
            f"{pct(share)} of the compute kernels ({k}), for {dur(held.get(int(dev) * (1 << 32) + int(stream), 0))}: "
            "each copy waits for the kernels before it and holds up the kernels after it",
            "give the copies a stream of their own: XLA does for its async copy-start/copy-done; a device_put "
            "or device_get inside the step, or a CUDA graph that captured the copies, puts them on the "
            "compute stream",
            where={"device": str(dev), "stream": int(stream)},
            evidence={"copies": int(n), "bytes": int(nbytes or 0), "compute_kernels": int(k), "share": share},
            view="streams",
            attributed_ns=held.get(int(dev) * (1 << 32) + int(stream), 0),
            change=changes.own_stream(ev, str(dev), int(stream)),
            **ev.basis_device(dev),
        )
        for dev, stream, n, nbytes, k, share in shared.iter_rows()
    ]


@rule("slow-link")
def slow_link(ev: Evidence) -> list[Finding]:
    out = []
    judged = False
    for dev, d in ev.devices.items():
        cases = [
            (cls, d["copies"][cls]["contexts"]["alone"])
            for cls in ("h2d", "d2h")
            if d["copies"][cls]["contexts"]["alone"]["count"] >= max(1, ev.config["slow_link_min_copies"])
        ]
        if not cases:
            continue
        name = ev.gpu_names.get(dev)
        chosen = run_link(ev.gpu_names, dev, ev.link)
        if chosen.assumed:  # a slow link is never judged against an assumed one
            raise CannotDecide(
                f"the host link of {ev.device_word} {dev} ({name or 'unknown GPU'}) is unknown: give --link"
            )
        link = chosen.link
        judged = True
        for cls, alone in cases:
            frac = alone["gbps"] / link.gbps
            if under(frac, ev.config["slow_link_fraction"]):
                # cost: the part of the direction's exposed time that the link's speed would remove
                exposed = int(d["copies"][cls]["exposed_ns"])
                cost = round(exposed * (1 - frac))
                out.append(
                    Finding(
                        "slow-link",
                        "problem",
                        f"{ev.device_word} {dev}: "
                        f"{cls} copies of 1 MiB or more running alone reach {alone['gbps']:.1f} GB/s, "
                        f"{pct(frac)} of {link.name} ({link.gbps:g} GB/s per direction); at the link's speed the "
                        f"{dur(exposed)} of exposed {cls} copy time would be {dur(cost)} shorter",
                        "check that the host buffers are pinned and on the GPU's NUMA node (numactl), the link's "
                        "generation and width (nvidia-smi -q, 'GPU Link Info'), and that no other process shares "
                        "the link; small copies are bound by latency: offload fewer, larger activations",
                        where={"device": dev, "direction": cls},
                        evidence={
                            "gbps_alone": alone["gbps"],
                            "link_gbps": link.gbps,
                            "copies": alone["count"],
                            "exposed_ns": exposed,
                        },
                        view="streams",
                        attributed_ns=cost,
                        change=changes.slow_link(ev, dev, cls, link.gbps, f"{link.name} ({link.gbps:g} GB/s)"),
                        **ev.basis_device(dev),
                    )
                )
    if not judged:
        need = max(1, ev.config["slow_link_min_copies"])
        most = max(
            (d["copies"][c]["contexts"]["alone"]["count"] for d in ev.devices.values() for c in ("h2d", "d2h")),
            default=0,
        )
        raise CannotDecide(
            f"no GPU ran {need} or more h2d or d2h copies of 1 MiB or more alone (the most: {most}; "
            "slow_link_min_copies): too few to measure the link by"
        )
    return out


def _overlapped_kernels(ev: Evidence, dev: str, cls: str) -> list[dict[str, object]]:
    """The kernels that overlapped the device's *cls* copies of the ``kernels`` context most,
    memory-bound ones first."""
    copies = ev.offload_copies.filter(pl.col("device") == int(dev))
    # the contexts the device metrics measured (every valid copy, in order): this device's
    valid_copies = valid(ev.trace.copies)
    on = (valid_copies["device"] == int(dev)).fill_null(False).to_numpy()
    all_copies = valid_copies.filter(pl.Series(on))
    ctx = ev.breakdown.copy_contexts[on]
    chosen = all_copies.filter(pl.Series((ctx == CONTEXTS.index("kernels")) & (all_copies["cls"] == cls).to_numpy()))
    if chosen.height == 0 or copies.height == 0:
        return []
    cu = union(np.zeros(chosen.height, dtype=np.int64), chosen["start"].to_numpy(), chosen["end"].to_numpy())
    kd, ks, ke = ev.kernel_columns
    rows = np.flatnonzero(kd == int(dev))
    ov = measure_within(cu, np.zeros(rows.size, dtype=np.int64), ks[rows], ke[rows])
    hit = np.flatnonzero(ov > 0)
    top = (
        pl.DataFrame({"name": ev.kernels["name"].gather(rows[hit]), "ov": ov[hit]})
        .group_by("name")
        .agg(pl.col("ov").sum(), pl.len().alias("kernels"))
        .with_columns(pl.col("name").map_elements(memory_bound, return_dtype=pl.Boolean).alias("memory_bound"))
        .sort([pl.col("memory_bound").fill_null(False), "ov", "name"], descending=[True, True, False])
        .head(3)
    )
    return [{"name": n, "overlap_ns": int(o), "kernels": int(c), "memory_bound": m} for n, o, c, m in top.iter_rows()]


@rule("copy-contention")
def copy_contention(ev: Evidence) -> list[Finding]:
    out = []
    need = max(1, ev.config["contention_min_copies"])
    for dev, d in ev.devices.items():
        for cls in ("h2d", "d2h"):
            m = d["copies"][cls]
            ctx, slow = m["contexts"], m["slowdown_with_kernels"]
            if ctx["alone"]["count"] < need or ctx["kernels"]["count"] < need or slow is None:
                continue
            if not exceeds(slow, ev.config["contention_slowdown"]):
                continue
            top = _overlapped_kernels(ev, dev, cls)
            listed = [f"{t['name']}{' (memory-bound)' if t['memory_bound'] else ''}" for t in top]
            # cost: the copy time lost beside kernels (their duration beyond their bytes at the alone rate),
            # no more than the direction's exposed plus stalled time: a slower hidden copy costs only there
            beside = ctx["kernels"]
            lost = round(beside["duration_sum_ns"] - beside["bytes"] / ctx["alone"]["gbps"])
            stalled = int(((d.get("stalls") or {}).get("by_blocker") or {}).get(cls, {}).get("stall_ns", 0))
            reach = int(m["exposed_ns"]) + stalled
            cost = max(0, min(lost, reach))
            out.append(
                Finding(
                    "copy-contention",
                    "problem",
                    f"{ev.device_word} {dev}: "
                    f"{cls} copies beside kernels move {ctx['kernels']['gbps']:.1f} GB/s, {slow:.1f}x "
                    f"slower than alone ({ctx['alone']['gbps']:.1f} GB/s): {dur(lost)} of copy time lost, of which "
                    f"{dur(cost)} where the copies were exposed or stalled the GPU"
                    + (f"; most overlapped: {names(listed)}" if listed else ""),
                    "keep the copies away from memory-bound kernels (XLA's selective overlap for host offloading, "
                    "openxla/xla PR 46150), or run fewer async operations at once "
                    "(--xla_gpu_experimental_parallel_async_compute_limit)",
                    where={"device": dev, "direction": cls},
                    evidence={
                        "slowdown_with_kernels": slow,
                        "gbps_alone": ctx["alone"]["gbps"],
                        "gbps_beside_kernels": ctx["kernels"]["gbps"],
                        "copy_time_lost_ns": lost,
                        "exposed_plus_stalled_ns": reach,
                        "kernels": top,
                    },
                    view="streams",
                    attributed_ns=cost,
                    change=changes.contended_copies(ev, dev, cls),
                    **ev.basis_device(dev),
                )
            )
    return out
