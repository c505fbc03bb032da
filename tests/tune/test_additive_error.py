"""benchmarks/additive_error.py, the screen's error figure in docs/tune.md: pairs one change apart are
predicted with the search's own ``additive_step`` from a tune document's rows."""

from __future__ import annotations

import json

from benchmarks.additive_error import main, pairs


def row(label: str, stage: str, a: str, b: str, step: int, fits: bool = True) -> dict:
    return {"label": label, "stage": stage, "placements": {"a": a, "b": b}, "predicted_step_ns": step, "fits": fits}


DOC = {
    "candidates": [
        row("recompute all", "bounds", "remat", "remat", 100),
        row("keep a", "alone", "device", "remat", 90),
        row("keep b", "alone", "remat", "device", 95),
        row("offload b", "alone", "remat", "offload", 97),
        row("keep all", "bounds", "device", "device", 80),  # 5 better than the effects added (85)
        row("keep a; offload b", "one change", "device", "offload", 87),  # exactly added
        row("offload all", "bounds", "offload", "offload", 70, fits=False),  # not fitting: left out
    ],
    "presets": [],
}


def test_pairs_one_change_apart_are_predicted_as_the_screen_does():
    got = {(a, b): (pred, real) for a, b, pred, real in pairs(DOC)}
    # from keep all to keep a; offload b: 80 + (97 - 100) - (95 - 100) = 82 against 87
    assert got[("keep all", "keep a; offload b")] == (82, 87)
    assert got[("keep a; offload b", "keep all")] == (85, 80)
    # alone against alone or the resting one: exact by construction, not counted
    assert not any({a, b} <= {"recompute all", "keep a", "keep b", "offload b"} for a, b in got)
    with_paths = pairs(DOC, paths=True)
    assert ("(resting, added)", "keep all", 85, 80) in with_paths


def test_the_command_prints_the_quantiles(tmp_path, capsys):
    f = tmp_path / "t" / "tune.json"
    f.parent.mkdir()
    f.write_text(json.dumps(DOC))
    assert main([str(f)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("10 pairs: median ") and last.endswith("largest 6.25%")  # (85 - 80) / 80
