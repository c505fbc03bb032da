"""The replay's pure helpers, against their definitions.  Its cycle finder (``replay._on_cycle``:
the ops that keep their recorded start on a skewed trace): a node lies on a cycle when it reaches
another node that reaches it back (a strongly connected component of two nodes or more; a node's
edge to itself is not a cycle of ops); hand-worked graphs, then random ones against a transitive
closure.  ``Change.new_prev``: the op each op follows once some ops have a stream of their own,
derived by hand."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from profiler.analysis.dependencies import GpuOps
from profiler.analysis.replay import Change, _on_cycle


def _closure(graph: dict[int, list[int]]) -> set[int]:
    """The definition: reach[i][j] when j is reachable from i in one step or more (Warshall)."""
    nodes = sorted(set(graph) | {j for js in graph.values() for j in js})
    at = {v: i for i, v in enumerate(nodes)}
    reach = np.zeros((len(nodes), len(nodes)), dtype=bool)
    for v, js in graph.items():
        for j in js:
            reach[at[v], at[j]] = True
    for k in range(len(nodes)):
        reach |= reach[:, [k]] & reach[[k], :]
    return {v for v in nodes if any(reach[at[v], at[u]] and reach[at[u], at[v]] for u in nodes if u != v)}


@pytest.mark.parametrize(
    ("graph", "want"),
    [
        ({}, set()),
        ({0: [], 1: [0], 2: [0, 1]}, set()),  # no cycle
        ({0: [0]}, set()),  # an edge to itself: a component of one node
        ({0: [1], 1: [0]}, {0, 1}),
        # 0 -> 1 -> 2 -> 0 and 3 <-> 4, reached from the first cycle; 5 leads into it but is not on it
        ({0: [1], 1: [2], 2: [0, 3], 3: [4], 4: [3], 5: [0]}, {0, 1, 2, 3, 4}),
        # 1 is finished (a component alone) before 2 reaches it: 2's edge to 1 must not join it to 0 and 2
        ({0: [1, 2], 1: [], 2: [1, 0]}, {0, 2}),
        # a node that depends on one outside the graph (an input already final)
        ({0: [9], 1: [0]}, set()),
        # the cycle found from the second root, after a first root that reaches no cycle
        ({5: [6], 6: [], 7: [8], 8: [9], 9: [7]}, {7, 8, 9}),
        # a long cycle entered at its middle, with a chord: every node of it is on a cycle
        ({0: [1], 1: [2], 2: [3], 3: [4], 4: [0, 2]}, {0, 1, 2, 3, 4}),
        # two cycles joined both ways through one node: one component
        ({0: [1], 1: [0, 2], 2: [3], 3: [1]}, {0, 1, 2, 3}),
    ],
)
def test_on_cycle_hand_worked(graph, want):
    assert _closure(graph) == want  # the definition agrees with the hand answer
    assert _on_cycle(graph) == want


def test_on_cycle_against_the_closure():
    rng = np.random.default_rng(11)
    for _ in range(300):
        n = int(rng.integers(1, 12))
        p = rng.uniform(0.05, 0.4)
        graph = {v: [int(j) for j in np.flatnonzero(rng.random(n) < p)] for v in rng.permutation(n).tolist()}
        assert _on_cycle(graph) == _closure(graph), graph


def _ops_on_two_streams() -> GpuOps:
    """Seven ops in stream order: stream A rows 0-3, stream B rows 4-6 (``prev`` from ``skey``)."""
    n = 7
    z = np.zeros(n, dtype=np.int64)
    skey = np.array([0, 0, 0, 0, 1, 1, 1])
    streams = pl.DataFrame({"skey": [0, 1], "pid": [1, 1], "device": [0, 0], "stream": [7, 8]})
    start = np.arange(n, dtype=np.int64) * 100
    return GpuOps(z, z, skey + 7, start, start + 50, np.arange(n), z, z, z, skey, streams)


@pytest.mark.parametrize(
    ("own", "want"),
    [
        # nothing moved: the recorded op before each op
        ([], [-1, 0, 1, 2, -1, 4, 5]),
        # row 1 moved: it still follows row 0 (whose output it copies); row 2 now follows row 0
        ([1], [-1, 0, 0, 2, -1, 4, 5]),
        # the stream's first op moved: row 1 has no op before it any more
        ([0], [-1, -1, 1, 2, -1, 4, 5]),
        # rows 1 and 2 moved: row 3 follows row 0; each moved row follows its recorded op
        ([1, 2], [-1, 0, 1, 0, -1, 4, 5]),
        # B's first two moved: row 6 has no staying op before it on B (A's row 3 is not on its stream)
        ([4, 5], [-1, 0, 1, 2, -1, 4, -1]),
        # A's last and B's first moved: B's row 5 has no staying op before it, row 6 follows row 5
        ([3, 4], [-1, 0, 1, 2, -1, -1, 5]),
    ],
)
def test_new_prev_of_ops_moved_to_a_stream_of_their_own(own, want):
    ops = _ops_on_two_streams()
    assert ops.prev.tolist() == [-1, 0, 1, 2, -1, 4, 5]
    got = Change("own stream", own_stream=np.array(own, dtype=np.int64)).new_prev(ops)
    assert got.tolist() == want
