"""compare beyond copies: the work in a window (calls and time per call per kernel name) and
where the time went (compute, NCCL, exposed copies, other, idle), with known answers and on the
real nsys-ai MFU pair, whose equal windows hide less work."""

from __future__ import annotations

import json

import pytest

from profiler.analysis.compare import DEFAULT_THRESHOLDS, compare, parse_threshold
from profiler.analysis.work import SPLIT_KEYS
from profiler.report.compare_text import render_terminal
from profiler.runs.result import collect
from profiler.synthetic.export import ExportBuilder
from profiler.trace import open_trace
from tests.helpers.cli import run_cli
from tests.helpers.paths import ROOT

US = 1_000
DEFAULTS = [parse_threshold(t) for t in DEFAULT_THRESHOLDS]


def window_export(gemms: int, nccl_us: int, steps: int = 0, prefix: str = "") -> ExportBuilder:
    """A 1 ms window per GPU (two GPUs): *gemms* 50 us gemms from t=0 back to back, then two NCCL
    kernels of *nccl_us*, one 20 us d2h copy under the first gemm and one 10 us d2h copy alone at
    0.9 ms, and a 1 us kernel at 999 us that closes the window.  With *steps*, the window is
    repeated that many times as ``step=N`` ranges of 1 ms, 1 ms apart; *prefix* starts every kernel
    name (another compiler's names)."""
    b = ExportBuilder()
    for d in (0, 1):
        b.gpu(d)
    if steps:
        b.domain(1, "profile-step")
    for s in range(max(steps, 1)):
        t0 = s * 2_000 * US
        if steps:
            b.nvtx(t0, t0 + 1_000 * US, f"step={s}", domain_id=1)
        for d in (0, 1):

            def op(corr: int, t: int) -> None:
                b.runtime(t, t + 1, corr, name="cudaLaunchKernel")

            t = t0
            for _ in range(gemms):
                op(b.kernel(t, t + 50 * US, prefix + "gemm", device=d), t0 + 1)
                t += 50 * US
            for _ in range(2):
                op(b.kernel(t, t + nccl_us * US, prefix + "ncclDevKernel_SendRecv", device=d, stream=9), t0 + 2)
                t += nccl_us * US
            op(b.copy(t0 + 10 * US, t0 + 30 * US, "d2h", 1 << 20, device=d), t0 + 3)
            op(b.copy(t0 + 900 * US, t0 + 910 * US, "d2h", 1 << 20, device=d), t0 + 4)
            op(b.kernel(t0 + 999 * US, t0 + 1_000 * US, prefix + "tail", device=d), t0 + 5)
    return b


def runs(build, base: ExportBuilder, head: ExportBuilder) -> tuple[dict, dict]:
    return collect(open_trace(build(base, "base.sqlite"))), collect(open_trace(build(head, "head.sqlite")))


def test_the_window_split_adds_up(build):
    run = collect(open_trace(build(window_export(gemms=10, nccl_us=100), "w.sqlite")))
    for dev in ("0", "1"):
        w = run["work"]["devices"][dev]
        assert w["span_ns"] == 1_000 * US
        assert w["split"] == {
            "compute_ns": 10 * 50 * US + 1 * US,
            "nccl_ns": 200 * US,
            "exposed_copies_ns": 10 * US,
            "other_ns": 0,
            "idle_ns": 1_000 * US - 500 * US - 1 * US - 200 * US - 10 * US,
        }
        assert w["kernels"]["gemm"] == {"calls": 10, "duration_sum_ns": 500 * US, "nccl": False}
        assert w["kernels"]["ncclDevKernel_SendRecv"]["nccl"] is True


def test_equal_windows_with_less_work_fail(build):
    """Head: 8 gemms instead of 10 at the same time per call, NCCL 80 us per call instead of 50,
    in the same 1 ms window: the copies are unchanged, the work per GPU time fell."""
    b, h = runs(build, window_export(gemms=10, nccl_us=50), window_export(gemms=8, nccl_us=80))
    cmp = compare([b], [h], DEFAULTS)
    (pol,) = cmp["policies"]
    # base: 10*50 + 2*50 + 1 us of kernels; head at base's per-call times: 8*50 + 2*50 + 1
    assert pol["metrics"]["work_rate"]["head"] == pytest.approx(501 / 601)
    assert pol["metrics"]["exposed_ns"]["delta"] == 0
    assert not cmp["passed"]
    assert [f["threshold"] for f in cmp["failures"]] == ["work_rate:-0.05"]
    rows = {k["name"]: k for k in pol["work"]["kernels"]}
    assert rows["gemm"]["calls"] == {"base": 20, "head": 16, "relative": -0.2}
    assert rows["ncclDevKernel_SendRecv"]["per_call_ns"]["base"] == 50 * US
    assert rows["ncclDevKernel_SendRecv"]["per_call_ns"]["relative"] == pytest.approx(0.6)
    win = pol["work"]["window"]
    assert win["base"]["span_ns"] == win["head"]["span_ns"] == 1_000 * US
    assert win["head"]["compute_ns"] - win["base"]["compute_ns"] == -100 * US
    assert win["head"]["nccl_ns"] - win["base"]["nccl_ns"] == 60 * US
    assert win["head"]["idle_ns"] - win["base"]["idle_ns"] == 40 * US
    assert pol["work"]["step"] is None


def test_the_same_run_keeps_its_work(build):
    b, _ = runs(build, window_export(gemms=10, nccl_us=50), window_export(gemms=10, nccl_us=50))
    cmp = compare([b], [b], DEFAULTS)
    assert cmp["passed"] and cmp["policies"][0]["metrics"]["work_rate"]["head"] == 1.0


def test_no_kernel_name_in_common_is_not_compared(build):
    """Head ran the same kernels under other names (another accelerator or compiler): no work is
    counted at base's time per call, so the rate is not given (it would only compare each side's
    kernel-busy share), and the table says why."""
    b, h = runs(build, window_export(gemms=10, nccl_us=50), window_export(gemms=8, nccl_us=50, prefix="tpu_"))
    cmp = compare([b], [h], DEFAULTS)
    (pol,) = cmp["policies"]
    assert pol["work"]["names_in_common"] == 0
    assert pol["metrics"]["work_rate"]["head"] is None and pol["metrics"]["work_rate"]["base"] is None
    assert not any(f.get("threshold") == "work_rate:-0.05" for f in cmp["failures"])
    assert "kernel work per GPU time not compared: base and head ran no kernel name in common" in render_terminal(cmp)
    same = compare([b], [b], DEFAULTS)["policies"][0]
    assert same["work"]["names_in_common"] == 3 and same["metrics"]["work_rate"]["head"] == 1.0


def test_a_step_time_change_is_attributed(build):
    """With steps, the mean step's parts (per GPU) add up to it, and the change in the step is the
    sum of the changes of its parts: here all of it NCCL (2 x 30 us); step time gates, not the rate."""
    b, h = runs(build, window_export(gemms=10, nccl_us=50, steps=3), window_export(gemms=10, nccl_us=80, steps=3))
    cmp = compare([b], [h], DEFAULTS)
    (pol,) = cmp["policies"]
    step = pol["work"]["step"]
    for side in ("base", "head"):
        assert sum(step[side][k] for k in SPLIT_KEYS) == pytest.approx(step[side]["step_ns"])
    change = {k: step["head"][k] - step["base"][k] for k in (*SPLIT_KEYS, "step_ns")}
    assert change["nccl_ns"] == 60 * US and change["compute_ns"] == 0 and change["exposed_copies_ns"] == 0
    assert change["idle_ns"] == -60 * US and change["step_ns"] == 0  # the steps are 1 ms ranges
    check = next(c for c in pol["checks"] if c["threshold"] == "work_rate:-0.05")
    assert check == {"threshold": "work_rate:-0.05", "failed": False, "note": "both sides have steps: step time gates"}


def test_markdown_and_terminal_show_the_work(build):
    base, head = build(window_export(10, 50), "b.sqlite"), build(window_export(8, 80), "h.sqlite")
    md = run_cli("compare", "--format", "markdown", str(base), str(head))
    assert md.returncode == 1
    first = md.stdout.splitlines()[0]
    assert "kernel work per GPU time (base = 100%) regressed" in first and "`gemm` calls 20 → 16 (-20.0%)" in first
    assert "Where the time went: the window, per GPU (2 GPUs)" in md.stdout
    assert "50.000 → 80.000 µs (+60.0%)" in md.stdout
    term = run_cli("compare", str(base), str(head))
    assert term.returncode == 1 and "idle (no GPU op)" in term.stdout


@pytest.fixture(scope="module")
def mfu_pair(shared_traces):
    paths = [shared_traces / f"nsysai__mfu_2gpu_{s}.sqlite" for s in ("before", "after")]
    for p in paths:
        if not p.is_file():
            pytest.skip(f"{p} is absent")
    return paths


@pytest.mark.shared
def test_the_real_mfu_pair_is_a_slowdown(mfu_pair):
    """Both windows are about 299 ms per GPU; the second holds 12% fewer flash_fwd calls at the
    same time per call, and SendRecv per call rose from 0.385 to 0.544 ms."""
    proc = run_cli("compare", "--format", "json", *map(str, mfu_pair))
    assert proc.returncode == 1, proc.stderr
    (pol,) = json.loads(proc.stdout)["policies"]
    win = pol["work"]["window"]
    assert win["base"]["span_ns"] == pytest.approx(299.3e6, rel=0.01)
    assert win["head"]["span_ns"] == pytest.approx(win["base"]["span_ns"], rel=0.005)
    rows = {k["name"]: k for k in pol["work"]["kernels"]}
    flash = rows["flash_fwd_kernel"]
    assert (flash["calls"]["base"], flash["calls"]["head"]) == (68, 60)
    assert abs(flash["per_call_ns"]["relative"]) < 0.01
    send = rows["ncclDevKernel_SendRecv"]["per_call_ns"]
    assert (round(send["base"] / 1e6, 3), round(send["head"] / 1e6, 3)) == (0.385, 0.544)
    assert pol["metrics"]["work_rate"]["head"] < 0.95
    assert win["head"]["idle_ns"] - win["base"]["idle_ns"] > 20e6  # the lost work became idle time
    md = run_cli("compare", "--format", "markdown", *map(str, mfu_pair)).stdout
    assert "no overlap regression" not in md and "`flash_fwd_kernel` calls 68 → 60 (-11.8%)" in md


def test_runs_without_gpu_activity_show_no_copy_zeros():
    runs = ROOT / "sample_traces" / "cpu-example"
    proc = run_cli("compare", str(runs), str(runs))
    assert proc.returncode == 0, proc.stderr
    rows = [x for x in proc.stdout.splitlines() if "exposed copy time" in x or "stalled by copies" in x]
    assert len(rows) == 4 and all(x.split()[-3:] == ["–", "–", "–"] for x in rows)
    assert "No GPU activity in none (base, head), offload_qkv (base, head)" in proc.stdout
    doc = json.loads(run_cli("compare", "--format", "json", str(runs), str(runs)).stdout)
    assert all(p["metrics"]["exposed_ns"]["base"] is None for p in doc["policies"])
    assert all(p["metrics"]["step_ns"]["base"] for p in doc["policies"])  # the steps are still measured


def test_an_h200_run_against_a_tpu_run_says_what_its_numbers_are(tmp_path):
    """The same step on an H200 and on a TPU v5e (sample_traces): the TPU's GB/s is METRICS.md's
    bytes over the copies' summed time, not its link's rate, and the table says so; the two share no
    kernel name, so the kernel work per GPU time is not compared (it read 105.8%)."""
    base = next(iter((ROOT / "sample_traces" / "h200-example").glob("*-offload_qkv-b50f27")), None)
    head = next(iter((ROOT / "sample_traces" / "tpu-v5e-h200-shape").glob("*-offload_qkv-baa357")), None)
    if base is None or head is None:
        pytest.skip("the h200-example or tpu-v5e-h200-shape offload_qkv run is absent")
    out = run_cli("compare", "--pair", str(base), str(head), env={"PROFILE_STEP_CACHE": str(tmp_path)}).stdout
    (gbps,) = [line.split("  ") for line in out.splitlines() if "d2h GB/s, whole capture" in line]
    base_gbps, head_gbps = (float(c) for c in [c for c in gbps if c.strip()][2:4])
    assert head_gbps < 2 < base_gbps  # the contract's numbers, kept
    assert "note (offload_qkv): GB/s on the TPU (head) is bytes over the copies' summed time" in out
    assert "kernel work per GPU time not compared" in out
    assert not any("kernel work per GPU time" in line and "%" in line for line in out.splitlines())
