"""``mutation_inproc.py`` with a first stage of plain calls (docs/testing.md, replay's second run).

    cd .mutation/MODULE/mutants
    python ../../../scripts/mutation_plain.py OUT 'tests.test_x:test_a,tests.test_y:test_b' 'NAME_GLOB' ... \\
        -- TESTS ; TESTS ; ...

The listed test functions are called directly, without starting pytest (a few tenths of a second a
mutant instead of seconds): they may take the ``build`` and ``tmp_path`` fixtures and one
``parametrize`` mark, nothing else.  A mutant that survives them goes through the pytest stages as
in ``mutation_inproc.py``.  OUT gets one line a mutant (``stage0 TEST ERROR`` for the plain stage);
mutants already in OUT are skipped, so a stopped run goes on where it was.  ``--timeout S`` (default
120) stops a mutant that runs longer (an endless loop) and records it as ``timeout``.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import itertools
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mutation_inproc import mutant_names, pytest_stages  # beside this script


def plain_calls(spec: str) -> list[tuple[str, Callable[..., Any], dict[str, Any]]]:
    """(label, function, arguments) of each listed test, one per parameter set."""
    calls = []
    for item in spec.split(","):
        mod, name = item.split(":")
        f = getattr(importlib.import_module(mod), name)
        marks = [m for m in getattr(f, "pytestmark", []) if m.name == "parametrize"]
        if not marks:
            calls.append((item, f, {}))
            continue
        names = marks[0].args[0]
        names = [x.strip() for x in (names.split(",") if isinstance(names, str) else names)]
        for values in marks[0].args[1]:
            values = values if isinstance(values, list | tuple) else (values,)
            calls.append((f"{item}{list(values)}", f, dict(zip(names, values, strict=True))))
    return calls


class MutantTimeout(BaseException):
    """Raised by the alarm in a mutant that runs past ``--timeout``."""


def main() -> int:
    sys.path.insert(0, os.getcwd())  # the mutated profiler of this mutants/ folder
    args = sys.argv[1:]
    limit = 120
    if "--timeout" in args:
        i = args.index("--timeout")
        limit, args = int(args[i + 1]), args[:i] + args[i + 2 :]
    timed_out: list[str] = []

    def alarm(signum: int, frame: Any) -> None:
        timed_out.append("timeout")
        raise MutantTimeout

    signal.signal(signal.SIGALRM, alarm)
    out, spec, sep = Path(args[0]), args[1], args.index("--")
    globs, stages = args[2:sep], [s.split() for s in " ".join(args[sep + 1 :]).split(";")]
    done = {line.split()[0] for line in out.read_text().splitlines() if line.strip()} if out.exists() else set()
    names = mutant_names(globs, skip=done)
    calls = plain_calls(spec)
    tmp = Path(tempfile.mkdtemp(prefix="mutation_plain"))
    counter = itertools.count()

    def build(builder: Any, name: str | None = None) -> Path:
        return builder.write(tmp / (name or f"export{next(counter)}.sqlite"))

    with out.open("a") as log:
        for name in names:
            os.environ["MUTANT_UNDER_TEST"] = name
            verdict, t0 = "survived", time.time()
            timed_out.clear()
            signal.alarm(limit)
            for label, f, kw in calls:
                wanted = f.__code__.co_varnames[: f.__code__.co_argcount]
                kw = {**kw, **({"build": build} if "build" in wanted else {})}
                kw |= {"tmp_path": Path(tempfile.mkdtemp(dir=tmp))} if "tmp_path" in wanted else {}
                try:
                    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                        f(**kw)
                except KeyboardInterrupt:
                    raise
                except BaseException as exc:  # a mutant may break anything
                    verdict = f"stage0 {label} {type(exc).__name__}"
                    break
            try:
                if verdict == "survived":
                    verdict = pytest_stages(stages)
            except MutantTimeout:
                pass
            signal.alarm(0)
            verdict = f"timeout {limit}s" if timed_out else verdict
            print(name, verdict, f"{time.time() - t0:.1f}s", file=log, flush=True)
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
