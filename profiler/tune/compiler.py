"""Candidates compiled in the script's process (``profiler.capture.tune_session``), once per request
(the compile cache of a run; with a ``Record``, once per step, target and flags across runs), and
predicted on the link against the memory limit: the evaluator the search calls."""

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
from profiler.tune.record import Record
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
        record: Record | None = None,
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
        self.record = record
        self.reused = 0  # answers taken from the record instead of compiling
        self.reused_keys: set[str] = set()
        self.echo: Callable[[str], None] = lambda s: None
        self.device_memory: int | None = None
        self.names: list[Name] = []  # for the candidates' labels in the progress lines

    def _key(self, c: Candidate) -> str:
        return c.key() + (repr(sorted(self.options.items())) if self.options else "")

    def cached(self, c: Candidate) -> bool:
        """Whether *c* costs no compile: compiled in this run, or kept in the record."""
        return self._key(c) in self.cache or (self.record is not None and self.record.has(c))

    def _reuse(self, c: Candidate) -> dict[str, Any] | None:
        """The record's answer for *c* (its HLO copied into ``rNNN``), or None."""
        if self.record is None:
            return None
        ans = self.record.get(c, self.out / f"r{self.reused + 1:03d}")
        if ans is not None:
            self.reused += 1
            self.reused_keys.add(self._key(c))
        return ans

    def compiled(self, c: Candidate) -> Compiled | None:
        key = self._key(c)
        if key not in self.cache:
            t0 = time.monotonic()
            ans = self._reuse(c)
            if ans is None:
                self.compiles += 1
                where = self.out / f"c{self.compiles:03d}"
                ans = self.session.request({"op": "compile", "policy": c.policy_doc(), "out": str(where),
                                            "options": self.options})  # fmt: skip
                self.seconds += time.monotonic() - t0
                if self.record is not None:
                    self.record.put(c, ans)
            if ans.get("ok"):
                comp = compiled_from(ans, key, self.device)
                comp.calibration = self.calibration
                self.cache[key] = comp
            else:
                self.cache[key] = None
                self.errors[key] = str(ans.get("error"))
            out = self.outcome(c)
            state = "failed" if out is None else human_time(out.step_ns) + ("" if out.fits else ", does not fit")
            what = "kept (compiled by an earlier tune)" if key in self.reused_keys else f"compile {self.compiles}"
            self.echo(f"tune: {what}: {c.label(self.names)}: {state} ({time.monotonic() - t0:.1f} s)")
        return self.cache[key]

    def outcome(self, c: Candidate) -> Outcome | None:
        comp = self.cache.get(self._key(c))
        return comp.outcome(self.link, self.limit) if comp is not None else None

    def __call__(self, c: Candidate) -> Outcome | None:
        self.compiled(c)
        return self.outcome(c)
