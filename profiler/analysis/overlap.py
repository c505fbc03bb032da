"""The numbers of ``../shared/METRICS.md``: copy occupancy, overlap and exposure.

Pure functions over the loader's frames.  ``device_metrics`` gives the
``devices`` object of ``profile-step analyze --json``; ``class_metrics`` is
the one definition of the copy-class numbers, reused for NVTX ranges, steps
and layers (with ``spans=None``: no occupancy there).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import polars as pl

from profiler.analysis.contexts import CONTEXTS, context_metrics, copy_contexts
from profiler.analysis.intervals import Intervals, length_by_group, measure_within_each, sum_by_group, union

OFFLOAD_CLASSES = ("h2d", "d2h", "offload")
OTHER_CLASSES = ("d2d", "p2p", "other")
CLASS_ORDER = ("h2d", "d2h", "d2d", "p2p", "other")
DEVICE_MEM_KINDS = (2, 5)  # ENUM_CUDA_MEM_KIND: device, device static (not pinned, managed or pageable)


MEASURABLE = pl.col("end") >= pl.col("start")


def valid(ops: pl.DataFrame) -> pl.DataFrame:
    """Ops that can be measured: ``end >= start`` (zero-length ones included)."""
    return ops.filter(MEASURABLE)


def windows_and_invalid(*frames: pl.DataFrame) -> tuple[dict[int, tuple[int, int]], dict[int, int]]:
    """Per device, ``(w0, w1)``: first start and last end over valid ops; and the number of
    ops with ``end < start`` or a missing time.  One pass over all frames."""
    ok = MEASURABLE.fill_null(False)
    agg = (
        pl.concat([f.lazy().select("device", "start", "end", ok.alias("ok")) for f in frames])
        .group_by("device")
        .agg(
            pl.col("start").filter("ok").min().alias("w0"),
            pl.col("end").filter("ok").max().alias("w1"),
            (~pl.col("ok")).sum().alias("bad"),
        )
        .collect()
    )
    win = {int(d): (int(w0), int(w1)) for d, w0, w1, _ in agg.iter_rows() if w0 is not None}
    invalid = {int(d): int(n) for d, _, _, n in agg.iter_rows() if n}
    return win, invalid


@dataclass(frozen=True)
class KernelSets:
    """Unions of a device's kernels: compute, NCCL, and all kernels."""

    compute: Intervals
    nccl: Intervals
    any: Intervals

    @staticmethod
    def of(kernels: pl.DataFrame) -> KernelSets:
        """From valid kernels with an ``is_nccl`` column."""
        nccl = kernels["is_nccl"].fill_null(False).to_numpy()
        g, s, e = (kernels[c].to_numpy() for c in ("device", "start", "end"))
        # integer positions: taking them is several times faster than boolean indexing
        rest, coll = np.flatnonzero(~nccl), np.flatnonzero(nccl)
        compute, nccl_set = union(g[rest], s[rest], e[rest]), union(g[coll], s[coll], e[coll])
        # the union of all kernels is the union of the two (far shorter) unions
        both = [np.concatenate([getattr(compute, f), getattr(nccl_set, f)]) for f in ("group", "start", "end")]
        return KernelSets(compute=compute, nccl=nccl_set, any=union(*both))


@dataclass(frozen=True)
class CopySet:
    """Valid copies as NumPy columns: all that the copy-class numbers read.

    ``key`` is the grouping value (the device, or an integer group id whose
    copies all lie on one device); ``cls`` indexes ``CLASS_ORDER``.
    """

    key: np.ndarray
    device: np.ndarray
    start: np.ndarray
    end: np.ndarray
    nbytes: np.ndarray
    pageable: np.ndarray
    cls: np.ndarray
    context: np.ndarray | None = None  # contexts.copy_contexts per copy (device view)
    caused: np.ndarray | None = None  # stall time each copy caused (per-group views)

    @staticmethod
    def of(copies: pl.DataFrame, key: str = "device", context: np.ndarray | None = None) -> CopySet:
        caused = copies["stall_caused_ns"].fill_null(0).to_numpy() if "stall_caused_ns" in copies.columns else None
        cols = copies.select(
            pl.col(key).cast(pl.Int64).alias("_key"),
            "device",
            "start",
            "end",
            pl.col("bytes").fill_null(0),
            (pl.col("host_kind") == "pageable").fill_null(False).cast(pl.Int64),
            pl.col("cls").replace_strict(
                {c: i for i, c in enumerate(CLASS_ORDER)}, default=len(CLASS_ORDER), return_dtype=pl.Int8
            ),
        )
        return CopySet(*(cols.to_series(i).to_numpy() for i in range(cols.width)), context=context, caused=caused)

    def of_class(self, name: str) -> CopySet:
        """The copies of one METRICS.md class; ``offload`` is h2d and d2h together."""
        h2d, d2h = CLASS_ORDER.index("h2d"), CLASS_ORDER.index("d2h")
        mask = (self.cls == h2d) | (self.cls == d2h) if name == "offload" else self.cls == CLASS_ORDER.index(name)
        rows = np.flatnonzero(mask)
        return CopySet(*(None if (v := getattr(self, f.name)) is None else v[rows] for f in fields(self)))


def class_metrics(
    copies: CopySet,
    kernels: KernelSets,
    keys: list[int],
    spans: dict[int, int] | None,
    full: bool = True,
) -> dict[int, dict[str, Any]]:
    """METRICS.md copy-class numbers of the valid *copies* given, per key.

    Keys are devices for the device view, or integer group ids (a range name
    on a device, a step, a layer) whose copies all lie on one device; overlap
    is always measured against all kernels of that device.  ``full=False``
    gives only count, bytes and busy_ns (d2d, p2p, other); ``spans=None``
    leaves out occupancy (groups other than devices have no window).
    """
    uniq, idx = _key_index(copies.key)
    count_of = np.bincount(idx, minlength=uniq.size)
    present = np.flatnonzero(count_of)

    def per_key(values: np.ndarray) -> dict[int, int]:
        return _sums_per_key(values, uniq, idx, present)

    count = {int(uniq[i]): int(count_of[i]) for i in present}
    contexts = None
    if full and copies.context is not None:
        contexts = _contexts_per_key(copies.context, copies.nbytes, copies.end - copies.start, idx, uniq.size)
    stalls = per_key(copies.caused) if full and copies.caused is not None else None
    nbytes = per_key(copies.nbytes)
    c = union(copies.key, copies.start, copies.end)
    busy = length_by_group(c)
    overlap: dict[str, dict[int, int]] = {}
    if full:
        duration = per_key(copies.end - copies.start)
        pageable = per_key(copies.pageable)
        dev_of = _union_devices(copies, uniq, idx, c)
        sets = (kernels.compute, kernels.nccl, kernels.any)
        for name, ov in zip(("compute", "nccl", "any"), measure_within_each(sets, dev_of, c.start, c.end), strict=True):
            overlap[name] = sum_by_group(c, ov)
    out: dict[int, dict[str, Any]] = {}
    for g in keys:
        b = busy.get(g, 0)
        m: dict[str, Any] = {"count": count.get(g, 0), "bytes": nbytes.get(g, 0)}
        if not full:
            m["busy_ns"] = b
            out[g] = m
            continue
        dur = duration.get(g, 0)
        ov_any = overlap["any"].get(g, 0)
        m["duration_sum_ns"] = dur
        m["busy_ns"] = b
        if spans is not None:
            span = spans.get(g, 0)
            m["occupancy"] = b / span if span else 0
        m["overlap_compute_ns"] = overlap["compute"].get(g, 0)
        m["overlap_nccl_ns"] = overlap["nccl"].get(g, 0)
        m["overlap_any_ns"] = ov_any
        m["exposed_ns"] = b - ov_any
        m["hidden_fraction"] = ov_any / b if b else None
        m["gbps"] = m["bytes"] / dur if dur else None
        m["pageable_count"] = pageable.get(g, 0)
        if stalls is not None:
            m["stall_ns"] = stalls.get(g, 0)
        if contexts is not None:
            pos = int(np.searchsorted(uniq, g))
            row = pos if pos < uniq.size and uniq[pos] == g else None
            m.update(context_metrics(*(a[row] if row is not None else np.zeros(len(CONTEXTS)) for a in contexts)))
        out[g] = m
    return out


def _key_index(k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(keys, index of each copy's key among them): the keys themselves when they are small
    (device ids, group ids), else ranks."""
    if k.size and (k.min() < 0 or k.max() >= 1 << 20):
        uniq, idx = np.unique(k, return_inverse=True)
        return uniq, idx
    return np.arange(int(k.max()) + 1 if k.size else 0), k


def _sums_per_key(values: np.ndarray, uniq: np.ndarray, idx: np.ndarray, present: np.ndarray) -> dict[int, int]:
    """*values* summed per key (``_key_index``'s keys and index), for the keys *present*."""
    sums = np.zeros(uniq.size, dtype=np.int64)
    np.add.at(sums, idx, values)
    return {int(uniq[i]): int(sums[i]) for i in present}


def _union_devices(copies: CopySet, uniq: np.ndarray, idx: np.ndarray, c: Intervals) -> np.ndarray:
    """The device of each interval of the copies' union *c* (each key's copies lie on one device):
    each is measured against that device's kernels."""
    device_of = np.zeros(uniq.size, dtype=np.int64)
    device_of[idx] = copies.device  # one device per key
    return device_of[np.searchsorted(uniq, c.group)] if len(c) else c.group


def exposure_metrics(copies: CopySet, kernels: KernelSets, keys: list[int]) -> dict[int, dict[str, int]]:
    """``class_metrics``' count, bytes, busy_ns, exposed_ns and (where the copies carry it) stall_ns
    per key, alone: the same numbers, without the overlaps by kernel kind, durations and contexts."""
    uniq, idx = _key_index(copies.key)
    present = np.flatnonzero(np.bincount(idx, minlength=uniq.size))

    def per_key(values: np.ndarray) -> dict[int, int]:
        return _sums_per_key(values, uniq, idx, present)

    count, nbytes = per_key(np.ones(idx.size, dtype=np.int64)), per_key(copies.nbytes)
    stalls = per_key(copies.caused) if copies.caused is not None else None
    c = union(copies.key, copies.start, copies.end)
    busy = length_by_group(c)
    (ov_any,) = measure_within_each([kernels.any], _union_devices(copies, uniq, idx, c), c.start, c.end)
    overlap = sum_by_group(c, ov_any)
    out: dict[int, dict[str, int]] = {}
    for g in keys:
        b = busy.get(g, 0)
        m = {"count": count.get(g, 0), "bytes": nbytes.get(g, 0), "busy_ns": b, "exposed_ns": b - overlap.get(g, 0)}
        if stalls is not None:
            m["stall_ns"] = stalls.get(g, 0)
        out[g] = m
    return out


def offload_exposure(copies: pl.DataFrame, kernels: KernelSets, keys: list[int], key: str) -> dict[int, dict[str, Any]]:
    """Per value of column *key*: ``{"offload": exposure_metrics}`` of its h2d and d2h copies."""
    cs = CopySet.of(copies, key).of_class("offload")
    exposure = exposure_metrics(cs, kernels, keys)
    return {k: {"offload": exposure[k]} for k in keys}


def _contexts_per_key(
    context: np.ndarray, nbytes: np.ndarray, duration: np.ndarray, idx: np.ndarray, n_keys: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Count, bytes and duration sums per (key index, context): three arrays of shape (keys, contexts)."""
    shape = (n_keys, len(CONTEXTS))
    sums = [np.zeros(shape, dtype=np.int64) for _ in range(3)]
    rows = np.flatnonzero(context >= 0)
    at = (idx[rows], context[rows])
    for out, values in zip(sums, (1, nbytes[rows], duration[rows]), strict=True):
        np.add.at(out, at, values)
    return sums[0], sums[1], sums[2]


def offload_metrics(
    copies: pl.DataFrame, kernels: KernelSets, keys: list[int], key: str, spans: dict[int, int] | None = None
) -> dict[int, dict[str, dict[str, Any]]]:
    """Per value of column *key*: the h2d, d2h and offload copy-class metrics."""
    cs = CopySet.of(copies, key)
    per_class = {c: class_metrics(cs.of_class(c), kernels, keys, spans) for c in OFFLOAD_CLASSES}
    return {k: {c: per_class[c][k] for c in OFFLOAD_CLASSES} for k in keys}


def stream_metrics(
    copies: pl.DataFrame, spans: dict[int, int], context: np.ndarray | None = None
) -> dict[int, list[dict[str, Any]]]:
    """Per device, one entry per copy-carrying stream: classes, busy_ns, occupancy (METRICS.md),
    and count, bytes, duration_sum_ns, gbps (achieved copy bandwidth on the stream); with *context*
    (``copy_contexts`` of these copies), the stream's h2d/d2h copies of 1 MiB or more by context."""
    if copies.height == 0:
        return {}
    keyed = copies.with_columns(pl.struct("device", "stream").rank("dense").cast(pl.Int64).alias("key"))
    sums = None
    if context is not None:
        key = keyed["key"].to_numpy()
        nbytes = keyed["bytes"].fill_null(0).to_numpy()
        sums = _contexts_per_key(context, nbytes, (keyed["end"] - keyed["start"]).to_numpy(), key, int(key.max()) + 1)
    iv = union(keyed["key"].to_numpy(), keyed["start"].to_numpy(), keyed["end"].to_numpy())
    busy = length_by_group(iv)
    order = {c: i for i, c in enumerate(CLASS_ORDER)}
    per_stream = (
        keyed.group_by("key", "device", "stream")
        .agg(
            pl.col("cls").unique(),
            pl.len().alias("count"),
            pl.col("bytes").sum(),
            (pl.col("end") - pl.col("start")).sum().alias("dur"),
        )
        .sort("device", "stream")
    )
    out: dict[int, list[dict[str, Any]]] = {}
    for key, dev, stream, classes, count, nbytes, dur in per_stream.iter_rows():
        b = busy.get(int(key), 0)
        span = spans.get(dev, 0)
        out.setdefault(int(dev), []).append(
            {
                "stream": int(stream),
                "classes": sorted(classes, key=order.__getitem__),
                "busy_ns": b,
                "occupancy": b / span if span else 0,
                "count": int(count),
                "bytes": int(nbytes or 0),
                "duration_sum_ns": int(dur or 0),
                "gbps": nbytes / dur if dur else None,
                **({} if sums is None else {"contexts": context_metrics(*(a[key] for a in sums))["contexts"]}),
            }
        )
    return out


def peak_memory(events: pl.DataFrame) -> dict[int, dict[str, int]]:
    """Per device, the most bytes of device memory held at once by the allocations seen in the capture.

    A running sum of allocations (+) and frees (-) in time order; memory
    allocated before the capture started is not seen (JAX's allocator, which
    reserves most of the GPU up front, shows only what it asks for later).
    """
    events = events.filter(pl.col("mem_kind").is_in(DEVICE_MEM_KINDS))
    if events.height == 0:
        return {}
    signed = events.sort("device", "start").with_columns(
        pl.when(pl.col("op") == 1).then(-pl.col("bytes")).otherwise(pl.col("bytes")).alias("delta")
    )
    agg = (
        signed.with_columns(pl.col("delta").cum_sum().over("device").alias("held"))
        .group_by("device")
        .agg(pl.col("held").max().alias("peak"), pl.len().alias("events"))
    )
    return {int(d): {"peak_allocated_bytes": max(int(p), 0), "events": int(n)} for d, p, n in agg.iter_rows()}


def device_metrics(
    kernels: pl.DataFrame,
    copies: pl.DataFrame,
    memsets: pl.DataFrame,
    only_device: int | None = None,
    memory: pl.DataFrame | None = None,
    kernel_sets: KernelSets | None = None,
    streams: bool = True,
    contexts: np.ndarray | None = None,
) -> dict[str, dict[str, Any]]:
    """The ``devices`` object of METRICS.md, keyed by decimal deviceId (``streams=False``:
    without the per-stream list; *contexts*: ``copy_contexts`` of the valid copies against
    *kernel_sets*, when already computed, as ``Breakdown.copy_contexts``)."""
    if only_device is not None:
        kernels, copies, memsets = (f.filter(pl.col("device") == only_device) for f in (kernels, copies, memsets))
    win, invalid = windows_and_invalid(kernels, copies, memsets)
    # only the kernel columns read here: the filter copies what it keeps (names and shapes: not needed)
    kernels, copies = valid(kernels.select("device", "start", "end", "is_nccl")), valid(copies)
    devices = sorted(set(win) | set(invalid))
    spans = {d: w1 - w0 for d, (w0, w1) in win.items()}
    # the caller may pass the unions of these same (unfiltered) kernels, computed once elsewhere
    shared = kernel_sets is not None and only_device is None
    ks = kernel_sets if shared else KernelSets.of(kernels)
    if contexts is None or not shared or contexts.size != copies.height:
        contexts = copy_contexts(copies, ks.any)
    cs = CopySet.of(copies, context=contexts)
    per_class = {
        c: class_metrics(cs.of_class(c), ks, devices, spans, full=c in OFFLOAD_CLASSES)
        for c in (*OFFLOAD_CLASSES, *OTHER_CLASSES)
    }
    kernel_counts = kernels.group_by("device", "is_nccl").len()
    counts = {(d, n): c for d, n, c in kernel_counts.iter_rows()}
    compute_busy, nccl_busy = length_by_group(ks.compute), length_by_group(ks.nccl)
    per_stream = stream_metrics(copies, spans, cs.context) if streams else {}
    mem = peak_memory(memory) if memory is not None else {}
    out: dict[str, dict[str, Any]] = {}
    for d in devices:
        w = win.get(d)
        out[str(d)] = {
            "window_ns": list(w) if w else None,
            "span_ns": spans.get(d, 0),
            "invalid_ops": invalid.get(d, 0),
            "compute": {"count": counts.get((d, False), 0), "busy_ns": compute_busy.get(d, 0)},
            "nccl": {"count": counts.get((d, True), 0), "busy_ns": nccl_busy.get(d, 0)},
            "copies": {c: per_class[c][d] for c in per_class},
            "streams": per_stream.get(d, []),
        }
        if d in mem:
            out[str(d)]["memory"] = mem[d]
    return out
