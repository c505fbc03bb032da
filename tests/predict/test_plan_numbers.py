"""The plan's numbers add up: the target's real memory, host memory held at once against bytes sent
to host per step (cross-checked against the plan's own schedule), offloads scheduled late.

The compile test uses the real GPU compiler in .venv-aot (skips without it, as test_compiled_step).
"""

from __future__ import annotations

import json
import re

from profiler.analysis.policies import plan_table
from profiler.report.policies_text import plan_notes, render_plan
from profiler.xla.hlo import parse_text
from profiler.xla.plan import host_live_peak, late_d2h, offload_plan
from profiler.xla.targets import TARGETS, memory_of

MiB = 2**20


def test_targets_have_their_real_capacity():
    """nvidia-smi's totals, not decimal gigabytes: an H100 80GB has 81,559 MiB."""
    assert TARGETS["h100"].memory_bytes == 85_520_809_984 == 81_559 * MiB
    assert memory_of(TARGETS["h100"].spec_text()) == 85_520_809_984
    assert {k: t.memory_bytes // MiB for k, t in TARGETS.items()} == {
        "h100": 81_559,
        "h200": 143_771,
        "b200": 183_359,
        "a100": 81_920,
    }


def mv(direction: str, name: str, pos: int, nbytes: int, back: str | None = None, comp: str = "main") -> dict:
    return {"direction": direction, "instruction": name, "position": pos, "bytes": nbytes, "brings_back": back,
            "computation": comp}  # fmt: skip


def test_host_live_peak_and_late_copies():
    """Two layers' copies that never overlap in host memory: the peak is one layer's; the second
    layer's copy, after the first copy back, is late."""
    moves = [
        mv("d2h", "a", 10, 3 * MiB),
        mv("h2d", "a_back", 20, 3 * MiB, back="a"),
        mv("d2h", "b", 30, 3 * MiB),
        mv("h2d", "b_back", 40, 3 * MiB, back="b"),
    ]
    assert host_live_peak(moves, "main") == 3 * MiB
    assert late_d2h(moves, "main") == {"late": 1, "late_bytes": 3 * MiB, "of": 2}
    together = [mv("d2h", "a", 10, MiB), mv("d2h", "b", 11, 2 * MiB), mv("h2d", "x", 40, MiB, back="b"),
                mv("h2d", "y", 41, MiB, back="a")]  # fmt: skip
    assert host_live_peak(together, "main") == 3 * MiB and late_d2h(together, "main")["late"] == 0
    assert host_live_peak([mv("d2h", "a", 1, MiB, comp="body")], "main") is None  # inside a loop: XLA knows
    assert host_live_peak([], "main") == 0


def test_plan_notes_explain_host_against_sent():
    row = {"host_bytes": 384 * MiB, "planned_d2h_bytes_per_step": 3 * 2**30, "host_live_peak_bytes": 384 * MiB,
           "late_d2h": {"late": 21, "late_bytes": 21 * 128 * MiB, "of": 24}}  # fmt: skip
    notes = plan_notes(row)
    assert notes[0].startswith("host 384.00 MiB against 3.00 GiB sent to host per step: at most 384.00 MiB")
    assert "(the plan's schedule gives 384.00 MiB, the same)" in notes[0]
    assert notes[1].startswith("XLA scheduled 21 of 24 device-to-host copies (2.62 GiB) after the first copy back")
    assert plan_notes({**row, "host_bytes": 3 * 2**30, "late_d2h": None}) == []


def test_the_terminals_plan_folds_those_notes_into_a_line_each():
    """Three offload policies at two batches made twelve note lines: one line per kind, a figure per compile."""
    from profiler.report.policies_text import grouped_plan_notes

    def row(policy, batch, host, sent, late, of):
        late_d2h = {"late": late, "late_bytes": late * 128 * MiB, "of": of}
        return {"policy": policy, "batch": batch, "notes": [], "host_bytes": host, "planned_d2h_bytes_per_step": sent,
                "host_live_peak_bytes": host, "late_d2h": late_d2h}  # fmt: skip

    rows = [row("offload_qkv", 4, 128 * MiB, 768 * MiB, 20, 24), row("offload_qkv", 16, 384 * MiB, 3 * 2**30, 21, 24),
            row("offload_mlp", 4, 256 * MiB, 2**30, 0, 8), {"policy": "remat", "batch": 4, "notes": ["x"]}]  # fmt: skip
    reuse, late = grouped_plan_notes(rows)[1:]
    assert grouped_plan_notes(rows)[0] == "note: remat batch 4: x"
    assert reuse.endswith(
        "offload_qkv batch 4 128.00 MiB of 768.00 MiB, batch 16 384.00 MiB of 3.00 GiB; offload_mlp batch 4 256.00 MiB "
        "of 1.00 GiB"
    )
    assert "so offloading lowers the device peak less than it moves" in late
    assert late.endswith("offload_qkv batch 4 20 of 24 (2.50 GiB), batch 16 21 of 24 (2.62 GiB)")  # mlp: none late


def test_plan_of_offload_qkv_adds_up(qkv_plan):
    """The real GPU compiler: host memory from memory_analysis() equals the most the plan's schedule holds in
    host memory at once; the bytes sent are every layer's q, k and v; the header shows the real capacity."""
    printed, out = qkv_plan  # 2 layers, d_model 256, sequence 512, batch 8
    (row,) = printed["plan"]["rows"]
    one = 8 * 512 * 256 * 4  # batch x sequence x d_model x float32: one projection
    assert row["planned_d2h_bytes_per_step"] == 2 * 3 * one
    assert row["host_bytes"] == row["host_live_peak_bytes"] > 0  # XLA's buffer assignment = the schedule's peak
    assert row["host_bytes"] <= row["planned_d2h_bytes_per_step"]
    plan = offload_plan(parse_text((out / "offload_qkv-b8" / "step.hlo.txt").read_text()))
    assert plan["host_live_peak_bytes"] == row["host_bytes"]
    doc = json.loads((out / "plan.json").read_text())
    assert doc["target"]["memory_bytes"] == 85_520_809_984
    # the compile asked XLA for its own estimates, and the prediction took them for the GEMMs
    (pred,) = printed["plan"]["predictions"]
    assert pred["cost_model"] == "xla"
    module = parse_text((out / "offload_qkv-b8" / "step.hlo.txt").read_text())
    gemms = [i for i in module.instructions() if i.xla_us.get("sol") and "dot_general" in (i.op_name or "")]
    assert gemms
    text = render_plan(plan_table(doc))
    assert "device memory 79.65 GiB (81,559 MiB); usable 59.74 GiB" in text
    assert "the most memory one step holds at once" in text
    if row["host_bytes"] < row["planned_d2h_bytes_per_step"]:
        (said,) = [line for line in text.splitlines() if line.startswith("note: host memory under what is sent")]
        assert re.search(r": offload_qkv batch 8 [\d.]+ [KMG]iB of [\d.]+ [KMG]iB$", said)


def test_plan_marks_policies_that_compiled_the_same_step():
    def res(policy: str, batch: int, fp: str) -> dict:
        return {"policy": policy, "batch": batch, "status": "ok", "compiled": {"module": "jit_step"},
                "plan": None, "fingerprint": fp, "notes": []}  # fmt: skip

    doc = {
        "label": "compiled for X, not measured",
        "target": {"memory_bytes": 81_559 * MiB},
        "results": [res("none", 4, "a"), res("offload", 4, "a"), res("none", 8, "b"), res("offload", 8, "c")],
    }
    tab = plan_table(doc)
    assert tab["same_hlo"] == [{"fingerprint": "a", "policies": ["none", "offload"], "cpu": False, "batch": 4}]
    text = render_plan(tab)
    assert "note: offload batch 4: the same compiled step as none (HLO fingerprint a)" in text
    assert "batch 8: the same compiled step" not in text


def test_plan_says_a_note_every_compile_has_once():
    """MaxText's plan of three policies: how the step was found is one note, not three; a note of one
    compile still names it."""
    found = "the script handed no step to annotate.compiled_step(): the step is train_step"

    def res(policy: str, notes: list[str]) -> dict:
        return {"policy": policy, "batch": None, "status": "ok", "compiled": {"module": "jit_train_step"},
                "plan": None, "fingerprint": policy, "notes": notes}  # fmt: skip

    doc = {
        "label": "compiled for X, not measured",
        "target": {"memory_bytes": 81_559 * MiB},
        "results": [res("full", [found]), res("minimal", [found, "only mine"]), res("minimal_offloaded", [found])],
    }
    text = render_plan(plan_table(doc))
    assert text.count(found) == 1 and f"note: every compile: {found}" in text
    assert "note: minimal: only mine" in text
    doc["results"][2]["notes"] = []
    assert f"note: full, minimal: {found}" in render_plan(plan_table(doc))
