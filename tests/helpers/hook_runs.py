"""CPU run folders as the start-up hook leaves them: its ranges of a step and of ``jit_init``, and the
compiled.json that names their programs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from profiler.synthetic.export import ExportBuilder


def hook_export(folder: Path, step: str, pid: int, modules: list[dict[str, Any]]) -> Path:
    """In a new *folder*: the hook's ranges of *step* (program *pid*, 3 runs of 2 us) and ``jit_init``
    (program 1, once) in trace.sqlite (its path returned), and *modules* in compiled.json."""
    b = ExportBuilder()
    b.domain(1, "profile-step")
    b.nvtx(0, 9_000, "XlaModule:#hlo_module=jit_init,program_id=1#", domain_id=1)
    for t in (10_000, 20_000, 30_000):
        b.nvtx(t, t + 2_000, f"XlaModule:#hlo_module={step},program_id={pid}#", domain_id=1)
    folder.mkdir(parents=True)
    (folder / "compiled.json").write_text(json.dumps({"modules": modules, "notes": []}))
    return b.write(folder / "trace.sqlite")
