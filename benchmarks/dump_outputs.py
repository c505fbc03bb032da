"""Write what ``analyze --json`` (plain and ``--by step/layer/op``), ``findings --json`` and ``whatif --json`` print
for a set of traces, one file per trace and command, to check that a change leaves them as they were.

    python benchmarks/dump_outputs.py OUTDIR [TRACE ...]     # default: the shared real traces and sample_traces/
    diff -r BEFORE AFTER

Each command runs in this process (``profiler.cli.main``), its standard output and exit code kept.
A run folder (a trace beside its ``manifest.json``) is analyzed as the folder.
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

COMMANDS = {
    "analyze": ["analyze", "--json"],
    "step": ["analyze", "--json", "--by", "step"],
    "layer": ["analyze", "--json", "--by", "layer"],
    "op": ["analyze", "--json", "--by", "op"],
    "findings": ["findings", "--json"],
    "whatif": ["whatif", "--json"],
}


def default_traces() -> list[Path]:
    shared = sorted((ROOT.parent / "shared" / "traces").glob("*.sqlite"))
    samples = sorted((ROOT / "sample_traces").rglob("*.sqlite"))
    return shared + samples


def target(trace: Path) -> Path:
    return trace.parent if (trace.parent / "manifest.json").exists() else trace


def main() -> None:
    from profiler.cli import main as cli

    out = Path(sys.argv[1])
    traces = [Path(t) for t in sys.argv[2:]] or default_traces()
    out.mkdir(parents=True, exist_ok=True)
    for trace in traces:
        path = target(trace)
        stem = "__".join(path.resolve().parts[-2:]).replace(".sqlite", "")
        for name, args in COMMANDS.items():
            buf, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
                try:
                    rc = cli([*args, str(path)])
                except SystemExit as exc:
                    rc = exc.code
            (out / f"{stem}.{name}.json").write_text(f"rc={rc}\n{buf.getvalue()}")
            (out / f"{stem}.{name}.err").write_text(err.getvalue())
        print(path, flush=True)


if __name__ == "__main__":
    main()
