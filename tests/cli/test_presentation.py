"""What people read: units by magnitude, the default link, catalogue provenance, table rows per GPU,
timeline occupancy, and the terminal's notes (one per case, once)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from dashboards.figures import category_axis
from dashboards.links import default_link
from dashboards.timeline_view import busy_fraction, timeline_figure
from profiler.errors import InputError
from profiler.runs.catalog import allowed, read_catalog
from profiler.synthetic.export import ExportBuilder
from profiler.units import byte_unit, human_bytes, human_time, scaled, time_unit
from tests.helpers.cli import run_cli


@pytest.mark.parametrize(
    ("largest", "unit"),
    [(0, "B"), (1000, "B"), (1024, "KiB"), (5 * 2**20 - 1, "MiB"), (3 * 2**30, "GiB"), (2**41, "TiB")],
)
def test_byte_unit_by_magnitude(largest, unit):
    assert byte_unit([None, 1, largest])[0] == unit


@pytest.mark.parametrize(("largest", "unit"), [(0, "µs"), (999_999, "µs"), (10**6, "ms"), (7.5e9, "s")])
def test_time_unit_by_magnitude(largest, unit):
    assert time_unit([largest, None])[0] == unit


def test_small_values_never_show_as_zero():
    assert scaled(4000, 2**20) == "<0.01"  # 1000 copies of 4 bytes are not "0.00 MiB"
    assert scaled(0, 2**20) == "0"
    assert scaled(None, 1) == "-"
    assert (human_bytes(512), human_bytes(1536), human_bytes(3 * 2**30)) == ("512 B", "1.50 KiB", "3.00 GiB")
    assert (human_time(850_000), human_time(1_250_000), human_time(0)) == ("850 µs", "1.25 ms", "0")


@pytest.mark.parametrize(
    ("gpu", "link"),
    [
        ("Tesla T4", "PCIe Gen3 x16"),
        ("Tesla V100-SXM2-16GB", "PCIe Gen3 x16"),
        ("NVIDIA A100-SXM4-80GB", "PCIe Gen4 x16"),
        ("NVIDIA GeForce RTX 3090", "PCIe Gen4 x16"),
        ("NVIDIA H100 80GB HBM3", "PCIe Gen5 x16"),
        ("NVIDIA H200", "PCIe Gen5 x16"),
        ("NVIDIA GH200 480GB", "NVLink-C2C"),
        ("NVIDIA GB200", "NVLink-C2C"),
        ("NVIDIA B300 SXM6", "PCIe Gen6 x16"),
    ],
)
def test_default_link_from_the_device_model(gpu, link):
    chosen, why = default_link([gpu])
    assert chosen.name == link and gpu in why


def test_unknown_device_model_says_the_link_is_assumed():
    chosen, why = default_link(["Some Accelerator 9000"])
    assert chosen.name == "PCIe Gen4 x16" and "assumed" in why


def test_catalogue_of_the_shared_traces(shared_traces):
    cat = read_catalog(shared_traces)
    apache = {f for f, p in cat.items() if allowed(p, ("Apache-2.0",))}
    assert "gpubootcamp__jacobi_memcpy_nvlink_report.sqlite" in apache
    assert "gpu4__nsys_vectorAdd_streams_10000000__7498cc2.sqlite" not in apache  # no licence found
    assert all(cat[f].licence.startswith("Apache-2.0") for f in apache)
    assert cat["alpa__report1.sqlite"].repo == "Yu-gyoung-Yun/alpa"


def test_a_bad_catalogue_is_one_line(tmp_path):
    (tmp_path / "CATALOG.tsv").write_text("file\trepo\nx.sqlite\ta/b\n")
    with pytest.raises(InputError, match=r"CATALOG\.tsv: has no commit, path, license, description column"):
        read_catalog(tmp_path)


def test_only_catalogued_traces_under_the_licence_are_shown(tmp_path):
    from profiler.runs.discover import discover

    for name in ("a.sqlite", "b.sqlite", "c.sqlite"):
        ExportBuilder().write(tmp_path / name)
    rows = [
        "file\trepo\tcommit\tpath\tlicense\tdescription",
        "a.sqlite\to/a\t" + "1" * 40 + "\ta.nsys-rep\tApache-2.0 (LICENSE)\tfirst",
        "b.sqlite\to/b\t" + "2" * 40 + "\tb.nsys-rep\tnone found\tsecond",
    ]
    (tmp_path / "CATALOG.tsv").write_text("\n".join(rows) + "\n")
    refs = discover([tmp_path], licences=("Apache-2.0",))
    assert [(r.name, r.source, r.provenance.repo) for r in refs] == [("a.sqlite", "external", "o/a")]
    assert sorted(r.name for r in discover([tmp_path])) == ["a.sqlite", "b.sqlite"]  # c is not catalogued


def test_busy_fraction_known_answers():
    # busy [0, 50) and [75, 100) out of [0, 100), in 4 bins of 25
    frac = busy_fraction(np.array([0, 75, 10]), np.array([50, 100, 20]), np.array([0.0, 25, 50, 75, 100]))
    assert frac.tolist() == [1.0, 1.0, 0.0, 1.0]
    frac = busy_fraction(np.array([5]), np.array([15]), np.array([0.0, 10, 20]))
    assert frac.tolist() == [0.5, 0.5]


def test_dense_lanes_are_drawn_as_occupancy():
    # 10,000 tiny copies, each 12% of its period: merged at screen resolution they would look 100% busy
    n, period = 10_000, 1000
    start = np.arange(n) * period
    ops = pl.DataFrame(
        {
            "op_id": np.arange(n),
            "kind": ["copy"] * n,
            "device": [0] * n,
            "stream": [13] * n,
            "start": start,
            "end": start + 120,
            "name": ["memcpy"] * n,
            "is_nccl": [False] * n,
            "cls": ["h2d"] * n,
            "bytes": [4] * n,
            "layer": [None] * n,
        },
        schema_overrides={"layer": pl.String},
    )
    ranges = pl.DataFrame(schema={"lane": pl.String, "name": pl.String, "start": pl.Int64, "end": pl.Int64})
    fig, stats = timeline_figure(ops, ranges, None)
    assert stats["occupancy_lanes"] == ["H2D · stream 13"]
    (lane,) = fig["data"]
    pct = [v for v in lane["customdata"] if v is not None]
    assert 10 <= np.mean(pct) <= 14  # about 12% busy, never drawn as a solid bar
    assert lane["fill"] == "toself" and lane["line"]["shape"] == "hv"


def test_category_labels_turn_vertical_when_they_would_collide():
    flat, bottom = category_axis([f"layer_{i}" for i in range(4)])
    assert flat["tickangle"] == 0
    tall, bottom = category_axis([f"decoder_layer_{i}" for i in range(96)])
    assert tall["tickangle"] == -90 and bottom > 100


def test_two_gpus_are_two_rows(tmp_path):
    from dashboards import rows
    from dashboards.data import RunStore

    b = ExportBuilder()
    b.gpu(0, "Tesla V100-SXM2-16GB")
    b.gpu(3, "Tesla V100-SXM2-16GB")
    b.copy(0, 100, "d2h", 1000, device=0)
    b.copy(0, 300, "d2h", 5000, device=3)
    b.write(tmp_path / "two.sqlite")
    store = RunStore([tmp_path])
    (rid,) = store.refs
    summary = store.get(rid).summary
    raw = [rows.raw_row(store.refs[rid], summary, v.device) for v in rows.views(store.refs[rid], summary)]
    assert [(r["device"], r["bytes"], r["copies"]) for r in raw] == [
        ("GPU 0 · Tesla V100-SXM2-16GB", 1000, 1),
        ("GPU 3 · Tesla V100-SXM2-16GB", 5000, 1),
    ]
    assert raw[0]["policy"] == "(none)" and raw[0]["status"] == "plain trace" and raw[0]["steps"] is None
    columns, data, _ = rows.table(raw)
    # the unit both values read well in (1 to 10,000 of it): 1,000 and 5,000 B (in KiB 0.98 would not)
    assert [c["name"] for c in columns if c["id"] == "bytes"] == ["copied, D2H + H2D, whole capture (B)"]
    assert data[1]["bytes"] == 5000
    # the rank column only where a row is a rank of a multi-rank job
    assert "rank" not in [c["id"] for c in columns]
    assert "rank" in [c["id"] for c in rows.table([*raw, {**raw[0], "id": "r@3", "rank": 3}])[0]]


# --- the terminal ---------------------------------------------------------------------------------
def _cli(*args: str) -> str:
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_terminal_no_nvtx_is_not_no_gpu_activity(build):
    b = ExportBuilder()
    b.kernel(0, 100)
    b.copy(10, 60, "d2h", 4)
    out = _cli("analyze", "--by", "range", str(build(b)))
    assert "No NVTX ranges in this trace" in out
    assert "No GPU activity" not in out and "with GPU activity" not in out


def test_terminal_says_no_gpu_activity_once(build):
    b = ExportBuilder()
    b.domain(1, "profile-step")
    for i in range(2):
        b.nvtx(i * 100, i * 100 + 50, f"layer={i}", domain_id=1)
    out = _cli("analyze", "--by", "layer", str(build(b)))
    # the verdict's head and the device part say it; the layer part names the layers once
    assert out.count("GPU activity") == 3
    assert "2 layers found: 0, 1; no GPU activity to measure in them." in out
    assert "note: policy" not in out


def test_terminal_tiny_copies_are_counted_and_not_zero(build):
    b = ExportBuilder()
    b.domain(1, "profile-step")
    b.nvtx(0, 10_000_000, "layer=0", domain_id=1)
    for i in range(1000):  # 1000 copies of 4 bytes, 1.5 ms of copy time
        corr = b.copy(i * 2000, i * 2000 + 1500, "d2h", 4)
        b.runtime(i * 2000, i * 2000 + 10, corr, name="cudaMemcpyAsync")
    out = _cli("analyze", "--by", "layer", str(build(b)))
    table = out[out.index("Copies per layer") :].splitlines()
    assert table[1].split()[:5] == ["layer", "device", "copies", "d2h", "KiB"]
    assert table[3].split()[:4] == ["0", "0", "1000", "3.91"]  # 4000 B in KiB, beside its count
    assert "units: sizes in binary units (1 MiB = 2^20 bytes); bandwidth in decimal GB/s" in out


def test_terminal_no_host_device_copies_is_said(build):
    b = ExportBuilder()
    b.kernel(0, 100)
    out = _cli("analyze", str(build(b)))
    assert "no host-device copies (D2H or H2D) on this device" in out
    assert "h2d          0" not in out


def test_cpu_run_summary_says_no_gpu_once():
    from profiler.report.text import render_sweep_summary

    rows = [
        {"policy": p, "status": "ok", "exit_code": 0, "steps": 3, "median_step_ns": 7_500_000, "run_dir": f"runs/{p}"}
        for p in ("none", "offload_qkv")
    ]
    out = render_sweep_summary(rows)
    assert out.splitlines()[0].split()[:6] == ["policy", "status", "exit", "steps", "median", "step"]
    assert "ms" in out.splitlines()[0] and "copies" in out.splitlines()[0]


def test_quickstart_documents_its_switch():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "QUICKSTART_NO_DASHBOARD" in readme


def test_steps_cell_says_where_the_steps_and_the_window_come_from(shared_traces):
    """The runs table's steps tooltip: the step source, what was left out, the analysis window."""
    from dashboards.rows import steps_origin
    from profiler.runs.result import collect
    from profiler.trace import open_trace

    root = Path(__file__).resolve().parents[2]
    demo = collect(open_trace(root / "sample_traces/demo-synthetic/synthetic-4-offload_all/synthetic-trace.sqlite"))
    assert steps_origin(demo) == (
        "steps: profile-step step=N ranges. Analysis window: profile-step:capture range, "
        + human_time(demo["window"]["duration_ns"])
    )
    plain = collect(open_trace(shared_traces / "alpa__jax_profile_mem.sqlite"))
    assert steps_origin(plain) == (
        "no steps found (no step ranges, no XLA module executions). Analysis window: the whole recording "
        "(no profile-step:capture range; no cudaProfilerStart/Stop calls)"
    )
    chosen = "jit_train_step (program 7): ran 3 times, the only program that ran"
    xla = {
        "step_source": "the executions of jit_train_step (program 7)",
        "steps": [{"excluded": "warm-up"}, {"excluded": None}, {"excluded": None}],
        "window": {"source": None, "note": None, "duration_ns": None},
        "compiled": {"step_program": "jit_train_step (program 7)", "chosen_by": chosen},
    }
    assert steps_origin(xla) == (
        f"steps: the executions of jit_train_step (program 7); step: {chosen}; 1 left out (warm-up). "
        "Analysis window: the whole recording"
    )
    from dashboards.rows import HEADER_TIPS

    # the column's own tooltip names the same source: the step program, not a module chosen by GPU time
    assert "executions of the step program" in HEADER_TIPS["steps"] and "dominates" not in HEADER_TIPS["steps"]


def test_findings_times_never_read_zero():
    """A verdict's millisecond figure for a few hundred ns is said in ns, not as 0.000 ms."""
    from profiler.analysis.findings.rules.text import ms

    assert ms(480) == "480 ns"
    assert ms(0) == "0.000 ms" and ms(54_900_000) == "54.900 ms" and ms(500) == "0.001 ms"


def test_a_column_takes_the_unit_most_of_its_values_read_well_in():
    from dashboards.rows import table

    base = {"_full": "x", "_steps": "", "step": None, "bytes": 0}
    # the first view's exposed copy times: 30.9 us, 61.0 and 59.2 ms (SYNTHETIC), 245 ms, 921 ms and 3.38 s
    # (public traces): in ms five read between 1 and 10,000 (61 ... 3,378); in s one (3.378), in us three
    ns = [30_900, 60_990_000, 59_220_000, 244_800_000, 920_900_000, 3_378_000_000]
    cols, data, _ = table([{**base, "id": str(i), "exposed": v} for i, v in enumerate(ns)])
    exposed = next(c for c in cols if c["id"] == "exposed")["name"]
    assert exposed == "exposed copies, D2H and H2D as one, whole capture (ms)"
    assert [r["exposed"] for r in data] == [pytest.approx(v / 1e6) for v in ns]


def test_the_per_layer_table_says_it_sums_the_window_and_claims_no_stalls_it_lacks():
    # the H200 offload_qkv run's layers hold 3 steps' copies (576 MiB a layer, 3 x 3 x 64 MiB) beside a
    # verdict per step, and its note said "stalled adds up" over a stalled column of "-" (a JAX trace)
    from tests.helpers.paths import ROOT

    (run,) = (ROOT / "sample_traces" / "h200-example").glob("*-offload_qkv-b50f27")
    said = " ".join(_cli("analyze", "--by", "layer", str(run)).split())
    assert "Copies per layer, summed over the analysis window (every step in it, not per step):" in said
    assert "layer_7 0 18 576.00 576.00" in said
    assert "the rows overlap and do not add up" in said and "stalled adds up" not in said


def test_a_window_asked_of_run_folders_is_used_and_said(tmp_path):
    # `analyze RUN_FOLDER --window nvtx:NAME` went to the per-policy table, which read each run through its
    # own window and never said so: a name absent from the recording passed unnoticed
    from tests.helpers.paths import ROOT

    (run,) = (ROOT / "sample_traces" / "h200-example").glob("*-offload_qkv-b50f27")
    out = " ".join(_cli("analyze", str(run), "--window", "nvtx:doesnotexist").split())
    assert (
        "--window nvtx:doesnotexist: analysis window: the whole recording (no NVTX range doesnotexist in the "
        "recording)" in out
    )
    assert "(every run)" not in out


def test_a_window_asked_of_a_run_folder_is_the_one_its_numbers_come_from(tmp_path):
    # a 1 MiB copy inside the NVTX range `part` [0, 500), a 3 MiB one after it: through the window, the run
    # folder's verdict counts one copy over a 400 ns window (the kernel inside); without it, both over 1400 ns
    import json

    b = ExportBuilder()
    b.gpu(0)
    b.domain(1, "profile-step")
    b.nvtx(0, 500, "part", domain_id=1)
    b.kernel(0, 400, "k")
    b.copy(10, 110, "d2h", 2**20)
    b.kernel(1000, 1400, "k")
    b.copy(1010, 1110, "d2h", 3 * 2**20)
    (tmp_path / "run").mkdir()
    b.write(tmp_path / "run" / "trace.sqlite")

    def seen(*window: str) -> tuple[int, int]:
        v = json.loads(_cli("analyze", "--json", str(tmp_path / "run"), *window))["verdict"]
        return v["copies"]["d2h"]["count"], v["window_ns"]

    assert seen() == (2, 1400)
    assert seen("--window", "nvtx:part@*") == (1, 400)
