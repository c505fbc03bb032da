"""tune's record of compiles (profiler.tune.record) on real files: kept, found again, a broken entry a miss."""

from __future__ import annotations

import json
from pathlib import Path

from profiler.cache_dir import KINDS, cache_dir
from profiler.tune.candidate import Candidate
from profiler.tune.record import Record, step_key

SPEC = "gpu_device_info { threads_per_block_limit: 1024 }\n"


def _answer(tmp: Path, text: str = "HloModule jit_step\n") -> dict:
    where = tmp / "c001"
    where.mkdir(parents=True)
    (where / "step.hlo.txt").write_text(text)
    hlo = str(where / "step.hlo.txt")
    return {"ok": True, "module": "jit_step", "memory": {"temp_size_in_bytes": 5}, "hlo_file": hlo,
            "seconds": 1.5, "checkpoints": 2, "notes": []}  # fmt: skip


def test_the_record_is_the_caches_tune_folder(monkeypatch, tmp_path):
    """One owner of the cache folder (profiler/cache_dir.py): the record is its ``tune`` sub-folder,
    which ``profile-step cache --clear`` empties with the others."""
    monkeypatch.setenv("PROFILE_STEP_CACHE", str(tmp_path / "c"))
    assert cache_dir("tune") == tmp_path / "c" / "tune"
    monkeypatch.delenv("PROFILE_STEP_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_dir("tune") == tmp_path / "x" / "profile-step" / "tune"
    assert "tune" in KINDS


def test_the_key_is_the_step_the_target_the_flags_and_jax(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    key = step_key("f" * 64, SPEC, {}, "0.8.1")
    assert key == step_key("f" * 64, SPEC, {}, "0.8.1")
    others = [
        step_key("e" * 64, SPEC, {}, "0.8.1"),
        step_key("f" * 64, SPEC + " ", {}, "0.8.1"),
        step_key("f" * 64, SPEC, {"xla_gpu_enable_latency_hiding_scheduler": True}, "0.8.1"),
        step_key("f" * 64, SPEC, {}, "0.9.0"),
    ]
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_enable_pipelined_host_offloading=true")
    others.append(step_key("f" * 64, SPEC, {}, "0.8.1"))
    assert len({key, *others}) == 6


def test_a_compile_kept_is_found_again_its_hlo_copied(tmp_path):
    rec = Record(tmp_path / "cache", "k1")
    c = Candidate.of({"a": "offload", "b": "remat"})
    assert not rec.has(c) and rec.get(c, tmp_path / "r001") is None
    rec.put(c, _answer(tmp_path / "run"))
    assert rec.has(c) and rec.stored == 1
    got = Record(tmp_path / "cache", "k1").get(c, tmp_path / "out" / "r001")
    assert got is not None and got["ok"] and got["module"] == "jit_step" and got["memory"] == {"temp_size_in_bytes": 5}
    assert Path(got["hlo_file"]) == tmp_path / "out" / "r001" / "step.hlo.txt"
    assert Path(got["hlo_file"]).read_text() == "HloModule jit_step\n"
    assert Record(tmp_path / "cache", "k2").get(c, tmp_path / "r002") is None  # another step
    assert rec.get(Candidate.of({"a": "device", "b": "remat"}), tmp_path / "r003") is None  # another placement


def test_failed_compiles_are_not_kept_and_a_broken_entry_is_a_miss(tmp_path):
    rec = Record(tmp_path / "cache", "k1")
    c = Candidate.of({"a": "offload"})
    rec.put(c, {"ok": False, "error": "RESOURCE_EXHAUSTED"})
    assert not rec.has(c) and rec.stored == 0
    rec.put(c, _answer(tmp_path / "run"))
    entry = next(p for p in rec.folder.iterdir() if p.is_dir())
    (entry / "answer.json").write_text("{not json")
    assert rec.get(c, tmp_path / "r001") is None
    (entry / "answer.json").write_text(json.dumps({"policy": {"saved": ["x"], "offloaded": []}}))
    assert rec.get(c, tmp_path / "r002") is None  # kept for another policy: not this one's
    (entry / "step.hlo.txt").unlink()
    assert rec.get(c, tmp_path / "r003") is None


def test_choices_become_the_next_searchs_seeds(tmp_path):
    rec = Record(tmp_path / "cache", "k1")
    assert rec.choices() == [] and rec.seeds() == []
    slow = Candidate.of({"a": "remat", "b": "device"})
    rec.remember(slow, "pcie5", 63.0, 3 << 30)
    rec.remember(slow, "pcie5", 63.0, 3 << 30)  # once
    rec.remember(Candidate.jax("dots_saveable"), "pcie5", 63.0, 3 << 30)  # a JAX preset is no seed
    rec.remember(slow, "nvlink-c2c", 450.0, 3 << 30)
    assert [r["link"] for r in rec.choices()] == ["pcie5", "nvlink-c2c"]
    assert rec.seeds() == [slow]
    (rec.folder / "choices.json").write_text('[1, {"placements": {"a": "nowhere"}}]')
    assert rec.seeds() == []
