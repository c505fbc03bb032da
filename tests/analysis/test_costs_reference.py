"""The vectorized stalls, contexts and what-if against a plain second implementation
(``tests/reference_costs.py``), on random exports and on the real traces of ../shared.

Random exports mix processes, devices, streams, reused event ids, waits with
and without records, ops without runtime rows, invalid ops and clock skew.
"""

from __future__ import annotations

import itertools
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiler.analysis.dependencies import D2H, H2D, dependencies
from profiler.analysis.hostsync import host_syncs
from profiler.analysis.replay import replay
from profiler.analysis.whatif import trace_whatif
from profiler.runs.result import analyze
from profiler.trace import open_trace
from tests.helpers import reference_costs as ref
from tests.helpers.random_costs import FACTORS, MIB, action, build_random


def _zero_stalls() -> dict:
    from profiler.analysis.stalls import empty_stalls

    return empty_stalls()


def per_op_stalls(path: Path) -> dict[tuple[int, int], tuple[int, int | None]]:
    """(pid, corr) -> (stall, blocker's corr) from the vectorized code."""
    deps = dependencies(open_trace(path))
    from profiler.analysis.stalls import op_stalls

    s = op_stalls(deps, deps.ops.start, deps.ops.end)
    ops = deps.ops
    return {
        (int(ops.pid[i]), int(ops.corr[i])): (
            int(s.stall[i]),
            int(ops.corr[s.blocker[i]]) if s.blocker[i] >= 0 else None,
        )
        for i in range(len(ops))
    }


def ref_per_op_stalls(model: ref.Model) -> dict[tuple[int, int], tuple[int, int | None]]:
    out = {}
    for o, (value, b) in zip(model.ops, ref.stalls(model), strict=True):
        out[(o.pid, o.corr)] = (value, model.ops[b].corr if b is not None else None)
    return out


def check_stalls(path: Path) -> None:
    model = ref.load(path)
    doc = analyze(open_trace(path))
    expected = ref.device_stalls(model, ref.stalls(model))
    got = {int(d): v["stalls"] for d, v in doc["devices"].items()}
    zero = ref.device_stalls(ref.Model([], {}), [])  # a device with only invalid ops has no entry there
    assert got == {d: expected.get(d, zero.get(d)) or _zero_stalls() for d in got}
    # a blocker is only named where an op waits; compare stalls, and blockers where there is a stall
    mine, theirs = per_op_stalls(path), ref_per_op_stalls(model)
    assert {k: v[0] for k, v in mine.items()} == {k: v[0] for k, v in theirs.items()}
    assert {k: v[1] for k, v in mine.items() if v[0] > 0} == {k: v[1] for k, v in theirs.items() if v[0] > 0}


def check_contexts(path: Path) -> None:
    model = ref.load(path)
    doc = analyze(open_trace(path))
    expected = ref.contexts(model)
    for dev, d in doc["devices"].items():
        for cls in ("h2d", "d2h", "offload"):
            got = {
                name: {k: v[k] for k in ("count", "bytes", "duration_sum_ns")}
                for name, v in d["copies"][cls]["contexts"].items()
                if v["count"]
            }
            assert got == expected.get(int(dev), {}).get(cls, {}), (dev, cls)


def replayed(path: Path, factor: float, host: bool = False) -> dict[tuple[int, int], tuple[int, int]]:
    trace = open_trace(path)
    deps = dependencies(trace)
    rp = replay(deps, factor, host_syncs(trace, deps) if host else None)
    ops = deps.ops
    return {(int(ops.pid[i]), int(ops.corr[i])): (int(rp.start[i]), int(rp.end[i])) for i in range(len(ops))}


def check_replay(path: Path) -> None:
    model = ref.load(path)
    for factor in FACTORS:
        for host in (False, True):
            s, e = ref.replay(model, factor, host)
            expected = {(o.pid, o.corr): (s[i], e[i]) for i, o in enumerate(model.ops)}
            assert replayed(path, factor, host) == expected, (factor, host)


def check_properties(path: Path) -> None:
    """Identity at F = 1, never later when F shrinks, F = 0 the bound."""
    trace = open_trace(path)
    deps = dependencies(trace)
    ops = deps.ops
    host = host_syncs(trace, deps)
    for h in (None, host):
        one = replay(deps, 1.0, h)
        assert np.array_equal(one.start, ops.start) and np.array_equal(one.end, ops.end)
        ends = [replay(deps, f, h).end for f in (2.0, 1.0, 0.75, 0.5, 0.1, 0.0)]
        for hi, lo in itertools.pairwise(ends):
            assert (lo <= hi).all()
    copy = (ops.kind == H2D) | (ops.kind == D2H)
    zero = replay(deps, 0.0)
    assert (zero.end[copy] == zero.start[copy]).all()
    spans = [trace_whatif(trace, f)["devices"] for f in (1.0, 0.5, 0.0)]
    for dev, d in spans[0].items():
        assert d["span_ns"] == d["measured_span_ns"]
        assert spans[2][dev]["span_ns"] <= spans[1][dev]["span_ns"] <= d["span_ns"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(action, min_size=1, max_size=40))
def test_random_exports_match_the_reference(tmp_path_factory, actions):
    path = build_random(actions, tmp_path_factory.mktemp("rand") / "r.sqlite")
    check_stalls(path)
    check_contexts(path)
    check_replay(path)
    check_properties(path)


def _real(shared: Path, with_waits: bool) -> list[Path]:
    out = []
    for p in sorted(shared.glob("*.sqlite")):
        con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        con.close()
        if not with_waits or "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION" in tables:
            out.append(p)
    return out


@pytest.mark.shared
def test_real_traces_stalls_match_the_reference(shared_traces):
    paths = _real(shared_traces, with_waits=True)
    assert any(p.name.startswith("alpa__jax_profile_mem") for p in paths)
    for path in paths:
        check_stalls(path)


@pytest.mark.shared
def test_real_traces_contexts_match_the_reference(shared_traces):
    for path in _real(shared_traces, with_waits=False):
        model = ref.load(path)
        eligible = sum(o.kind in ("h2d", "d2h") and o.nbytes >= MIB for o in model.ops)
        if eligible * len(model.ops) <= 2_000_000:  # the reference is quadratic
            check_contexts(path)


@pytest.mark.shared
def test_real_traces_whatif_properties(shared_traces):
    for path in _real(shared_traces, with_waits=False):
        check_properties(path)


@pytest.mark.shared
def test_real_jax_trace_replay_matches_the_reference(shared_traces):
    check_replay(shared_traces / "alpa__jax_profile_mem.sqlite")


@pytest.mark.shared
def test_real_jax_trace_with_skew_and_waits_across_devices(shared_traces, tmp_path):
    """The JAX trace with some GPU times skewed before their launches and a wait moved to
    another device: the properties still hold and both implementations agree."""
    path = tmp_path / "skewed.sqlite"
    shutil.copy(shared_traces / "alpa__jax_profile_mem.sqlite", path)
    con = sqlite3.connect(path)
    with con:
        con.execute(
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start - 40000000, end = end - 40000000 WHERE rowid % 3 = 0"
        )
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET deviceId = 1 WHERE rowid % 2 = 0")
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION SET deviceId = 1 WHERE rowid % 4 = 0")
    con.close()
    check_properties(path)
    check_replay(path)
    check_stalls(path)
