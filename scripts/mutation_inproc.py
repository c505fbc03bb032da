"""Mutants of one scripts/mutation.sh module run in one process, stage by stage (docs/testing.md).

    cd .mutation/MODULE/mutants
    python ../../../scripts/mutation_inproc.py OUT 'NAME_GLOB' ... -- TESTS ; TESTS ; ...

mutmut's own runner starts pytest afresh for each mutant (imports included: 10 to 30 s a mutant on
the loaded shared machine).  mutmut's trampolines read ``MUTANT_UNDER_TEST`` at every call, so one
process can run them all: for each mutant (in the order of the globs), each stage of tests runs with
``pytest -x`` until one fails.  OUT gets one line a mutant: its name, the first stage that failed
and its first failure (or ``survived``), and the seconds.  Nothing in profiler caches a result
across calls, so one mutant cannot leak into the next.  Needs ``mutation.sh MODULE`` (or its
mutant generation) first, for ``mutants/`` and the ``.meta`` files that list the mutants.
"""

from __future__ import annotations

import contextlib
import fnmatch
import io
import json
import os
import sys
import time
from pathlib import Path


def mutant_names(globs: list[str], skip: set[str] = frozenset()) -> list[str]:  # type: ignore[assignment]
    """The generated mutants (mutants/profiler's ``.meta`` files) matching the globs, in their order."""
    keys: list[str] = []
    for meta in Path("profiler").rglob("*.meta"):
        keys += json.loads(meta.read_text())["exit_code_by_key"]
    keys.sort(key=lambda k: (k.rsplit("__mutmut_", 1)[0], int(k.rsplit("_", 1)[1])))
    names: list[str] = []
    for pattern in globs:
        names += [k for k in keys if fnmatch.fnmatch(k, pattern) and k not in names and k not in skip]
    return names


def pytest_stages(stages: list[list[str]]) -> str:
    """Each stage with ``pytest -x`` until one fails: ``stageN FIRST_FAILURE``, or ``survived``."""
    import pytest

    for i, stage in enumerate(stages, 1):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            try:
                rc = pytest.main([*stage, "-x", "-q", "-p", "no:cacheprovider"])
            except BaseException as exc:  # a mutant may break pytest itself
                rc = f"{type(exc).__name__}"
        if rc != 0:
            failed = [x for x in buf.getvalue().splitlines() if x.startswith(("FAILED", "ERROR"))]
            return f"stage{i} {failed[0][:160] if failed else rc}"
    return "survived"


def main() -> int:
    sys.path.insert(0, os.getcwd())  # the mutated profiler of this mutants/ folder
    args = sys.argv[1:]
    out, sep = Path(args[0]), args.index("--")
    globs, stages = args[1:sep], [s.split() for s in " ".join(args[sep + 1 :]).split(";")]
    with out.open("a") as log:
        for name in mutant_names(globs):
            os.environ["MUTANT_UNDER_TEST"] = name
            t0 = time.time()
            verdict = pytest_stages(stages)
            print(name, verdict, f"{time.time() - t0:.1f}s", file=log, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
