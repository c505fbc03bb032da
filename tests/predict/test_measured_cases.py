"""What a recording measured (``profiler.predict.measured``, ``profiler.predict.tpu_trace``), read
from recordings built by hand with known durations: a run folder, a bare export, an nsys-jax archive
(its folder and its zip), a TPU's JAX profiler trace beside its dump; every field of ``Measured``,
the notes each source gives, and the one-line errors.  Written for the mutation run of both modules
(docs/testing.md)."""

from __future__ import annotations

import gzip
import json
import lzma
import shutil
import zipfile
from pathlib import Path

import polars as pl
import pytest

from profiler.analysis import instruction_times as it
from profiler.conventions import CAPTURE_RANGE, DOMAIN
from profiler.errors import InputError
from profiler.predict import roofline, schedule, tpu_trace
from profiler.predict.measured import Measured, copies_of_export, load, with_classes
from profiler.synthetic.export import ExportBuilder
from profiler.xla.hlo import parse_text
from tests.helpers.hlo_programs import SUM, program_text
from tests.helpers.measured import TID, TSL, thunk_export
from tests.helpers.paths import ROOT
from tests.helpers.recordings import Timing, record

H100 = "NVIDIA H100 80GB HBM3"
# a kernel, a loop of two kernels over three trips, a copy to the host, then two kernels
TEXT = program_text([("k",), ("while", 3, [("k",), ("k",)]), ("d2h",), ("k",)])
DUMP = "module_0007.random_step.sm_9.0_gpu_after_optimizations.txt"
CONFIG = 'gpu_device_info { threads_per_block_limit: 1024 }\ndevice_description_str: "NVIDIA H100 80GB HBM3"\n'


def _recording():
    sched = schedule.build(parse_text(TEXT))
    base = {o.name: 10_000 + 1_000 * o.index for o in sched.ops}  # a loop body's op: its last trip's index
    rec = record(sched, base, executions=3, timing=Timing(jitter=0.0, gap_ns=(500, 501)))
    return sched, base, rec


def _times_of(m: Measured) -> dict[str, tuple]:
    return {r["hlo_op"]: (r["median_ns"], r["opcode"], r["site"], r["runs"], r["op_class"])
            for r in m.times.iter_rows(named=True)}  # fmt: skip


def _expected_times(sched: schedule.Schedule, base: dict[str, int]) -> dict[str, tuple]:
    """Each instruction that launches work: its time per step (a loop body's, every trip), opcode,
    site (itself: the loop's body is expanded), runs and class; the copy of 16 KiB takes the
    recording's 2 us floor."""
    classes = roofline.op_classes(sched)
    out = {}
    for name in ("k.1", "body.2.inc", "k.5", "k.6", "cs.7", "k.9", "out"):
        runs, ns = sched.runs[name], 2_000 if name == "cs.7" else base[name]
        out[name] = (float(runs * ns), sched.instructions[name].opcode, name, runs, classes[name])
    return out


def _zip(folder: Path, to: Path, extra: dict[str, str | bytes] | None = None, prefix: str = "out/") -> Path:
    """*folder*'s files zipped under *prefix* (an archive's own folder, or none), with *extra* files."""
    with zipfile.ZipFile(to, "w") as zf:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                zf.write(p, f"{prefix}{p.relative_to(folder)}")
        for name, data in (extra or {}).items():
            zf.writestr(name, data)
    return to


def test_a_run_folder_gives_every_field(tmp_path):
    sched, base, rec = _recording()
    run = rec.write(tmp_path / "run", TEXT)
    m = load(run)
    assert (m.source, m.kind, m.module_name, m.gpu) == (run / "trace.sqlite", "nsys export", "random_step", H100)
    assert m.notes == [] and m.spec_text is None
    assert m.chosen_by == "random_step (program 7): ran 3 times, the only program that ran"
    assert _times_of(m) == _expected_times(sched, base)
    assert _times_of(m)["body.2.inc"][3] == 3 and _times_of(m)["cs.7"][4] == "copy"
    assert m.steps["duration_ns"].to_list() == [s - 6_000 for s in rec.steps]  # the GPU's span of each
    assert m.step_ns == float(rec.steps[0] - 6_000)
    assert m.copies.columns == ["cls", "bytes", "start", "end"]
    assert m.copies["cls"].to_list() == ["d2h"] * 3 and m.copies["bytes"].to_list() == [64 * 64 * 4] * 3
    assert (m.copies["end"] - m.copies["start"]).to_list() == [2_000] * 3  # 16 KiB at 25 GB/s: the 2 us floor
    assert m.module is not None and m.module.name == "random_step"
    assert m.sched is m.sched and [o.name for o in m.sched.ops] == [o.name for o in sched.ops]


def test_the_same_recording_as_an_archive_folder_and_its_zip(tmp_path):
    sched, base, rec = _recording()
    folder = rec.write_archive(tmp_path / "arch", TEXT)
    (folder / "dump" / "random_step.gpu_target_config.pbtxt.xz").write_bytes(lzma.compress(CONFIG.encode()))
    (folder / "dump" / "z.gpu_target_config.pbtxt").write_text('device_description_str: "a later one"\n')
    archive = rec.write_archive(tmp_path / "arch-plain", TEXT)
    (archive / "dump" / "random_step.gpu_target_config.pbtxt").write_text(CONFIG)
    # another program's dump and a file of the same program outside dump/: neither is its module
    other = {"nsys-jax-out/dump/module_0008.random_step.sm_9.0_gpu_after_optimizations.txt": "garbage",
             f"nsys-jax-out/sources/{DUMP}": "garbage"}  # fmt: skip
    zipped = _zip(folder, tmp_path / "arch.zip", other, prefix="nsys-jax-out/")
    note = "the archive holds no copy rows (nvtx_gpu_proj_trace has ranges only): no copy bandwidth"
    for src, spec in ((folder, CONFIG), (zipped, CONFIG), (archive, CONFIG)):
        m = load(src)
        assert (m.source, m.kind, m.module_name, m.gpu) == (src, "nsys-jax archive", "random_step", H100)
        assert m.spec_text == spec and m.notes == [note]
        assert m.copies.height == 0 and m.copies.schema == pl.Schema(
            {"cls": pl.String, "bytes": pl.Int64, "start": pl.Int64, "end": pl.Int64}
        )
        # the projection keeps the thunks directly under a step's range: the loop is its own span
        times = _times_of(m)
        assert {k: v for k, v in times.items() if k != "while.4"} == {
            k: v for k, v in _expected_times(sched, base).items() if k in ("k.1", "cs.7", "k.9", "out")
        }
        span = 3 * (base["body.2.inc"] + base["k.5"] + base["k.6"]) + 8 * 500  # 9 kernels, 8 gaps between
        assert times["while.4"] == (float(span), "while", "while.4", 1, "other")
        assert m.steps["execution"].to_list() == [0, 1, 2] and m.step_ns > 0
        assert m.chosen_by is not None and "random_step" in m.chosen_by
    bare = rec.write_archive(tmp_path / "bare", TEXT)
    m = load(bare)
    assert m.gpu is None and m.spec_text is None
    shutil.rmtree(bare / "dump")
    m = load(bare)
    assert m.module is None and m.sched is None
    assert m.notes == ["no XLA dump next to the trace: instructions are known by name only (--hlo FILE gives it)", note]


def test_a_module_asked_for_by_name_that_did_not_run_is_one_line(tmp_path):
    _, _, rec = _recording()
    folder = rec.write_archive(tmp_path / "arch", TEXT)
    zipped = _zip(folder, tmp_path / "arch.zip", prefix="")  # the archive at the zip's root
    run = rec.write(tmp_path / "run", TEXT)
    for src in (folder, zipped, run):
        with pytest.raises(InputError) as e:
            load(src, module="jit_other")
        assert "jit_other" in str(e.value) and e.value.path in (str(src), str(src / "trace.sqlite"))
        assert load(src, module="random_step").module_name == "random_step"


def test_the_sources_that_are_not_a_recording(tmp_path):
    with pytest.raises(InputError, match="no such file or folder"):
        load(tmp_path / "absent")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="holds no trace") as e:
        load(empty)
    assert e.value.path == str(empty)
    notzip = tmp_path / "notarchive.zip"
    with zipfile.ZipFile(notzip, "w") as zf:
        zf.writestr("readme.txt", "hello")
    with pytest.raises(InputError, match=r"holds no nvtx_gpu_proj_trace/trace\.parquet") as e:
        load(notzip)
    assert e.value.path == str(notzip)
    bad = tmp_path / "bad.hlo"
    bad.write_text("this is no HLO")
    _, _, rec = _recording()
    run = rec.write(tmp_path / "run", TEXT)
    with pytest.raises(InputError, match="not a readable HLO module") as e:
        load(run, hlo=bad)
    assert e.value.path == str(bad)
    hlo = tmp_path / "step.hlo"
    hlo.write_text(TEXT)
    m = load(run, hlo=hlo)
    assert m.module is not None and m.notes == []


def test_an_export_found_in_a_folder_and_its_dump_notes(tmp_path):
    sched, base, rec = _recording()
    run = rec.write(tmp_path / "run", TEXT)
    # a folder whose export has another name, and its dump: the export is read with the dump
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(run / "trace.sqlite", other / "b.sqlite")
    shutil.copy(run / "trace.sqlite", other / "c.sqlite")
    shutil.copytree(run / "xla_dump", other / "xla_dump")
    m = load(other)
    assert m.source == other / "b.sqlite" and m.notes == [] and _times_of(m) == _expected_times(sched, base)
    # trace-N.sqlite before any other name
    shutil.copy(run / "trace.sqlite", other / "trace-2.sqlite")
    assert load(other).source == other / "trace-2.sqlite"
    # the export itself: no dump beside it is looked for
    m = load(run / "trace.sqlite")
    assert m.module is None and m.spec_text is None
    assert m.notes == ["no XLA dump next to the trace: instructions are known by name only (--hlo FILE gives it)"]
    assert _times_of(m)["k.5"] == (3.0 * base["k.5"], None, "k.5", 1, "other")
    # a dump without the step's program, then one whose module cannot be read
    dump = run / "xla_dump"
    (dump / DUMP).rename(dump / "module_0009.random_step.sm_9.0_gpu_after_optimizations.txt")
    m = load(run)
    assert m.module is None
    assert m.notes == [f"no optimized module of random_step (program 7) in {dump}: instructions are known by name only"]
    (dump / DUMP).write_text("not HLO at all")
    m = load(run)
    assert m.module is None and len(m.notes) == 1
    assert m.notes[0].startswith("the optimized module could not be read: ")


def test_the_target_description_dumped_with_the_step(tmp_path):
    _, _, rec = _recording()
    run = rec.write(tmp_path / "run", TEXT)
    dump = run / "xla_dump"
    (dump / "module_0007.jit_other.gpu_target_config.pbtxt").write_text("another module's")
    assert load(run).spec_text is None
    (dump / "module_0007.random_step.gpu_target_config.pbtxt.xz").write_bytes(b"not xz")
    (dump / "module_0007.random_step.gpu_target_config.pbtxt.yz").write_text(CONFIG)
    m = load(run)
    assert m.spec_text == CONFIG and m.gpu == H100  # the GPU from the trace, the description from the dump
    (dump / "module_0007.random_step.gpu_target_config.pbtxt.xz").write_bytes(lzma.compress(b"first"))
    assert load(run).spec_text == "first"


def test_an_export_without_thunk_ranges_and_its_copies(tmp_path):
    b = thunk_export([("k.1", 10_000, "kernel", 0), ("copy-start.2", 4_000, "h2d", 1 << 20)], executions=2)
    b.copy(50_000_000, 50_010_000, "d2d", 4096)  # outside any range, and not to or from the host
    b.copy(50_020_000, 50_030_000, "d2h", 8192)  # outside any range
    path = tmp_path / "t.sqlite"
    b.write(path)
    m = load(path)
    rows = m.copies.sort("start").rows()
    assert [r[:2] for r in rows] == [("h2d", 1 << 20), ("h2d", 1 << 20), ("d2h", 8192)]
    assert [r[3] - r[2] for r in rows] == [4_000, 4_000, 10_000] and rows[2][2] == 50_020_000
    assert copies_of_export(path).sort("start")["cls"].to_list() == ["h2d", "h2d", "d2h"]
    assert copies_of_export(path).columns == ["cls", "bytes", "start", "end", "host_kind"]
    assert _times_of(m) == {"k.1": (10_000.0, None, "k.1", 1, "other"),
                            "copy-start.2": (4_000.0, None, "copy-start.2", 1, "copy")}  # fmt: skip
    bare = thunk_export([], executions=1)
    bare.kernel(10_000_000, 10_001_000, "k")
    (tmp_path / "bare").mkdir()
    bare.write(tmp_path / "bare" / "t.sqlite")
    with pytest.raises(InputError) as e:
        load(tmp_path / "bare" / "t.sqlite")
    assert e.value.path == str(tmp_path / "bare" / "t.sqlite")


FUSED = """HloModule jit_step, is_scheduled=true

%fused_mul (p0: f32[64,64], p1: f32[64,64]) -> f32[64,64] {
  %p0 = f32[64,64]{1,0} parameter(0)
  %p1 = f32[64,64]{1,0} parameter(1)
  ROOT %mul.in = f32[64,64]{1,0} multiply(%p0, %p1)
}

%fused_dot (q0: f32[64,64]) -> f32[64,64] {
  %q0 = f32[64,64]{1,0} parameter(0)
  ROOT %dot.in = f32[64,64]{1,0} dot(%q0, %q0), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (x: f32[64,64]) -> f32[64,64] {
  %x = f32[64,64]{1,0} parameter(0)
  %fusion.1 = f32[64,64]{1,0} fusion(%x, %x), kind=kLoop, calls=%fused_mul
  %fusion.2 = f32[64,64]{1,0} fusion(%fusion.1), kind=kOutput, calls=%fused_dot
  ROOT %n = f32[64,64]{1,0} negate(%fusion.2)
}
"""


def test_an_instructions_site_class_and_runs():
    """An instruction inside a fusion is its fusion's (site, class); one the module lacks is its own,
    run once, of class other; without a module the classes XLA's names suggest."""
    times = pl.DataFrame({"hlo_op": ["mul.in", "fusion.2", "n", "ghost.3"], "median_ns": [1.0, 2.0, 3.0, 4.0]})
    module = parse_text(FUSED)
    got = with_classes(times, module)
    assert got.columns == ["hlo_op", "median_ns", "opcode", "site", "runs", "op_class"]
    assert got.rows() == [
        ("mul.in", 1.0, "multiply", "fusion.1", 1, "fusion"),
        ("fusion.2", 2.0, "fusion", "fusion.2", 1, "matmul"),
        ("n", 3.0, "negate", "n", 1, "other"),
        ("ghost.3", 4.0, None, "ghost.3", 1, "other"),
    ]
    assert with_classes(times, module, schedule.build(module)).equals(got)
    names = ["fusion.3", "cublas-gemm.1", "all-reduce-start.2", "copy-start.4", "negate.5"]
    plain = with_classes(pl.DataFrame({"hlo_op": names}), None)
    guessed = pl.select(it.guess_class(pl.lit(None, pl.String), pl.Series(names))).to_series().to_list()
    assert plain.columns == ["hlo_op", "opcode", "site", "runs", "op_class"]
    assert plain.rows() == [(n, None, n, 1, g) for n, g in zip(names, guessed, strict=True)]
    assert len(set(guessed)) >= 4  # the names above are told apart
    assert plain.schema["opcode"] == pl.String and plain.schema["runs"] == pl.Int64


def test_the_median_step_and_no_schedule_without_a_module():
    steps = pl.DataFrame({"duration_ns": [100, 900, 200]})
    m = Measured(Path("x"), "nsys export", "m", None, pl.DataFrame(), steps, pl.DataFrame())
    assert m.step_ns == 200.0 and m.sched is None and m.notes == [] and m.gpu is None
    empty = Measured(Path("x"), "nsys export", "m", None, pl.DataFrame(), pl.DataFrame({"duration_ns": []}),
                     pl.DataFrame())  # fmt: skip
    assert empty.step_ns == 0.0


# --- a TPU's JAX profiler trace ----------------------------------------------------------------------

TPU_HLO = """HloModule jit_step, is_scheduled=true

ENTRY %main (x: f32[64,64]) -> f32[64,64] {
  %x = f32[64,64]{1,0} parameter(0)
  %fusion.1 = f32[64,64]{1,0} negate(%x)
  %copy-start.2 = (f32[64,64]{1,0:S(5)}, f32[64,64]{1,0}, u32[]) copy-start(%fusion.1)
  %fusion.3 = f32[64,64]{1,0} exponential(%fusion.1)
  %copy-done.2 = f32[64,64]{1,0:S(5)} copy-done(%copy-start.2)
  %fusion.4 = f32[64,64]{1,0} negate(%fusion.3)
  ROOT %fusion.5 = f32[64,64]{1,0} exponential(%fusion.4)
}
"""
HOST_T = "f32[64,64]{1,0:S(5)}"
DEV_T = "f32[64,64]{1,0}"


def _ev(name: str, cat: str, off_ps: int, dur_ps: int, tid: int = 3, long_name: str | None = None, pid: int = 3):
    args = {"device_offset_ps": str(off_ps), "device_duration_ps": str(dur_ps), "hlo_category": cat}
    if long_name:
        args["long_name"] = long_name
    return {"ph": "X", "pid": pid, "tid": tid, "ts": off_ps / 1e6, "dur": dur_ps / 1e6, "name": name, "args": args}


def _meta(pid: int, device: str) -> list[dict]:
    return [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": device}},
            *({"ph": "M", "pid": pid, "tid": t, "name": "thread_name", "args": {"name": n}}
              for t, n in ((2, "XLA Modules"), (3, "XLA Ops")))]  # fmt: skip


def _execution(t0: int, copy_wait: int, pid: int = 3) -> list[dict]:
    """jit_step at *t0* (ps): fusion.1, the copy's start, fusion.3, the copy's done (the core waits
    *copy_wait* ps), fusion.4, and a loop (20 ps of its own) around fusion.5 twice."""
    start_text = f"%copy-start.2 = ({HOST_T}, {DEV_T}, u32[]) copy-start({DEV_T} %fusion.1)"
    done_text = f"%copy-done.2 = {HOST_T} copy-done(({HOST_T}, {DEV_T}, u32[]) %copy-start.2)"
    ops = [_ev("fusion.1", "loop fusion", t0, 100_000, pid=pid),
           _ev("copy-start.2", "copy-start", t0 + 100_000, 2_000, long_name=start_text, pid=pid),
           _ev("fusion.3", "loop fusion", t0 + 102_000, 200_000, pid=pid),
           _ev("copy-done.2", "copy-done", t0 + 302_000, copy_wait, long_name=done_text, pid=pid),
           _ev("fusion.4", "loop fusion", t0 + 302_000 + copy_wait, 50_000, pid=pid)]  # fmt: skip
    w = t0 + 352_000 + copy_wait
    ops += [_ev("while.6", "while", w, 220_000, pid=pid), _ev("fusion.5", "loop fusion", w + 10_000, 100_000, pid=pid),
            _ev("fusion.5", "loop fusion", w + 110_000, 100_000, pid=pid)]  # fmt: skip
    return [_ev("jit_step(7)", "", t0, 572_000 + copy_wait, tid=2, pid=pid), *ops]


def _tpu_trace(folder: Path, events: list[dict], meta: list[dict] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "trace.json.gz"
    body = {"traceEvents": (meta if meta is not None else _meta(3, "/device:TPU:0")) + events}
    path.write_bytes(gzip.compress(json.dumps(body).encode()))
    return path


def test_a_tpu_trace_read_op_by_op(tmp_path):
    """Two executions of the step (the copy waited 30 and 50 ns), a smaller program between them, an
    op before the first program (no execution: left out); the second core's events are not read."""
    events = [_ev("fusion.0", "loop fusion", 0, 5_000), *_execution(1_000_000, 30_000),
              _ev("jit_small(3)", "", 3_000_000, 8_000, tid=2), _ev("fusion.9", "loop fusion", 3_000_000, 8_000),
              *_execution(5_000_000, 50_000), *_execution(5_000_000, 70_000, pid=4)]  # fmt: skip
    path = _tpu_trace(tmp_path / "run", events, _meta(3, "/device:TPU:0") + _meta(4, "/device:TPU:1"))
    t = tpu_trace.read(path)
    assert t.modules.rows() == [(0, "jit_step", 1_000, 1_602, 602.0), (1, "jit_small", 3_000, 3_008, 8.0),
                                (2, "jit_step", 5_000, 5_622, 622.0)]  # fmt: skip
    assert t.ops.columns == ["execution", "hlo_op", "category", "start", "end", "self_ns"]
    first = t.ops.filter(pl.col("execution") == 0)
    assert first.select("hlo_op", "start", "end", "self_ns").rows() == [
        ("fusion.1", 1_000, 1_100, 100.0), ("copy-start.2", 1_100, 1_102, 2.0), ("fusion.3", 1_102, 1_302, 200.0),
        ("copy-done.2", 1_302, 1_332, 30.0), ("fusion.4", 1_332, 1_382, 50.0), ("while.6", 1_382, 1_602, 20.0),
        ("fusion.5", 1_392, 1_492, 100.0), ("fusion.5", 1_492, 1_592, 100.0)]  # fmt: skip
    assert t.ops["execution"].unique().sort().to_list() == [0, 1, 2] and "fusion.0" not in t.ops["hlo_op"]
    nbytes = 64 * 64 * 4
    assert t.transfers.rows() == [(0, "d2h", nbytes, 1_100, 1_332, 30.0), (2, "d2h", nbytes, 5_100, 5_352, 50.0)]
    assert t.transfers.columns == ["execution", "cls", "bytes", "start", "end", "wait_ns"]
    assert t.device is None and t.path == path
    spans, execs, name = tpu_trace.spans(t)
    assert name == "jit_step" and execs["execution"].to_list() == [0, 2]
    assert spans.columns == ["execution", "hlo_op", "start", "end", "bytes"] and spans["bytes"].null_count() == 8 * 2
    assert spans.filter(pl.col("execution") == 2).select("hlo_op", "start", "end").rows()[3:6] == [
        ("copy-done.2", 5_302, 5_352), ("fusion.4", 5_352, 5_402), ("while.6", 5_402, 5_422)]  # fmt: skip
    small, small_execs, small_name = tpu_trace.spans(t, "jit_small")
    assert small_execs["execution"].to_list() == [1] and small_name == "jit_small"
    assert small.rows() == [(1, "fusion.9", 3_000, 3_008, None)]
    with pytest.raises(InputError, match=r"no execution of jit_other \(it ran jit_step, jit_small\)") as e:
        tpu_trace.spans(t, "jit_other")
    assert e.value.path == str(path)


def test_nested_loops_count_each_op_once():
    """An outer loop around an inner loop and a kernel: each loop's own time is its span less
    everything inside it, the inner loop's own time counted once."""
    ops = pl.DataFrame({
        "off": [0, 10, 20, 60, 120, 200],
        "dur": [150, 100, 30, 40, 20, 10],
        "cat": ["while", "while", "loop fusion", "loop fusion", "loop fusion", None],
    })  # fmt: skip
    # outer 0-150: inner 10-110 (own 100 - 30 - 40 = 30) and a kernel 120-140; outer's own 150 - 90 - 30 = 30
    assert tpu_trace._self_ps(ops).to_list() == [30, 30, 30, 40, 20, 10]
    lone = pl.DataFrame({"off": [0, 5], "dur": [10, 20], "cat": ["while", "fusion"]})
    assert tpu_trace._self_ps(lone).to_list() == [0, 20]  # never below zero


def test_a_tpu_run_folder_measured(tmp_path):
    run = tmp_path / "run"
    _tpu_trace(run, [*_execution(1_000_000, 30_000), *_execution(2_000_000, 50_000), *_execution(3_000_000, 40_000)])
    (run / "xla_dump").mkdir()
    (run / "xla_dump" / "module_0007.jit_step.after_optimizations.txt").write_text(TPU_HLO)
    (run / "xla_dump" / "module_0001.jit_other.after_optimizations.txt").write_text("garbage")
    (run / "manifest.json").write_text(json.dumps({"devices": [{"kind": "TPU v5 lite"}]}))
    m = load(run)
    assert (m.source, m.kind, m.module_name, m.gpu, m.spec_text) == (run, "JAX profiler trace (TPU)", "jit_step",
                                                                     "TPU v5 lite", None)  # fmt: skip
    assert m.chosen_by == "the program with the most device time in the trace (jit_step)"
    assert m.steps.columns == ["execution", "start", "end", "duration_ns"]
    assert m.steps["duration_ns"].to_list() == [602.0, 622.0, 612.0] and m.step_ns == 612.0
    assert m.copies.rows() == [("d2h", 16384, s + 100, s + 302 + w, float(w)) for s, w in
                               ((1_000, 30), (2_000, 50), (3_000, 40))]  # fmt: skip
    assert m.copies.columns == ["cls", "bytes", "start", "end", "wait_ns"]
    assert m.module is not None and m.module.name == "jit_step"
    # fusion.5 runs in the trace's loop but not in this module: its own op, of class other
    assert _times_of(m)["fusion.3"] == (200.0, "exponential", "fusion.3", 1, "other")
    assert _times_of(m)["fusion.5"][0] == 200.0 and _times_of(m)["copy-start.2"][4] == "copy"
    assert m.notes == ["a TPU core runs its ops on one serial line; an async *-done's time is the core's wait for it"]
    # the chip named by the XPlane beside the trace wins over the manifest
    (run / "host.xplane.pb").write_bytes(b"\x00\x01 device TPU v5 lite core \x02")
    assert load(run).gpu == "TPU v5 lite"
    (run / "host.xplane.pb").write_bytes(b"\x00 TPU v4 \x00")
    assert load(run / "trace.json.gz").gpu == "TPU v4"


# TPU_HLO with more ops after fusion.5 than its trace has events for: nine kernels, an all-reduce, an
# async copy to the host (its start and done) and a synchronous one
_EXTRA = [f"  %e.{i} = {DEV_T} negate(%{'fusion.5' if i == 0 else f'e.{i - 1}'})" for i in range(9)] + [
    f"  %ar.20 = {DEV_T} all-reduce(%e.8), replica_groups={{}}, to_apply=%sum",
    f"  %cs.21 = ({HOST_T}, {DEV_T}, u32[]) copy-start(%ar.20)",
    f"  %cd.22 = {HOST_T} copy-done(%cs.21)",
    f"  ROOT %c.23 = {HOST_T} copy(%ar.20)",
]
UNTIMED_HLO = (
    TPU_HLO.replace("ROOT %fusion.5", "%fusion.5")
    .replace("\n}\n", "\n" + "\n".join(_EXTRA) + "\n}\n")
    .replace("ENTRY", SUM + "\n\nENTRY")
)


def test_a_tpu_trace_without_its_module_or_a_timed_op(tmp_path):
    run = tmp_path / "run"
    _tpu_trace(run, _execution(1_000_000, 30_000))
    m = load(run)
    assert m.module is None and m.gpu is None
    assert m.notes == [
        f"no optimized module of jit_step in {run}/{{xla_dump,dump}}: instructions known by name only",
        "a TPU core runs its ops on one serial line; an async *-done's time is the core's wait for it",
    ]
    (run / "dump").mkdir()
    (run / "dump" / "module_0007.jit_step.after_optimizations.txt").write_text(UNTIMED_HLO)
    m = load(run)
    assert m.module is not None
    # the core's kernels, copies, starts and collectives without an event: twelve, the first eight named
    assert m.notes[1] == (
        "12 ops of the program have no event in the trace (0 ns): ar.20, c.23, cs.21, e.0, e.1, e.2, e.3, e.4"
    )
    (run / "dump" / "module_0007.jit_step.after_optimizations.txt").write_text("broken")
    m = load(run)
    assert m.module is None and m.notes[0].startswith("the optimized module could not be read: ")


def test_a_trace_that_is_no_tpus(tmp_path):
    gpu = _tpu_trace(tmp_path / "g", _execution(0, 1_000), _meta(3, "/device:GPU:0"))
    with pytest.raises(InputError, match="names no TPU device process") as e:
        tpu_trace.read(gpu)
    assert e.value.path == str(gpu)
    quiet = _tpu_trace(tmp_path / "q", [e for e in _execution(0, 1_000) if e["tid"] == 3])
    with pytest.raises(InputError, match="has no XLA Modules events on its TPU") as e:
        tpu_trace.read(quiet)
    assert e.value.path == str(quiet)


# --- what the survivors of the first mutation run asked for ------------------------------------------

BAD_UTF8 = CONFIG.encode() + b"# \xff\n"  # a byte that is no UTF-8: replaced, never an error


def test_target_descriptions_that_are_not_utf8_and_plain_ones_in_a_zip(tmp_path):
    _, _, rec = _recording()
    want = BAD_UTF8.decode("utf-8", "replace")
    folder = rec.write_archive(tmp_path / "arch", TEXT)
    (folder / "dump" / "random_step.gpu_target_config.pbtxt").write_bytes(BAD_UTF8)
    assert load(folder).spec_text == want and load(folder).gpu == H100
    plain = _zip(folder, tmp_path / "plain.zip")  # a plain (not .xz) description in the zip
    assert load(plain).spec_text == want and load(plain).gpu == H100
    (folder / "dump" / "random_step.gpu_target_config.pbtxt").unlink()
    none = _zip(folder, tmp_path / "none.zip")
    assert load(none).spec_text is None and load(none).gpu is None
    run = rec.write(tmp_path / "run", TEXT)
    (run / "xla_dump" / "module_0007.random_step.gpu_target_config.pbtxt").write_bytes(BAD_UTF8)
    assert load(run).spec_text == want


def test_an_hlo_file_given_wins_over_every_sources_dump(tmp_path):
    """``--hlo FILE``: the module read from the file, whatever the source holds (its name tells)."""
    _, _, rec = _recording()
    hlo = tmp_path / "given.hlo"
    hlo.write_text(TEXT.replace("HloModule random_step", "HloModule given_step"))
    folder = rec.write_archive(tmp_path / "arch", TEXT)
    run = rec.write(tmp_path / "run", TEXT)
    tpu = tmp_path / "tpu"
    _tpu_trace(tpu, _execution(1_000_000, 30_000))
    for src in (folder, _zip(folder, tmp_path / "arch.zip"), run, run / "trace.sqlite", tpu):
        m = load(src, hlo=hlo)
        assert m.module is not None and m.module.name == "given_step", src
        assert not any("known by name only" in n for n in m.notes), src


def test_a_zip_that_cannot_be_read_is_one_line(tmp_path):
    _, _, rec = _recording()
    good = _zip(rec.write_archive(tmp_path / "arch", TEXT), tmp_path / "good.zip")
    data = bytearray(good.read_bytes())
    at = data.index(b"PAR1") + 8  # inside the projection's compressed bytes: its CRC no longer holds
    data[at : at + 16] = bytes(16)
    bad = tmp_path / "bad.zip"
    bad.write_bytes(bytes(data))
    with pytest.raises(InputError) as e:
        load(bad)
    assert e.value.path == str(bad) and str(e.value).startswith(f"{bad}: cannot be read as a zip archive (")


def _two_programs(folder: Path, compiled: dict | None = None, manifest: dict | None = None, name: str = "trace"):
    """An export of two programs: jit_step (program 7) three times with 50 us kernels, then jit_sched
    (program 9) five times with 2 us ones; each execution one thunk range and its kernel."""
    b = ExportBuilder()
    b.gpu(0, H100)
    b.domain(TSL, "TSL", tid=TID)
    t = 1_000_000
    for module, pid, n, ns in (("jit_step", 7, 3, 50_000), ("jit_sched", 9, 5, 2_000)):
        for _ in range(n):
            gpu = t + 5_000
            b.nvtx(t, t + 100, f"Thunk:#name=x,hlo_op=k.{pid}#", tid=TID, domain_id=TSL)
            b.runtime(t + 10, t + 20, b.kernel(gpu, gpu + ns, f"k_{pid}"), name="cuLaunchKernel", tid=TID)
            b.nvtx(t, gpu + ns + 10, f"XlaModule:#hlo_module={module},program_id={pid}#", tid=TID, domain_id=TSL)
            t = gpu + ns + 100_000
    folder.mkdir(exist_ok=True)
    b.write(folder / f"{name}.sqlite")
    if compiled is not None:
        (folder / "compiled.json").write_text(json.dumps(compiled))
    if manifest is not None:
        (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_which_program_of_an_export_is_the_step(tmp_path):
    """By GPU time; the one the script handed over (compiled.json); the one with the most work by its
    cost analysis; the one asked for by name, in a folder and in a bare export."""
    most_time = load(_two_programs(tmp_path / "a"))
    assert most_time.module_name == "jit_step" and most_time.steps.height == 3
    handed = load(_two_programs(tmp_path / "b", {"handed_over": {"module": "jit_sched"}}))
    assert handed.module_name == "jit_sched" and "handed to annotate.compiled_step" in (handed.chosen_by or "")
    cost = {"modules": [{"name": "jit_sched", "id": 9, "cost": {"flops": 1e15}},
                        {"name": "jit_step", "id": 7, "cost": {"flops": 1e3}}]}  # fmt: skip
    work = load(_two_programs(tmp_path / "c", cost))
    assert work.module_name == "jit_sched" and "the most work (5.00 PFLOP in all)" in (work.chosen_by or "")
    for src in (tmp_path / "a", tmp_path / "a" / "trace.sqlite"):
        asked = load(src, module="jit_sched")
        assert asked.module_name == "jit_sched" and asked.steps.height == 5
        with pytest.raises(InputError):
            load(src, module="jit_other")


def test_the_export_a_folders_manifest_names_and_a_folder_without_a_dump(tmp_path):
    folder = _two_programs(tmp_path / "m", manifest={"files": {"sqlite": "named.sqlite"}}, name="named")
    _two_programs(folder, name="a")  # sorts first, but the manifest names the other
    m = load(folder)
    assert m.source == folder / "named.sqlite"
    assert m.notes == ["no XLA dump next to the trace: instructions are known by name only (--hlo FILE gives it)"]


def test_an_export_that_names_no_gpu_and_one_without_thunk_ranges(tmp_path):
    folder = _two_programs(tmp_path / "g")
    import sqlite3

    with sqlite3.connect(folder / "trace.sqlite") as db:
        db.execute("DELETE FROM TARGET_INFO_GPU")
    assert load(folder).gpu is None
    b = ExportBuilder()
    b.gpu(0, H100)
    b.domain(TSL, "TSL", tid=TID)
    b.runtime(1_010, 1_020, b.kernel(6_000, 9_000, "k"), name="cuLaunchKernel", tid=TID)
    b.nvtx(1_000, 10_000, "XlaModule:#hlo_module=jit_step,program_id=7#", tid=TID, domain_id=TSL)
    path = tmp_path / "nothunk.sqlite"
    b.write(path)
    with pytest.raises(InputError) as e:
        load(path)
    assert str(e.value) == (
        f"{path}: no GPU work under XLA thunk ranges (Thunk:#...hlo_op=...#) in jit_step (program 7)"
    )


def test_the_one_line_errors_say_their_path_and_problem(tmp_path):
    with pytest.raises(InputError) as e:
        load(tmp_path / "absent")
    assert str(e.value) == f"{tmp_path / 'absent'}: no such file or folder"
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError) as e:
        load(tmp_path / "empty")
    assert str(e.value) == (
        f"{tmp_path / 'empty'}: holds no trace (nsys export or report, JAX profiler trace) and no nsys-jax archive"
    )
    gpu = _tpu_trace(tmp_path / "g", _execution(0, 1_000), _meta(3, "/device:GPU:0"))
    with pytest.raises(InputError) as e:
        tpu_trace.read(gpu)
    assert str(e.value) == f"{gpu}: names no TPU device process (/device:TPU:N): not a TPU trace"
    quiet = _tpu_trace(tmp_path / "q", [e for e in _execution(0, 1_000) if e["tid"] == 3])
    with pytest.raises(InputError) as e:
        tpu_trace.read(quiet)
    assert str(e.value) == f"{quiet}: has no XLA Modules events on its TPU: no program execution to read"


def test_a_tpu_folder_its_trace_file_a_chosen_program_and_another_modules_dump(tmp_path):
    run = tmp_path / "run"
    events = [*_execution(1_000_000, 30_000), _ev("jit_small(3)", "", 3_000_000, 8_000, tid=2),
              _ev("fusion.9", "loop fusion", 3_000_000, 8_000), *_execution(5_000_000, 50_000)]  # fmt: skip
    _tpu_trace(run, events)
    (run / "xla_dump").mkdir()
    (run / "xla_dump" / "module_0007.jit_step.after_optimizations.txt").write_text(TPU_HLO)
    (run / "xla_dump" / "module_0009.jit_zzz.after_optimizations.txt").write_text("garbage")  # sorts last
    for src in (run, run / "trace.json.gz"):
        m = load(src)
        assert m.module is not None and m.module.name == "jit_step" and m.source == src
    small = load(run, module="jit_small")
    assert small.module_name == "jit_small" and small.steps["duration_ns"].to_list() == [8.0]


def test_a_tpu_trace_read_from_its_lowest_core_with_integer_times(tmp_path):
    """The core of the lowest ordinal, whatever its process id; times in whole ns (ps // 1000); an op
    without a duration takes none; the chip from the first XPlane that reads."""
    events = [*_execution(1_000_500, 30_000, pid=4), _ev("fusion.8", "loop fusion", 1_700_500, 0, pid=4)]
    del events[-1]["args"]["device_duration_ps"]
    events += _execution(9_000_000, 10_000, pid=3)  # TPU:1's
    path = _tpu_trace(tmp_path / "run", events, _meta(3, "/device:TPU:1") + _meta(4, "/device:TPU:0"))
    (tmp_path / "run" / "a.xplane.pb").mkdir()  # unreadable as a file: passed over
    (tmp_path / "run" / "b.xplane.pb").write_bytes(b"\x00 TPU v5e \x00")
    t = tpu_trace.read(path)
    assert t.device == "TPU v5e"
    assert t.modules.rows() == [(0, "jit_step", 1_000, 1_602, 602.0)]  # 1_000.5 and 1_602.5 ns, floored
    assert t.modules.schema == pl.Schema({"execution": pl.Int64, "name": pl.String, "start": pl.Int64,
                                          "end": pl.Int64, "duration_ns": pl.Float64})  # fmt: skip
    assert t.ops.schema["start"] == pl.Int64 and t.ops.schema["end"] == pl.Int64
    assert t.ops.filter(pl.col("hlo_op") == "fusion.8").select("start", "end", "self_ns").rows() == [
        (1_700, 1_700, 0.0)
    ]
    assert t.ops["start"].to_list()[:2] == [1_000, 1_100]
    spans = tpu_trace.spans(t)[0]
    assert spans.schema["bytes"] == pl.Int64 and spans.schema["end"] == pl.Int64


def test_loops_that_end_where_the_next_op_starts():
    """An op that starts where a loop ends is not inside it (nor is a loop that starts there); own
    times stay integers."""
    ops = pl.DataFrame({
        "off": [0, 10, 20, 60, 110, 150],
        "dur": [150, 100, 30, 40, 30, 10],
        "cat": ["while", "while", "fusion", "fusion", "fusion", "while"],
    })  # fmt: skip
    own = tpu_trace._self_ps(ops)
    # inner [10, 110): 100 - 30 - 40; outer [0, 150): 150 - 100 (the three kernels) - 30; the last: 10
    assert own.to_list() == [20, 30, 30, 40, 30, 10] and own.dtype == pl.Int64


def test_with_classes_keeps_a_row_without_a_name_and_an_empty_frame():
    module = parse_text(FUSED)
    times = pl.DataFrame({"hlo_op": ["n", None]}, schema={"hlo_op": pl.String})
    got = with_classes(times, module)
    assert got.rows() == [("n", "negate", "n", 1, "other"), (None, None, None, 1, "other")]
    empty = with_classes(pl.DataFrame(schema={"hlo_op": pl.String}), module)
    assert empty.height == 0 and empty.schema == pl.Schema(
        {"hlo_op": pl.String, "opcode": pl.String, "site": pl.String, "runs": pl.Int64, "op_class": pl.String}
    )


def test_a_gpus_jax_profiler_trace_is_named_so():
    """The example's H200 run (jax.profiler, converted to an export): its kind, trace and description."""
    run = next((ROOT / "sample_traces" / "h200-example").glob("*-offload_mlp-??????"))
    m = load(run)
    assert (m.kind, m.source, m.module_name, m.gpu) == ("JAX profiler trace", run / "trace.json.gz", "jit_step",
                                                        "NVIDIA H200")  # fmt: skip
    assert m.spec_text is not None and 'device_description_str: "NVIDIA H200"' in m.spec_text


def test_a_capture_that_ends_inside_a_step_closes_it_at_the_last_gpu_op(tmp_path):
    """The last module range has no end (the capture stopped first): it ends where its GPU work does."""
    b = ExportBuilder()
    b.gpu(0, H100)
    b.domain(TSL, "TSL", tid=TID)
    t = 1_000_000
    for k in range(3):
        gpu = t + 5_000
        b.nvtx(t, t + 100, "Thunk:#name=x,hlo_op=k.1#", tid=TID, domain_id=TSL)
        b.runtime(t + 10, t + 20, b.kernel(gpu, gpu + 50_000, "k"), name="cuLaunchKernel", tid=TID)
        end = None if k == 2 else gpu + 50_010
        b.nvtx(t, end, "XlaModule:#hlo_module=jit_step,program_id=7#", tid=TID, domain_id=TSL)
        t = gpu + 150_000
    b.write(tmp_path / "t.sqlite")
    m = load(tmp_path / "t.sqlite")
    assert m.steps["end"].to_list() == [1_055_010, 1_210_010, 1_365_000]
    assert m.steps["duration_ns"].to_list() == [50_000] * 3


def test_a_description_that_names_no_gpu(tmp_path):
    _, _, rec = _recording()
    folder = rec.write_archive(tmp_path / "arch", TEXT)
    (folder / "dump" / "random_step.gpu_target_config.pbtxt").write_text("gpu_device_info { core_count: 132 }\n")
    m = load(folder)
    assert m.spec_text == "gpu_device_info { core_count: 132 }\n" and m.gpu is None


def test_a_zip_of_two_programs_reads_the_one_asked_for(tmp_path):
    """random_step's program ran three times, other_step's five (the default); asked for by name, the zip
    gives random_step's executions and its own module from the dump (only its files are taken out)."""
    _, base, rec = _recording()
    other_text = TEXT.replace("HloModule random_step", "HloModule other_step")
    other = record(schedule.build(parse_text(other_text)), base, executions=5, program_id=8,
                   timing=Timing(jitter=0.0, gap_ns=(500, 501)))  # fmt: skip
    folder = rec.write_archive(tmp_path / "arch", TEXT)
    (folder / "dump" / other._dump_name()).write_text(other_text)
    a, o = rec.projection(), other.projection()
    shift = int(a["Projected Start"].max() + a["Projected Duration"].max()) + 10_000_000
    ids = int(a["RangeId"].max()) + 1
    o = o.with_columns(pl.col("Projected Start") + shift, pl.col("Orig Start") + shift, pl.col("RangeId") + ids,
                       pl.col("ParentId") + ids)  # fmt: skip
    pl.concat([a, o]).write_parquet(folder / "nvtx_gpu_proj_trace" / "trace.parquet")
    zipped = _zip(folder, tmp_path / "two.zip")
    assert load(zipped).module_name == "other_step"
    for src in (folder, zipped):
        m = load(src, module="random_step")
        assert m.module_name == "random_step" and m.steps.height == 3
        assert m.module is not None and m.module.name == "random_step" and m.notes[0].startswith("the archive")


def test_every_copy_of_an_export_whatever_its_capture_window(tmp_path):
    """``copies_of_export`` reads the whole recording: a copy before the script's capture range counts,
    where the analysis window (``load``'s) leaves it out."""
    b = thunk_export([("k.1", 10_000, "kernel", 0), ("copy-start.2", 4_000, "d2h", 1 << 20)], executions=2)
    b.domain(1, DOMAIN, tid=TID)
    b.nvtx(900_000, 2_000_000_000, CAPTURE_RANGE, tid=TID, domain_id=1)
    b.copy(100_000, 110_000, "h2d", 4096)  # before the capture range
    path = tmp_path / "t.sqlite"
    b.write(path)
    every = copies_of_export(path)
    assert every.sort("start")["start"].to_list()[0] == 100_000 and every.height == 3
    assert load(path).copies.height == 2 and 100_000 not in load(path).copies["start"].to_list()


def test_an_export_without_gpu_work_is_one_line(tmp_path):
    b = ExportBuilder()
    b.gpu(0, H100)
    b.domain(TSL, "TSL", tid=TID)
    b.nvtx(1_000, 1_100, "Thunk:#name=x,hlo_op=k.1#", tid=TID, domain_id=TSL)
    b.nvtx(1_000, 10_000, "XlaModule:#hlo_module=jit_step,program_id=7#", tid=TID, domain_id=TSL)
    path = tmp_path / "idle.sqlite"
    b.write(path)
    with pytest.raises(InputError) as e:
        load(path)
    assert e.value.path == str(path)
