"""``mutation_inproc.py`` with a first stage of plain calls (docs/testing.md, replay's second run).

    cd .mutation/MODULE/mutants
    python ../../../scripts/mutation_plain.py [--timeout S] OUT 'tests.test_x:test_a,tests.test_y:test_b' \\
        'NAME_GLOB' ... -- TESTS ; TESTS ; ...

The listed test functions are called directly, without starting pytest (a few tenths of a second a
mutant instead of seconds): they may take the ``build`` and ``tmp_path`` fixtures and one
``parametrize`` mark, nothing else (a call that asks for another fixture stops the run before it
starts, and so does one that fails on the code as it is: either would count every mutant as
killed).  A mutant that survives them goes through the pytest stages as in ``mutation_inproc.py``.
OUT gets one line a mutant (``stage0 TEST ERROR`` for the plain stage); mutants already in OUT are
skipped, so a stopped run goes on where it was.  A mutant still running after ``--timeout`` seconds
(default 120) is stopped and written as ``timeout``: a mutant that loops forever does not hold up
the others (whether it really loops is for the reader to check).
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


class MutantTimeout(BaseException):
    """Raised by the alarm in a mutant that runs past its time limit (pytest reports it as a failure:
    ``EXPIRED`` tells them apart)."""


EXPIRED: list[bool] = [False]


def _expired(signum: int, frame: object) -> None:
    EXPIRED[0] = True
    raise MutantTimeout


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


def run_one(
    calls: list[tuple[str, Callable[..., Any], dict[str, Any]]], build: Any, tmp: Path, stages: list[list[str]]
) -> str:
    """The plain calls, then the pytest stages: the first failure, or ``survived``."""
    for label, f, kw in calls:
        wanted = f.__code__.co_varnames[: f.__code__.co_argcount]
        kw = {**kw, **({"build": build} if "build" in wanted else {})}
        kw |= {"tmp_path": Path(tempfile.mkdtemp(dir=tmp))} if "tmp_path" in wanted else {}
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                f(**kw)
        except (KeyboardInterrupt, MutantTimeout):
            raise
        except BaseException as exc:  # a mutant may break anything
            return f"stage0 {label} {type(exc).__name__}"
    return pytest_stages(stages)


def main() -> int:
    sys.path.insert(0, os.getcwd())  # the mutated profiler of this mutants/ folder
    args = sys.argv[1:]
    timeout = 120
    if "--timeout" in args[: args.index("--")]:
        i = args.index("--timeout")
        timeout, args = int(args[i + 1]), args[:i] + args[i + 2 :]
    out, spec, sep = Path(args[0]), args[1], args.index("--")
    # no stage after ``--``: the plain calls alone (a survivor is written ``survived`` at once)
    globs, stages = args[2:sep], [s.split() for s in " ".join(args[sep + 1 :]).split(";") if s.split()]
    done = {line.split()[0] for line in out.read_text().splitlines() if line.strip()} if out.exists() else set()
    names = mutant_names(globs, skip=done)
    calls = plain_calls(spec)
    for label, f, kw in calls:  # a fixture the plain stage does not give would "kill" every mutant
        wanted = set(f.__code__.co_varnames[: f.__code__.co_argcount]) - {"build", "tmp_path", *kw}
        if wanted:
            sys.exit(f"mutation_plain: {label} takes {', '.join(sorted(wanted))}: the plain stage gives only build, "
                     "tmp_path and one parametrize mark; leave it to a pytest stage")  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="mutation_plain"))
    counter = itertools.count()
    signal.signal(signal.SIGALRM, _expired)

    def build(builder: Any, name: str | None = None) -> Path:
        return builder.write(tmp / (name or f"export{next(counter)}.sqlite"))

    os.environ["MUTANT_UNDER_TEST"] = "none"  # no mutant: the plain calls must pass before they count as kills
    first = run_one(calls, build, tmp, [])
    if first != "survived":
        sys.exit(f"mutation_plain: the plain stage fails without a mutant ({first}): fix it before the run")

    with out.open("a") as log:
        for name in names:
            os.environ["MUTANT_UNDER_TEST"] = name
            verdict, t0 = "survived", time.time()
            EXPIRED[0] = False
            signal.alarm(timeout)
            try:
                verdict = run_one(calls, build, tmp, stages)
            except MutantTimeout:
                pass
            finally:
                signal.alarm(0)
            verdict = "timeout" if EXPIRED[0] else verdict
            print(name, verdict, f"{time.time() - t0:.1f}s", file=log, flush=True)
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
