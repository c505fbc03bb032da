"""The TPU v5e runs of sample_traces/tpu-v5e-example and tpu-v5e-h200-shape, each read by profile-step
and checked against its own trace JSON, read here without the converter (tests/helpers/tpu_traces.py): per step its
duration, the bytes each way, the copies' busy and exposed time, and the waits."""

from __future__ import annotations

import itertools
import json
import statistics

import pytest

from profiler.analysis import replay_rules
from profiler.analysis.dependencies import dependencies
from profiler.analysis.hostsync import host_syncs
from profiler.analysis.replay import replay
from profiler.runs.result import analyzed
from profiler.trace import jax_profile, load_trace
from profiler.trace.loader import open_trace
from tests.helpers.cli import run_cli
from tests.helpers.paths import ROOT
from tests.helpers.tpu_traces import minus_ns, raw_steps, union_ns

TPU = ROOT / "sample_traces" / "tpu-v5e-example"
RUNS = sorted(p for p in TPU.iterdir() if (p / "trace.json.gz").is_file())
SHAPE = ROOT / "sample_traces" / "tpu-v5e-h200-shape"  # the H200 example's own step on the TPU
SHAPE_RUNS = sorted(p for p in SHAPE.iterdir() if (p / "trace.json.gz").is_file())
EVERY = RUNS + SHAPE_RUNS
OFFLOADING = [p for p in EVERY if "-offload_" in p.name]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    """One conversion cache for the module's commands: each recording is converted once, and the later
    commands read it as a user's second command would."""
    return str(tmp_path_factory.mktemp("cache"))


def label(run) -> str:
    return run.name.split("-", 1)[1].rsplit("-", 1)[0]


def run_id(run) -> str:
    """The run's label, with the model where it is the H200 example's."""
    return f"{label(run)}@h200-shape" if run.parent == SHAPE else label(run)


def steps_of(run) -> int:
    return len(json.loads((run / "manifest.json").read_text())["loop_step_ms"])


def test_the_ten_runs_and_the_run_out_of_memory_are_there():
    assert [label(p) for p in RUNS] == [
        "remat-scan",
        "offload_mlp-scan",
        "offload_all-scan",
        "none-scan-l4",
        "remat-scan-l4",
        "offload_qkv-scan-l4",
        "offload_mlp-scan-l4",
        "offload_all-scan-l4",
        "remat",
        "offload_mlp",
    ]
    for run in RUNS:
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["capture"]["tool"] == "jax.profiler" and manifest["devices"][0]["kind"] == "TPU v5 lite"
        assert len(list((run / "xla_dump").glob("module_*.jit_step.after_optimizations.txt.xz"))) == 1
        assert len(manifest["loop_step_ms"]) == 5
    (failed,) = [p for p in TPU.iterdir() if p.is_dir() and not (p / "trace.json.gz").exists()]
    manifest = json.loads((failed / "manifest.json").read_text())
    assert (manifest["status"], manifest["exit_code"]) == ("failed", 1)
    assert manifest["no_trace_reason"].startswith("RESOURCE_EXHAUSTED: Ran out of memory on HBM")
    assert sum(f.stat().st_size for f in TPU.rglob("*") if f.is_file()) < 8 << 20


@pytest.mark.parametrize("run", EVERY, ids=run_id)
def test_each_step_equals_the_trace_json_to_the_nanosecond(run, cache, monkeypatch):
    monkeypatch.setenv("PROFILE_STEP_CACHE", cache)
    got = analyzed(load_trace(run / "trace.json.gz"), by="step").breakdown.by_step()["steps"]
    raw = raw_steps(run / "trace.json.gz")
    assert len(got) == len(raw) == steps_of(run)
    for step, want in zip(got, raw, strict=True):
        assert step["duration_ns"] == max(e for _, e in want.ops) - min(s for s, _ in want.ops)
        dev = step["devices"].get("0", {})
        for kind in ("d2h", "h2d"):
            copies = want.copies[kind]
            mine = dev.get(kind) or {"count": 0, "bytes": 0, "busy_ns": 0, "exposed_ns": 0}
            assert (mine["count"], mine["bytes"]) == (len(copies), want.bytes[kind])
            assert mine["busy_ns"] == union_ns(copies)
            assert mine["exposed_ns"] == minus_ns(copies, want.kernels)


@pytest.mark.parametrize("run", OFFLOADING, ids=run_id)
def test_the_exposed_and_stalled_time_are_the_waits(run, cache, monkeypatch):
    """The core's waits in the transfers' dones are the copies' exposed time (with the few ns of idle
    core inside a copy, under 0.1% of the waits) and their stalls, to a ns per wait or 0.001% (the
    trace's microseconds, rounded to ns, let a wait and the op beside it overlap by one; a few ns of
    idle core between a wait and the op after it count as stalled)."""
    monkeypatch.setenv("PROFILE_STEP_CACHE", cache)
    got = analyzed(load_trace(run / "trace.json.gz"), by="step").breakdown.by_step()["steps"]
    for step, want in zip(got, raw_steps(run / "trace.json.gz"), strict=True):
        off = step["devices"]["0"]["offload"]
        waits = union_ns(want.waits)
        copies = want.copies["d2h"] + want.copies["h2d"]
        idle = minus_ns(copies, want.kernels + want.waits)  # inside a copy, neither an op nor a wait
        assert abs(off["exposed_ns"] - idle - waits) <= len(want.waits) and idle <= waits // 1000
        assert abs(off["stall_ns"] - waits) <= max(len(want.waits), waits // 100_000)


def test_the_h200_shape_holds_its_seven_runs_and_the_unrolled_offload_all_out_of_memory(cache):
    """The H200 example's own step on the TPU: seven runs with a trace (3 steps each) and the failed one,
    every median step in analyze's table the trace JSON's own; the unrolled offloads beat unrolled remat
    there (offload_qkv 884.6 ms, offload_mlp 899.4, remat 915.5), the scanned remat beats every run."""
    assert [label(p) for p in SHAPE_RUNS] == [
        "remat",
        "offload_qkv",
        "offload_mlp",
        "offload_qkv-scan",
        "remat-scan",
        "offload_mlp-scan",
        "offload_all-scan",
    ]
    proc = run_cli("analyze", "--json", str(SHAPE), env={"PROFILE_STEP_CACHE": cache})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    rows = {r["policy"]: r for r in doc["policies"]["rows"]}
    for run in SHAPE_RUNS:
        raw = raw_steps(run / "trace.json.gz")
        assert len(raw) == steps_of(run) == 3
        want = statistics.median(max(e for _, e in s.ops) - min(b for b, _ in s.ops) for s in raw)
        assert rows[label(run)]["median_step_ns"] == want
    ms = {k: round(v["median_step_ns"] / 1e5) / 10 for k, v in rows.items()}
    assert (ms["offload_qkv"], ms["offload_mlp"], ms["remat"], ms["remat-scan"]) == (884.6, 899.4, 915.5, 857.7)
    assert doc["verdict"]["fastest"]["policy"] == "remat-scan"
    (oom,) = doc["no_trace"]
    assert oom["policy"] == "offload_all" and "17.34G" in oom["reason"]


def test_offload_mlp_scanned_waits_132_8_ms_of_its_355_6_ms_step(cache, monkeypatch):
    monkeypatch.setenv("PROFILE_STEP_CACHE", cache)
    (run,) = [p for p in RUNS if label(p) == "offload_mlp-scan"]
    raw = raw_steps(run / "trace.json.gz")
    assert statistics.median(union_ns(s.waits) for s in raw) == pytest.approx(132.37e6, abs=0.05e6)
    assert statistics.median(s.end - s.start for s in raw) == pytest.approx(355.6e6, abs=0.1e6)
    assert all(s.bytes == {"d2h": 1 << 30, "h2d": 1 << 30} for s in raw)  # 8 layers x 128 MiB each way


def test_analyze_of_the_folder_reads_every_run_and_says_why_one_has_no_trace(cache):
    proc = run_cli("analyze", "--json", str(TPU), env={"PROFILE_STEP_CACHE": cache})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    rows = {r["policy"]: r for r in doc["policies"]["rows"]}
    assert set(rows) == {label(p) for p in RUNS}
    for run in RUNS:
        raw = raw_steps(run / "trace.json.gz")
        row = rows[label(run)]
        assert row["median_step_ns"] == statistics.median(
            max(e for _, e in s.ops) - min(b for b, _ in s.ops) for s in raw
        )
        assert row["moved_d2h_bytes_per_step"] == raw[0].bytes["d2h"] and row["device_kind"] == "TPU v5 lite"
    (oom,) = doc["no_trace"]
    assert oom["policy"] == "none-scan" and oom["reason"].startswith("RESOURCE_EXHAUSTED")
    # the scanned step does the work of the unrolled one, and plans the same offloads (its loop's trips)
    assert rows["remat-scan"]["flops_per_step"] == pytest.approx(rows["remat"]["flops_per_step"], rel=2e-3)
    assert rows["offload_mlp-scan"]["planned_d2h_bytes_per_step"] == rows["offload_mlp"]["moved_d2h_bytes_per_step"]
    # the verdict ranks the 8-layer runs (the table's reference program) and names the 4-layer ones
    f = doc["verdict"]["fastest"]
    four = [label(p) for p in RUNS if label(p).endswith("-l4")]
    assert f["policy"] == "remat" and f["next"]["policy"] == "remat-scan" and f["program"]["others"] == four
    assert (f["program"]["parameters"], f["program"]["others_program"]) == (66, {"name": "jit_step", "parameters": 34})
    assert doc["verdict"]["policy"] == "offload_mlp"  # its copies: the fastest 8-layer run that offloads


def test_compare_pairs_the_scanned_and_the_unrolled_offload_mlp(cache):
    """Two forms of one step are two policies: --pair compares them as one pair, the step and the waits
    as analyze measured them; without it, one run on each side is the pair too (said on stderr: it
    exited 2 with "no policy in common")."""
    scan, unrolled = (next(p for p in RUNS if label(p) == name) for name in ("offload_mlp-scan", "offload_mlp"))
    env = {"PROFILE_STEP_CACHE": cache}
    proc = run_cli("compare", "--pair", "--format", "json", str(scan), str(unrolled), env=env)
    assert proc.returncode == 0, proc.stderr
    (pair,) = json.loads(proc.stdout)["policies"]
    assert pair["policy"] == "offload_mlp-scan → offload_mlp"
    steps = {
        side: statistics.median(
            max(e for _, e in s.ops) - min(b for b, _ in s.ops) for s in raw_steps(run / "trace.json.gz")
        )
        for side, run in (("base", scan), ("head", unrolled))
    }
    assert (pair["metrics"]["step_ns"]["base"], pair["metrics"]["step_ns"]["head"]) == (steps["base"], steps["head"])
    alone = run_cli("compare", "--format", "json", str(scan), str(unrolled), env=env)
    assert alone.returncode == 0 and json.loads(alone.stdout)["policies"][0]["policy"] == pair["policy"]
    assert alone.stderr.strip() == (
        "profile-step: one run on each side, of two policies (offload_mlp-scan, offload_mlp): compared as a pair "
        "(--pair)"
    )


def test_findings_give_no_gpu_flag_to_a_tpu(cache):
    (run,) = [p for p in RUNS if label(p) == "offload_mlp-scan"]
    proc = run_cli("findings", str(run), env={"PROFILE_STEP_CACHE": cache})
    said = " ".join(proc.stdout.split())
    assert proc.returncode == 0 and "exposed-copies" in said and "saves 132 ms per step" in said
    assert "(1 TPU, 5 steps, median 356 ms; copies per step and TPU)" in said and "costs 132 ms per step" in said
    assert "XLA:GPU's scheduling flags (--lhs, --pipelined-offload) do not apply to a TPU" in said
    assert "--xla_gpu_" not in said  # lhs-off cannot decide on a TPU; late-copies-back names no GPU flag
    assert "exposed-copies (TPU 0) saves" in said and "TPU 0's window" in said and "GPU 0" not in said


def test_analyze_of_the_folder_opens_with_one_model_and_one_mark_per_other_program(cache):
    """The first lines a newcomer reads: the verdict over the 8-layer runs, the 4-layer ones named, one
    ``≠`` line for the five runs of the other program, TPU where a device is named."""
    proc = run_cli("analyze", "--wide", str(TPU), env={"PROFILE_STEP_CACHE": cache})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(
        "Verdict over 5 of 10 runs, one model (jit_step with 66 parameters): policy remat is the fastest, 234 ms"
    )
    assert lines[0].endswith(
        "not ranked, another model (jit_step with 34 parameters): none-scan-l4, remat-scan-l4, offload_qkv-scan-l4, "
        "offload_mlp-scan-l4, offload_all-scan-l4"
    )
    marks = [ln for ln in lines if ln.startswith("≠")]
    assert marks == [
        "≠: none-scan-l4, remat-scan-l4, offload_qkv-scan-l4, offload_mlp-scan-l4, offload_all-scan-l4 run another "
        "program than remat-scan: jit_step with 34 parameters against 66: no percentage between them"
    ]
    assert "exposed-copies (TPU 0)" in proc.stdout and "GPU 0" not in proc.stdout


@pytest.mark.parametrize("run", EVERY, ids=run_id)
def test_the_trace_replay_keeps_its_rules_on_each_run(run, cache, monkeypatch):
    """One op at a time per stream (where the recording had none overlap: a direction's transfers in flight
    together in the unrolled runs keep their overlap, no more) and no stream shorter than its measured
    work, at the recorded link, a twice faster one and none, with and without the sequencer's waits."""
    monkeypatch.setenv("PROFILE_STEP_CACHE", cache)
    trace = open_trace(jax_profile.export(run / "trace.json.gz"))
    deps = dependencies(trace)
    host = host_syncs(trace, deps)
    for factor, h in itertools.product((1.0, 0.5, 0.0), (None, host)):
        assert replay_rules.check_replay(replay(deps, factor, h)).ok, (factor, h is not None)


def test_per_layer_rows_that_overlap_say_so_and_compare_names_no_layer_by_them(cache):
    """A TPU copy spans from its start to the end of its done, so several layers' copies are in flight
    together: per layer each is its own union (METRICS.md) and the rows add up past the device's; analyze
    says so with both sums, and compare names no layer by an exposed time that other layers' copies hold."""
    (run,) = [p for p in SHAPE_RUNS if label(p) == "offload_qkv"]
    env = {"PROFILE_STEP_CACHE": cache}
    doc = json.loads(run_cli("analyze", "--by", "layer", "--json", str(run / "trace.json.gz"), env=env).stdout)
    whole = doc["devices"]["0"]["copies"]["offload"]
    summed = sum(g["copies"]["offload"]["exposed_ns"] for g in doc["layers"])
    assert summed > 2 * whole["exposed_ns"]  # 277 ms of layers against the device's 100 ms
    said = " ".join(run_cli("analyze", "--by", "layer", str(run / "trace.json.gz"), env=env).stdout.split())
    assert "the rows overlap and do not add up" in said
    assert f"exposed {summed / 1e6:.3f} against {whole['exposed_ns'] / 1e6:.3f}" in said
    h200 = ROOT / "sample_traces" / "h200-example"
    (base,) = [p for p in h200.iterdir() if p.name.endswith("-offload_qkv-b50f27")]
    out = run_cli("compare", "--pair", str(base), str(run), env=env).stdout
    verdict = " ".join(out.split("\nDifferent accelerators")[0].split())  # the verdict, wrapped to the terminal
    assert "no layer named: the layers' exposed times overlap" in verdict and "layer_0" not in verdict
    assert "Where the time went: the mean included step, per device (1 GPU / 1 TPU)" in out
    # each crossed limit named (the step 4x slower read "1 more limit(s) crossed"), the hardware said, the
    # devices' parts in one word, and no kernel table where no kernel name is in common
    assert "; also crossed: step time in offload_qkv (+" in verdict
    assert (
        "Different accelerators: base ran on NVIDIA H200, head on TPU v5 lite: each change is the hardware's as "
        "much as the code's."
    ) in out.splitlines()
    assert "other device work" in out and "idle (no device op)" in out and "GPU work" not in out
    assert "Kernel names whose calls" not in out


def test_no_async_start_or_done_is_a_kernel_group_beside_copies(cache):
    """copy-start.6 (the core issuing a transfer: 2 ns, beside its own copy by construction) counted as
    the one group of kernels slowed by copies of the scanned offload_all; no async start or done may."""
    (run,) = [p for p in SHAPE_RUNS if label(p) == "offload_all-scan"]
    proc = run_cli("analyze", "--json", str(run / "trace.json.gz"), env={"PROFILE_STEP_CACHE": cache})
    kb = json.loads(proc.stdout)["devices"]["0"]["kernels_beside_copies"]
    assert kb["calls_alone"] and kb["calls_beside"]
    assert not [g["name"] for g in kb["top"] if g["name"].rsplit("-", 1)[-1].split(".")[0] in ("start", "done")]


def test_the_policy_legend_defines_tflops_and_mfu_with_the_peak(cache):
    """remat reads more TFLOP/s and less MFU than offload_qkv: two different FLOPs, both said, the peak with
    its number and source."""
    proc = run_cli("analyze", "--no-verdict", str(SHAPE), env={"PROFILE_STEP_CACHE": cache})
    said = " ".join(proc.stdout.split())
    assert "TFLOP/s = the compiled step's FLOPs" in said and "recomputation included" in said
    assert "MFU = the model's FLOPs per step" in said
    assert "dense bf16 peak (TPU v5 lite 197 TFLOP/s, Google Cloud's TPU v5e spec)" in said


def test_whatif_on_a_tpu_speaks_of_the_tpu(cache):
    """whatif on a TPU run said "GPU span" and "144 CUDA calls held their thread until GPU work ended"."""
    (run,) = [p for p in SHAPE_RUNS if label(p) == "offload_qkv"]
    out = run_cli("whatif", str(run), "--link", "pcie5", env={"PROFILE_STEP_CACHE": cache})
    assert out.returncode == 0, out.stderr
    assert "  TPU span:          2.66 s -> 2.56 s (-100 ms, -3.8%)" in out.stdout
    said = " ".join(out.stdout.split())
    assert "144 host calls held their thread until TPU work ended" in said
    assert "GPU" not in out.stdout and "CUDA" not in out.stdout
