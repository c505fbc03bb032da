"""sample_traces: the example's real H200 runs, shown first where no GPU ran here; public/: real GPU
traces copied with their licences and provenance, shown first where no measured policy run has copies
(before the SYNTHETIC demonstration runs)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from dashboards import rows
from profiler.runs.catalog import read_catalog
from profiler.runs.discover import discover
from profiler.runs.result import collect
from profiler.trace import load_trace
from tests.helpers.paths import ROOT
from tests.helpers.policy_noise import run

PUBLIC = ROOT / "sample_traces" / "public"
COPYABLE = ("flexgen__", "nsysai__")  # the only shared sources whose licences allow a copy


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_every_public_trace_is_catalogued_with_its_licence_and_provenance():
    cat = read_catalog(PUBLIC)
    files = sorted(p.name for p in PUBLIC.glob("*.sqlite"))
    assert sorted(cat) == files and len(files) == 6
    readme = (PUBLIC / "README.md").read_text()
    for name, prov in cat.items():
        assert name.startswith(COPYABLE), name
        licence_file = prov.licence.split("(", 1)[1].rstrip(")")  # "Apache-2.0 (licenses/FlexGen-LICENSE)"
        assert (PUBLIC / licence_file).is_file(), licence_file
        assert len(prov.commit) == 40 and prov.repo and prov.path
        assert f"`{name}`" in readme and prov.commit[:7] in readme and prov.path in readme
    assert "Apache License" in (PUBLIC / "licenses" / "FlexGen-LICENSE").read_text()
    assert "MIT License" in (PUBLIC / "licenses" / "nsys-ai-LICENSE").read_text()


def test_the_copies_are_the_shared_files_unchanged(shared_traces):
    shared = read_catalog(shared_traces)
    for name, prov in read_catalog(PUBLIC).items():
        assert _sha(PUBLIC / name) == _sha(shared_traces / name), name
        same = ("file", "repo", "commit", "path", "licence", "gpus")
        assert [getattr(prov, k) for k in same] == [getattr(shared[name], k) for k in same]
        licence = prov.licence.split("(", 1)[1].rstrip(")")
        assert (PUBLIC / licence).read_bytes() == (shared_traces / licence).read_bytes()


def test_sample_traces_readme_says_what_is_real_and_what_is_synthetic():
    text = (ROOT / "sample_traces" / "README.md").read_text()
    assert "public/README.md" in text and "public/licenses/" in text and "flexgen__nsight_report7" in text
    assert "SYNTHETIC" in text and "**no: a model**" in text


def test_a_trace_in_two_catalogues_is_shown_once_from_the_first(shared_traces):
    refs = discover([ROOT / "sample_traces", shared_traces], licences=("Apache-2.0", "MIT"))
    public = [r for r in refs if r.source == "external"]
    names = [Path(r.name).name for r in public]
    assert len(names) == len(set(names))
    for r in public:
        if r.trace.name.startswith(COPYABLE):
            assert r.trace.parent == PUBLIC, r.trace
    assert {"gpubootcamp__report4.sqlite", "nsysai__h100_2gpu_1s.sqlite"} <= set(names)


def _rows(*traces: Path) -> list[dict]:
    refs = {r.trace.resolve(): r for r in discover([ROOT / "sample_traces"])}
    out = []
    for path in traces:
        ref = refs[path.resolve()]
        summary = collect(load_trace(path), ref.manifest)
        out += [rows.raw_row(ref, summary, v.device) for v in rows.views(ref, summary)]
    return out


def test_the_first_view_is_a_real_trace_with_hidden_copies_before_the_synthetic_demo():
    demo = ROOT / "sample_traces/demo-synthetic/synthetic-4-offload_all/synthetic-trace.sqlite"
    cpu = next((ROOT / "sample_traces/cpu-example").glob("*-offload_qkv-*/trace.sqlite"))
    raw = _rows(cpu, demo, PUBLIC / "flexgen__profile_name.sqlite", PUBLIC / "flexgen__nsight_report7.sqlite")
    chosen = [raw[i] for i in rows.default_selection(raw)]
    # both GPUs of FlexGen's pipeline test: GPU 0's copies hidden behind its kernels, GPU 1 only copies
    assert [r["run"] for r in chosen] == ["nsight_report7", "nsight_report7"]
    assert [r["source"] for r in chosen] == ["public trace"] * 2 and chosen[0]["hidden"] > 90
    # without a public trace the SYNTHETIC policy runs come next, as before
    rest = [r for r in raw if r["_source"] != "external"]
    assert {rest[i]["source"] for i in rows.default_selection(rest)} == {"SYNTHETIC demo"}
    # a measured policy run with copies comes before both
    measured = [{**r, "_source": "run", "_group": "runs"} for r in rest if r["source"] == "SYNTHETIC demo"]
    assert rows.default_selection(raw + measured) == list(range(len(raw), len(raw) + len(measured)))


def test_the_first_view_is_the_h200_runs_before_the_public_trace():
    """sample_traces as it is: the example's eight runs on a real H200 (measured policy runs with copies)
    are the first view, every one of them, ahead of the public trace listed before them."""
    h200 = sorted((ROOT / "sample_traces/h200-example").glob("*/trace.json.gz"))
    raw = _rows(PUBLIC / "flexgen__nsight_report7.sqlite", *h200)
    chosen = [raw[i] for i in rows.default_selection(raw)]
    assert len(h200) == 8 and [r["id"] for r in chosen] == [r["id"] for r in raw[2:]]  # FlexGen's two GPUs first
    policies = {json.loads((t.parent / "manifest.json").read_text())["policy"] for t in h200}
    assert {r["policy"] for r in chosen} == policies and len(policies) == 8
    # labelled for what they are: measured on the H200 by jax.profiler, not by nsys
    assert {(r["source"], r["device"]) for r in chosen} == {("jax.profiler run", "GPU 0 · NVIDIA H200")}
    assert all("recorded by jax.profiler, not nsys" in r["_full"] for r in chosen)


def test_a_policy_that_offloads_nothing_shows_no_offload_not_zero_hidden():
    """The H200 example's none and remat runs moved only the host's own copies (a 4-byte loss, under
    1 MiB per step): their row's hidden share is 'no offload', not 0.0%; offload_mlp's is a share."""
    h200 = ROOT / "sample_traces" / "h200-example"
    none, remat, mlp = (next(h200.glob(f"*-{p}-??????")) / "trace.json.gz" for p in ("none", "remat", "offload_mlp"))
    got = {r["policy"]: r for r in _rows(none, remat, mlp)}
    assert got["none"]["copies"] > 0 and got["none"]["hidden"] is None and got["remat"]["hidden"] is None
    assert 0 < got["offload_mlp"]["hidden"] <= 100
    (col,) = [c for c in rows.table(list(got.values()))[0] if c["id"] == "hidden"]
    assert col["format"]["nully"] == "no offload"
    # a small offload inside the steps (the quickstart's default size on a GPU: 384 KiB a step) is one
    from profiler.stored.summary import RunSummary

    small = RunSummary.of({**run("offload_qkv", [1, 1, 1]), "policy": "offload_qkv"})
    off = {"hidden_fraction": 0.5, "bytes": 384 << 10}
    assert not rows.offloads(small, off)  # its steps hold no copy: the bytes lie between them
    inside = RunSummary.of(
        {
            **run("offload_qkv", [1, 1, 1]),
            "steps": [
                {
                    "name": f"step={i}",
                    "duration_ns": 10**6,
                    "busy_ns": 5_000,
                    "directions": {d: {"count": 1, "busy_ns": 2_500, "exposed_ns": 0} for d in ("d2h", "h2d")},
                }
                for i in range(3)
            ],
        }
    )
    assert rows.offloads(inside, off) and not rows.offloads(inside, {**off, "hidden_fraction": None})


def test_the_trade_of_gpu_runs_suggests_no_cpu_run():
    """The Policy trade of measured GPU runs that cannot be drawn points to other runs that can: a CPU
    run or a synthetic demo run with steps and a peak is not a point of it."""
    from dashboards.trade import _drawable
    from profiler.stored.summary import RunSummary

    mem = {"device_memory": {"devices": [{"peak_bytes_in_use": 1 << 30, "bytes_limit": 1 << 34}]}}
    for platform, synthetic, measured_gpu in (("cpu", False, False), ("gpu", True, False), ("gpu", False, True)):
        doc = {**run("remat", [10, 11, 12], platform=platform), "manifest": {"runtime": mem, "synthetic": synthetic}}
        summary = RunSummary.of(doc)
        assert _drawable(summary) and _drawable(summary, measured_gpu=True) == measured_gpu
