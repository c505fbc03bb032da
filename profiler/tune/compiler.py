"""Candidates compiled in the script's process (``profiler.capture.tune_session``), once per request
(the compile cache of a run), and predicted on the link against the memory limit: the evaluator
the search calls."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from profiler.analysis.links import HostLink
from profiler.capture.tune_session import CompileSession
from profiler.predict import roofline
from profiler.tune.candidate import Candidate, Name
from profiler.tune.evaluate import Compiled, Outcome, compiled_from
from profiler.units import human_time


class Compiler:
    """Compiles candidates in the script's process, once per request (the cache), and predicts them."""

    def __init__(
        self,
        session: CompileSession,
        out: Path,
        device: roofline.Device,
        link: HostLink,
        limit: int | None,
        options: dict[str, Any] | None = None,
        calibration: Any = None,
    ) -> None:
        self.session = session
        self.out = out
        self.device = device
        self.link = link.link
        self.limit = limit
        self.options = dict(options or {})
        self.calibration = calibration
        self.cache: dict[str, Compiled | None] = {}
        self.errors: dict[str, str] = {}
        self.compiles = 0
        self.seconds = 0.0
        self.echo: Callable[[str], None] = lambda s: None
        self.device_memory: int | None = None
        self.names: list[Name] = []  # for the candidates' labels in the progress lines

    def _key(self, c: Candidate) -> str:
        return c.key() + (repr(sorted(self.options.items())) if self.options else "")

    def cached(self, c: Candidate) -> bool:
        return self._key(c) in self.cache

    def compiled(self, c: Candidate) -> Compiled | None:
        key = self._key(c)
        if key not in self.cache:
            self.compiles += 1
            where = self.out / f"c{self.compiles:03d}"
            t0 = time.monotonic()
            ans = self.session.request({"op": "compile", "policy": c.policy_doc(), "out": str(where),
                                        "options": self.options})  # fmt: skip
            self.seconds += time.monotonic() - t0
            if ans.get("ok"):
                comp = compiled_from(ans, key, self.device)
                comp.calibration = self.calibration
                self.cache[key] = comp
            else:
                self.cache[key] = None
                self.errors[key] = str(ans.get("error"))
            out = self.outcome(c)
            state = "failed" if out is None else human_time(out.step_ns) + ("" if out.fits else ", does not fit")
            self.echo(f"tune: compile {self.compiles}: {c.label(self.names)}: {state} ({time.monotonic() - t0:.1f} s)")
        return self.cache[key]

    def outcome(self, c: Candidate) -> Outcome | None:
        comp = self.cache.get(self._key(c))
        return comp.outcome(self.link, self.limit) if comp is not None else None

    def __call__(self, c: Candidate) -> Outcome | None:
        self.compiled(c)
        return self.outcome(c)
