"""Many ranks: serial, a local pool and a Dask LocalCluster agree; a corrupt rank is reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profiler.analysis.ranks import cross_rank
from profiler.conventions import rank_from_name
from profiler.parallel import map_ranks
from profiler.runs.discover import rank_inputs
from tests.helpers.cli import run_cli
from tests.helpers.training_traces import training_export


@pytest.fixture(scope="module")
def rank_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("ranks")
    for r in range(6):
        kwargs: dict = {}
        if r == 2:
            kwargs["copy_bytes"] = 1 << 20  # same copy time, a quarter of the bytes: a slow link
        if r == 4:
            kwargs.update(exposed={1: 60_000}, step_jitter=(400_000,))  # slow and exposed
        training_export(**kwargs).write(d / f"report.{r}.sqlite")
    (d / "report.6.sqlite").write_bytes(b"not a trace at all")
    return d


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("report.3.sqlite", 3),
        ("trace.rank12.sqlite", 12),
        ("rank_7-host.nsys-rep", 7),
        ("trace.sqlite", None),
        ("20261130T0101-offload-rank5-abc/trace.sqlite", 5),
    ],
)
def test_rank_from_name(name, rank):
    assert rank_from_name(Path(name)) == rank


def test_engines_agree_and_failures_are_named(rank_dir):
    paths = rank_inputs(str(rank_dir))
    assert len(paths) == 7
    serial = map_ranks(paths)
    pooled = map_ranks(paths, jobs=2)
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        dasked = map_ranks(paths, dask=cluster.scheduler_address)
    assert serial == pooled == dasked
    doc = cross_rank(serial)
    assert doc["analyzed"] == 6 and [f["rank"] for f in doc["failed"]] == [6]
    assert "report.6.sqlite" in doc["failed"][0]["error"]
    pol = doc["policies"]["offload_qkv"]
    assert pol["ranks"] == [0, 1, 2, 3, 4, 5]
    assert [s["rank"] for s in pol["stragglers"]] == [4]
    assert any("exposed copy time" in w for w in pol["stragglers"][0]["why"])
    assert [(s["rank"], s["direction"]) for s in pol["sick_links"]] == [(2, "d2h")]
    assert pol["layers"]["1"]["exposed_ns"] == {"min": 0, "median": 0, "max": 4 * 60_000}


def test_cli_ranks_text_and_json(rank_dir):
    proc = run_cli("analyze", "--ranks", "--jobs", "2", str(rank_dir))
    assert proc.returncode == 1, proc.stderr  # one rank failed, the others are reported
    assert "6 of 7 ranks analyzed" in proc.stdout and "FAILED rank 6" in proc.stdout
    assert "straggler rank 4" in proc.stdout and "slow link? rank 2 d2h" in proc.stdout
    assert "[7/7]" in proc.stderr
    doc = json.loads(run_cli("analyze", "--ranks", "--json", str(rank_dir / "report.[0-3].sqlite")).stdout)
    assert doc["analyzed"] == 4 and not doc["failed"]


def test_bad_rank_inputs(tmp_path):
    proc = run_cli("analyze", "--ranks", str(tmp_path))
    assert proc.returncode == 2 and "holds no nsys exports" in proc.stderr
    proc = run_cli("analyze", "--ranks", "--dask", "tcp://127.0.0.1:1", str(Path(__file__)))
    assert proc.returncode == 2 and "holds no nsys exports" in proc.stderr
