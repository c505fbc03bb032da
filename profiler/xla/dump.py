"""XLA dump folders (``--xla_dump_to``): which modules they hold, and pruning a dump that
profile-step asked for down to what the analysis reads (which program is the step:
``profiler.xla.step_program``).

File names are ``module_<id>.<name>.<stage>`` where ``<id>`` is the
``program_id`` that XLA's ``XlaModule`` NVTX ranges carry and ``<stage>`` is
``before_optimizations`` or ``[<platform>_]after_optimizations`` (``cpu_``,
``sm_9.0a_gpu_``), with ``.txt`` or ``.hlo.pb`` (possibly ``.xz``), plus the
after-optimization ``-buffer-assignment.txt`` and ``-memory-usage-report.txt``.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

_FILE = re.compile(
    r"^module_(\d+)\.(.+?)\.((?:[\w.]+_)?after_optimizations|before_optimizations)"
    r"(-buffer-assignment|-memory-usage-report)?\.(txt|hlo\.pb|pb)(\.xz)?$"
)
# the GPU target description XLA compiled for (what profiler.predict prices the step on)
_TARGET_FILE = re.compile(r"^module_(\d+)\.(.+?)\.gpu_target_config\.pbtxt(\.xz)?$")
KEEP_PER_MODULE = ("after", "after_proto", "buffers", "memory_report", "target")
CANDIDATES = 3  # the largest after-optimization modules kept when the step is not known by name


@dataclass
class DumpModule:
    id: int
    name: str
    files: dict[str, Path] = field(default_factory=dict)  # after, after_proto, buffers, memory_report, before, target

    @property
    def size(self) -> int:
        """Bytes of the after-optimization module (text or proto): how large the program is."""
        for key in ("after", "after_proto"):
            if key in self.files:
                try:
                    return self.files[key].stat().st_size
                except OSError:
                    return 0
        return 0

    @property
    def label(self) -> str:
        return f"module_{self.id:04d}.{self.name}"


def scan(folder: Path) -> list[DumpModule]:
    """The modules of a dump folder, by id (files XLA did not name this way are ignored)."""
    mods: dict[int, DumpModule] = {}
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return []
    for p in entries:
        t = _TARGET_FILE.match(p.name)
        if t and p.is_file():
            mods.setdefault(int(t.group(1)), DumpModule(int(t.group(1)), t.group(2))).files["target"] = p
            continue
        m = _FILE.match(p.name)
        if not m or not p.is_file():
            continue
        mid, name, stage, extra, ext = int(m.group(1)), m.group(2), m.group(3), m.group(4), m.group(5)
        mod = mods.setdefault(mid, DumpModule(mid, name))
        if stage == "before_optimizations":
            mod.files.setdefault("before", p)
        elif extra == "-buffer-assignment":
            mod.files["buffers"] = p
        elif extra == "-memory-usage-report":
            mod.files["memory_report"] = p
        elif ext == "txt":
            mod.files["after"] = p
        else:
            mod.files["after_proto"] = p
    return [mods[k] for k in sorted(mods)]


def candidates(modules: list[DumpModule], declared: str | None = None) -> list[DumpModule]:
    """What a pruned dump keeps: the declared module(s) and the largest few others."""
    compiled = [m for m in modules if "after" in m.files or "after_proto" in m.files]
    keep = [m for m in compiled if declared and m.name == declared][-1:]
    for m in sorted(compiled, key=lambda m: (-m.size, -m.id)):
        if len(keep) >= CANDIDATES + (1 if declared else 0):
            break
        if m not in keep:
            keep.append(m)
    return sorted(keep, key=lambda m: m.id)


def prune(folder: Path, keep: list[DumpModule]) -> int:
    """Delete everything in *folder* (a dump profile-step made) but the kept modules' after-
    optimization module, buffer assignment and memory report; returns bytes freed."""
    wanted = {p.resolve() for m in keep for k, p in m.files.items() if k in KEEP_PER_MODULE}
    freed = 0
    for p in sorted(folder.iterdir()):
        if p.resolve() in wanted:
            continue
        try:
            if p.is_dir() and not p.is_symlink():
                freed += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
                shutil.rmtree(p)
            else:
                freed += p.stat().st_size
                p.unlink()
        except OSError:
            continue
    return freed
