"""What the findings read of each layer, measured alone (``overlap.exposure_metrics``), equals the
full copy-class numbers; the step documents handed out are copies of their own (``tree_copy``).

On a small export shaped like a real offloaded training step (``benchmarks/make_shaped.py``: two
GPUs, copies stalled through CUDA events, exposed copies, layer ranges)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from benchmarks.make_shaped import make
from profiler.analysis.breakdown import Breakdown, tree_copy
from profiler.analysis.overlap import CopySet, class_metrics, exposure_metrics
from profiler.trace import load_trace

NARROW = ("count", "bytes", "busy_ns", "exposed_ns", "stall_ns")


@pytest.fixture(scope="module")
def breakdown(tmp_path_factory: pytest.TempPathFactory) -> Breakdown:
    path = make(Path(tmp_path_factory.mktemp("shaped")) / "s.sqlite", steps=3, layers=4)
    return Breakdown(load_trace(path))


def test_narrow_layers_are_the_full_numbers(breakdown):
    full = breakdown.by_layer(top_kernels=False)
    narrow = breakdown.by_layer(top_kernels=False, narrow=True)
    assert [(r["name"], r["device"]) for r in narrow] == [(r["name"], r["device"]) for r in full]
    assert len({r["device"] for r in full}) == 2
    for f, n in zip(full, narrow, strict=True):
        assert n["copies"] == {"offload": {k: f["copies"]["offload"][k] for k in NARROW}}
    # numbers that can differ: copies exposed and ops stalled, on layers of both GPUs
    assert sum(r["copies"]["offload"]["exposed_ns"] for r in narrow) > 0
    assert sum(r["copies"]["offload"]["stall_ns"] > 0 for r in narrow) >= 2


def test_exposure_without_stalls_and_with_large_keys(breakdown):
    """Keys far apart (ranked, not indexed) and copies that carry no stall: the same numbers, no
    ``stall_ns``."""
    ops = breakdown.ops.filter(breakdown.ops["cls"].is_in(["h2d", "d2h"]))
    cs = CopySet.of(ops.with_columns((ops["device"] * (1 << 30) + ops["stream"]).alias("key")), "key")
    cs = dataclasses.replace(cs, caused=None)
    keys = [*np.unique(cs.key).tolist(), 12345]  # one key without copies: zeros
    full = class_metrics(cs, breakdown.kernel_sets, keys, None)
    narrow = exposure_metrics(cs, breakdown.kernel_sets, keys)
    assert narrow == {k: {x: full[k][x] for x in NARROW if x != "stall_ns"} for k in keys}
    assert narrow[12345] == {"count": 0, "bytes": 0, "busy_ns": 0, "exposed_ns": 0}
    assert len(keys) > 3 and any(m["exposed_ns"] for m in narrow.values())


def test_step_documents_are_copies_of_their_own(breakdown):
    first = breakdown.by_step()
    assert first == copy.deepcopy(breakdown._step_docs[True])
    first["steps"][0]["devices"].clear()
    first["steps"].pop()
    again = breakdown.by_step()
    assert again == breakdown._step_docs[True] and len(again["steps"]) == 3
    assert again["steps"][0]["devices"]


def test_tree_copy_copies_every_container():
    shared = {"a": [1, 2.5, "x", None, True]}
    doc = {"one": shared, "two": shared, "t": (shared, 3), "arr": np.arange(3)}
    out = tree_copy(doc)
    assert out["one"] == shared and out["t"][0] == shared and out["t"][1] == 3
    assert out["one"] is not shared and out["one"]["a"] is not shared["a"] and out["t"][0] is not shared
    assert out["arr"] is not doc["arr"] and np.array_equal(out["arr"], doc["arr"])
