"""Whether a mutant changes what users see on the shared real traces (scripts/mutation.sh's last stage).

    python mutation_golden.py write GOLDEN_DIR [whatif]   # the documents with no mutant active
    python mutation_golden.py check GOLDEN_DIR [whatif]   # exit 1 at the first document that differs

Run from a mutmut ``mutants/`` folder (its profiler is the one imported) with ``MUTANT_UNDER_TEST`` set
for ``check``.  The documents are ``profile-step analyze --json`` (and with ``whatif``, ``whatif --json``)
of every export in $PROFILE_STEP_SHARED/traces, made in this process by the CLI's own main().
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path


def documents(with_whatif: bool) -> dict[str, str]:
    sys.path.insert(0, os.getcwd())  # the mutated profiler of this mutants/ folder
    from profiler.cli import main

    traces = Path(os.environ["PROFILE_STEP_SHARED"]) / "traces"
    out: dict[str, str] = {}
    for path in sorted(traces.glob("*.sqlite")):
        for command in ("analyze", "whatif") if with_whatif else ("analyze",):
            buf = io.StringIO()
            try:
                with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
                    rc = main([command, "--json", str(path)])
            except Exception as exc:  # a mutant may crash: that changes the output too
                rc = f"{type(exc).__name__}: {exc}"
            out[f"{path.stem}.{command}.json"] = f"{rc}\n{buf.getvalue()}"
    return out


def main() -> int:
    mode, golden = sys.argv[1], Path(sys.argv[2])
    docs = documents(len(sys.argv) > 3 and sys.argv[3] == "whatif")
    if mode == "write":
        golden.mkdir(parents=True, exist_ok=True)
        for name, text in docs.items():
            (golden / name).write_text(text)
        return 0
    for name, text in docs.items():
        if (golden / name).read_text() != text:
            print(f"changes {name}")
            return 1
    print(f"same {len(docs)} documents")
    return 0


if __name__ == "__main__":
    sys.exit(main())
